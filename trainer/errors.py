"""The one exception type for user mistakes: it names the flag and the fix."""

from __future__ import annotations


class ConfigError(ValueError):
    """A setting the user gave cannot work.

    Printed as one line, ``error: FLAG: PROBLEM; FIX``, with exit status 2 and no traceback.

    Args:
        flag: the command-line flag (or setting name) at fault, e.g. ``--seq-len``.
        problem: what is wrong with the value given.
        fix: what to do instead.
    """

    exit_status = 2

    def __init__(self, flag: str, problem: str, fix: str) -> None:
        self.flag, self.problem, self.fix = flag, problem, fix
        super().__init__(f"{flag}: {problem}; {fix}")
