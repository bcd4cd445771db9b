"""``fsdp-observe demo`` on a terminal opens ``fsdp-observe top`` over its run; ``q`` closes it and
stops the run cleanly. A real pseudo-terminal (``os.openpty``) stands in for the user's."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios

from tests.support.terminal import read_until


def test_the_demo_opens_the_tui_on_a_terminal_and_q_stops_the_run(port_block, subprocess_env) -> None:
    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    env = {**subprocess_env, "TERM": "xterm-256color", "COLUMNS": "140", "LINES": "40"}
    proc = subprocess.Popen([sys.executable, "-m", "observe.cli", "demo", "--steps", "5000", "--log-every", "5",
                             "--metrics-port", str(port_block(2))], stdin=child, stdout=child, stderr=child,
                            env=env, start_new_session=True)
    os.close(child)
    try:
        read_until(main, r"Cluster .*1 agent, 2 trainer endpoints", 60)
        read_until(main, r"\bok\b", 60)  # the node's row
        os.write(main, b"q")
        text = read_until(main, r"exit status\s+\d+", 90)
        assert proc.wait(timeout=60) == 130  # as Ctrl-C: the same status in the summary, the JSON log and the shell
        assert "the terminal UI was closed; stopping the run" in text and "stopped (the terminal UI was closed)" in text
        assert re.search(r"exit status\s+130", text)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
