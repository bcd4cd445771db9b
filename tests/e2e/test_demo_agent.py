"""``fsdp-observe demo`` end to end: it starts a node agent, prints its URL, and reports what it saw."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.support.processes import REPO


def free_port_pair() -> int:
    """A base port whose next port is free too (the demo's two ranks)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
            return base
    raise AssertionError("no two consecutive free ports")


def test_demo_starts_an_agent_and_summarises_it() -> None:
    done = subprocess.run([sys.executable, "-m", "observe.cli", "demo", "--steps", "6", "--log-every", "3",
                           "--metrics-port", str(free_port_pair()), "--agent-port", "0"],
                          cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "node agent: http://127.0.0.1:" in out
    for label in ("node agent", "agent: CPU", "agent: memory", "agent: GPUs", "agent: XID errors"):
        assert f"\n{label} " in out, out
