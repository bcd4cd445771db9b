"""A real pseudo-terminal for programs that need one (the TUI): read what it shows."""

from __future__ import annotations

import os
import re
import select
import time


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
            text = re.sub(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-B]|\x1b[=>]", "", seen.decode("utf-8", "replace"))
            if re.search(pattern, text):
                return text
    raise AssertionError(f"{pattern!r} did not appear within {timeout} s; the terminal showed:\n{seen[-3000:]!r}")
