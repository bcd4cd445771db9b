"""The pseudo-terminal helper the TUI's end-to-end tests wait on: it must keep reading.

A child that writes more than a pseudo-terminal holds blocks until someone reads; CI once
hung that way in ``test_installs`` (``top`` had 40 KB of frames to write after ``q``, and the
test waited with ``proc.wait`` alone).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.terminal import wait_exit

WRITES_A_LOT = "import sys; sys.stdout.write('x' * 400_000); sys.stdout.flush(); sys.exit(3)"


def _on_a_terminal(code: str) -> tuple[int, subprocess.Popen]:
    main, child = os.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=child, stdout=child, stderr=child)
    os.close(child)
    return main, proc


def test_a_child_with_more_output_than_the_terminal_holds_exits_while_read() -> None:
    main, proc = _on_a_terminal(WRITES_A_LOT)
    try:
        status, shown = wait_exit(main, proc, 30)
    finally:
        proc.kill()
        os.close(main)
    assert status == 3
    assert shown.count("x") == 400_000  # everything it showed, the last write included


def test_the_same_child_blocks_when_nobody_reads() -> None:
    """Why ``proc.wait`` alone is not enough: the write never completes."""
    main, proc = _on_a_terminal(WRITES_A_LOT)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        assert wait_exit(main, proc, 30)[0] == 3
    finally:
        proc.kill()
        os.close(main)


def test_a_child_that_does_not_exit_is_a_timeout() -> None:
    main, proc = _on_a_terminal("import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(main, proc, 0.5)
    finally:
        proc.kill()
        proc.wait()
        os.close(main)
