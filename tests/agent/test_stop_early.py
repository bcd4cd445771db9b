"""A stop signal in the agent's first moments is handled like any other (exit 0, no traceback).

Before: the handlers were installed after the command's imports (the node-health HTTP client
alone took about 0.2 s), so a SIGTERM in the first ~0.45 s after exec killed the agent with the
default action (-15) and a SIGINT printed a KeyboardInterrupt traceback from an import. To hit
that window every time instead of by chance, the child process's audit hook holds the import of
``httpx`` (the slow one, imported on the agent's start-up path) for a few seconds and says so on
stderr; the test sends the signal then. The agent itself runs unchanged (GPUs from the stand-in
NVML library, tests/support/fake_nvml.c).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO, wait_for

#: The child: an audit hook that holds the first import of httpx, then the agent as its command line runs it.
HELD_IMPORT = """
import sys, time
def hold(event, args):
    if event == "import" and args[0] == "httpx" and not getattr(hold, "done", False):
        hold.done = True
        print("holding the httpx import", file=sys.stderr, flush=True)
        time.sleep(5)
sys.addaudithook(hold)
from observe.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_agents_imports_stops_it_quietly(fake_nvml, tmp_path: Path, signum: int) -> None:
    stderr_path, kernel_log = tmp_path / "agent.stderr", tmp_path / "kern.log"
    kernel_log.write_text("")
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", HELD_IMPORT, "agent", "--port", "0", "--kernel-log", str(kernel_log)],
            cwd=REPO,
            env=fake_nvml.env(),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_for(lambda: b"holding the httpx import" in stderr_path.read_bytes(), timeout=60, what="the held import")
        proc.send_signal(signum)
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = stderr_path.read_text()
    assert status == 0, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text


def test_the_agents_command_module_imports_nothing_slow() -> None:
    """What runs before the handlers: the dispatcher and the agent command's module, standard library and leaves."""
    probe = "import sys, observe.cli.agent; print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True).stdout.split())
    slow = {"httpx", "pynvml", "prometheus_client", "observe.agent.run", "observe.agent.node_health", "yaml", "psutil"}
    assert not loaded & slow, loaded & slow
