"""The one argparse parser class of every ``fsdp-observe`` command.

argparse prints a usage block and exits on a mistake; ``OneLineParser`` raises
``observe.errors.UserError`` instead, so the dispatcher prints one line,
``error: COMMAND: PROBLEM; FIX``, with exit status 2 like every other user mistake.
Standard library only.
"""

from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

from observe.errors import UserError

_UNKNOWN = re.compile(r"unrecognized arguments: (.+)")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage mistakes raise ``UserError`` (one line) instead of printing usage.

    An unknown flag gets a did-you-mean from the parser's own flags. Subclasses may override
    ``hint`` to add a command-specific fix to argparse's message.
    """

    def error(self, message: str) -> NoReturn:
        """Raise a ``UserError``; argparse calls this for every mistake.

        ``argument --flag: problem[; fix]`` becomes field ``--flag``; anything else (unknown
        arguments, a missing required flag) is the command's own field. The fix is the one the
        message carries after ``; `` (a ``type=`` function's), else ``hint(message)``.
        """
        field, problem = self.prog, message
        if message.startswith("argument ") and ": " in message:
            names, problem = message.removeprefix("argument ").split(": ", 1)
            field = names.split("/")[-1]
        problem, _, fix = problem.partition("; ")
        raise UserError(field, problem, fix or self.hint(message))

    def hint(self, message: str) -> str:
        """The fix appended to argparse's ``message``: a close flag, else ``--help``."""
        unknown = _UNKNOWN.match(message)
        if unknown:
            flag = unknown.group(1).split()[0].split("=")[0]
            names = {f.lstrip("-"): f for f in self.flags() if f.startswith("--")}
            close = difflib.get_close_matches(flag.lstrip("-"), names, n=1, cutoff=0.75)
            if close:
                return f"did you mean {names[close[0]]}? (run '{self.prog} --help' for the flags)"
        return f"run '{self.prog} --help' for the flags"

    def flags(self) -> list[str]:
        """Every long and short option string this parser accepts."""
        return [s for action in self._actions for s in action.option_strings]
