"""One-line usage errors for every ``fsdp-observe`` subcommand.

A user mistake is printed as one line, ``error: FLAG: PROBLEM; FIX``, with exit status 2 and no
traceback or usage block. Standard library only, so the agent, the TUI and the other commands
can all share it without importing each other.
"""

from __future__ import annotations

import argparse


class UsageError(ValueError):
    """A flag, file or setting that cannot work.

    Either ``UsageError(flag, problem, fix)`` (printed ``FLAG: PROBLEM; FIX``) or
    ``UsageError(message)`` for a message already in that shape.
    """

    exit_status = 2

    def __init__(self, flag_or_message: str, problem: str | None = None, fix: str | None = None) -> None:
        self.flag = flag_or_message if problem is not None else None
        self.problem, self.fix = problem, fix
        text = flag_or_message if problem is None else f"{flag_or_message}: {problem}"
        super().__init__(text if fix is None else f"{text}; {fix}")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage mistakes raise ``UsageError`` (one line) instead of printing usage.

    Subclasses may override ``hint`` to add a command-specific fix to argparse's message.
    """

    def error(self, message: str):  # noqa: ANN201 - argparse's hook
        raise UsageError(self.prog, message, self.hint(message))

    def hint(self, message: str) -> str:
        """The fix appended to argparse's ``message``."""
        return f"run '{self.prog} --help' for the flags"
