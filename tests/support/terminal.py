"""A real pseudo-terminal for programs that need one (the TUI): read what it shows."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time

_ESCAPES = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]")


def _read(fd: int, seconds: float) -> bytes | None:
    """What the terminal has within ``seconds`` (``b""``: nothing yet); ``None`` once the child closed it."""
    if not select.select([fd], [], [], seconds)[0]:
        return b""
    try:
        return os.read(fd, 65536) or None
    except OSError:  # the child closed the terminal
        return None


def _shown(seen: bytes) -> str:
    return _ESCAPES.sub("", seen.decode("utf-8", "replace"))


def read_until(fd: int, pattern: str, timeout: float) -> str:
    """Everything the terminal showed until ``pattern`` appeared (escape sequences removed)."""
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = _read(fd, 0.2)
        if chunk is None:
            break
        if chunk:
            seen += chunk
            if re.search(pattern, _shown(seen)):
                return _shown(seen)
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
        chunk = _read(fd, 0.1)
        if chunk is None:
            proc.wait(max(0.0, deadline - time.monotonic()))
        else:
            seen += chunk
    while chunk := _read(fd, 0):  # what it wrote just before it exited
        seen += chunk
    return proc.returncode, _shown(seen)
