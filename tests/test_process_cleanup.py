"""After a failure or a timeout the tests kill what a command started, also in sessions of its own
(``tests.support.stop_stress.kill_tree``, ``run_to_end``): the demo's agent and torchrun's ranks are
started that way, and left behind they loaded the machine for every test after (seen in a parallel
run: three agents still running 20-40 minutes after their demo was killed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import wait_for
from tests.support.stop_stress import kill_tree, run_to_end

#: A parent that starts a child in a session of its own (as the demo starts its agent), writes the
#: child's pid to the file it is given, and waits.
PARENT = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], start_new_session=True); "
    "open(sys.argv[1], 'w').write(str(child.pid)); time.sleep(300)"
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_kill_tree_takes_a_child_in_another_session_with_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    proc = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file)])
    try:
        child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), timeout=60, what="the child's pid"))
        assert alive(child)
    finally:
        kill_tree(proc)
    assert proc.returncode is not None
    wait_for(lambda: not alive(child), timeout=10, what="the child to be gone")


def test_a_run_past_its_timeout_is_killed_and_says_so() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        run_to_end([sys.executable, "-c", "import time; time.sleep(300)"], timeout=0.5)


def test_a_run_to_its_end_gives_its_status_and_output() -> None:
    done = run_to_end(
        [sys.executable, "-c", "print('out'); raise SystemExit(3)"], timeout=60, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "")
