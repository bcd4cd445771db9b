"""A real pseudo-terminal for programs that need one (the TUI): read what it shows."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time

_ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]")


def read_until(fd: int, pattern: str, timeout: float) -> str:
    """Everything the terminal showed until ``pattern`` appeared (escape sequences removed)."""
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            text = _ESCAPES.sub("", seen.decode("utf-8", "replace"))
            if re.search(pattern, text):
                return text
    raise AssertionError(f"{pattern!r} did not appear within {timeout} s; the terminal showed:\n{seen[-3000:]!r}")


def wait_exit(fd: int, proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """``proc``'s exit status and what the terminal showed until then, reading all the while.

    A real terminal always reads. A pseudo-terminal nobody reads holds about 40 KB; a TUI that
    has more to draw than that (a few seconds of refreshes, then its exit) blocks in ``write``
    and never exits. ``proc.wait`` alone on a TUI's terminal can therefore hang.

    Raises:
        subprocess.TimeoutExpired: ``proc`` still runs after ``timeout`` seconds.
    """
    seen, deadline = b"", time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout)
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                proc.wait(max(0.0, deadline - time.monotonic()))
    while select.select([fd], [], [], 0)[0]:  # what it wrote just before it exited
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return proc.returncode, _ESCAPES.sub("", seen.decode("utf-8", "replace"))
