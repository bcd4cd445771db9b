"""The turns that let a ``serial`` test run alone under pytest-xdist (``tests.support.turns``), with
threads standing in for workers (``flock`` locks of separate opens conflict within one process too).
Whether a thread is blocked on a lock is read from ``/proc/locks``, never guessed from a sleep. And
the hook that takes them, in a real ``pytest -n 3`` run of a few sleeping tests."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.processes import REPO, wait_for
from tests.support.turns import turn


class Worker(threading.Thread):
    """Takes a turn, notes when it got it, holds it until ``release`` is set."""

    def __init__(self, folder: Path, name: str, alone: bool, log: list[str]) -> None:
        super().__init__(name=name, daemon=True)
        self.folder, self.alone, self.log = folder, alone, log
        self.entered, self.release = threading.Event(), threading.Event()

    def run(self) -> None:
        with turn(self.folder, self.alone):
            self.log.append(self.name)
            self.entered.set()
            self.release.wait(30)


def blocked_on(path: Path) -> int:
    """How many lock requests wait on ``path`` (``/proc/locks`` lines marked ``->``)."""
    inode = f":{os.stat(path).st_ino} "
    return sum(1 for line in Path("/proc/locks").read_text().splitlines() if "->" in line and inode in line)


def test_a_serial_test_waits_for_the_running_ones_and_holds_off_new_ones(tmp_path: Path) -> None:
    log: list[str] = []
    running = Worker(tmp_path, "running", alone=False, log=log)
    running.start()
    assert running.entered.wait(10)
    beside = Worker(tmp_path, "beside", alone=False, log=log)  # shared turns run side by side
    beside.start()
    assert beside.entered.wait(10)

    serial = Worker(tmp_path, "serial", alone=True, log=log)
    serial.start()
    wait_for(lambda: blocked_on(tmp_path / "tests-turn.lock") == 1, what="the serial test to wait for its turn")
    later = Worker(tmp_path, "later", alone=False, log=log)
    later.start()
    wait_for(lambda: blocked_on(tmp_path / "tests-gate.lock") == 1, what="a new test to wait at the gate")

    running.release.set()
    running.join(10)
    assert not serial.entered.wait(0.2)  # one test still runs
    beside.release.set()
    assert serial.entered.wait(10)
    assert not later.entered.wait(0.2)  # nothing starts beside the serial test
    serial.release.set()
    assert later.entered.wait(10)
    later.release.set()
    later.join(10)
    assert log == ["running", "beside", "serial", "later"]


#: Tests for an inner run: each notes its name, start and end; the serial ones must overlap nothing.
INNER_TESTS = """
import time
import pytest

def note(name, took):
    start = time.time()
    time.sleep(took)
    with open("spans.txt", "a") as spans:
        spans.write(f"{name} {start} {time.time()}\\n")

@pytest.mark.serial("checked alone")
@pytest.mark.parametrize("i", range(3))
def test_alone(i):
    note(f"alone{i}", 0.4)
"""
SHARED_TESTS = """
import pytest
from test_alone import note

@pytest.mark.parametrize("i", range(8))
def test_shared(i):
    note(f"{__name__}{i}", 0.3)
"""


def test_under_xdist_a_serial_test_overlaps_no_other_and_the_rest_run_side_by_side(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    (tmp_path / "conftest.py").write_text("from tests.support.turns import pytest_runtest_protocol  # noqa\n")
    (tmp_path / "test_alone.py").write_text(INNER_TESTS)
    for name in ("test_shared_a", "test_shared_b"):
        (tmp_path / f"{name}.py").write_text(SHARED_TESTS)
    env = {k: v for k, v in subprocess_env.items() if not k.startswith("PYTEST_XDIST")}  # not a worker itself
    env["PYTHONPATH"] = str(REPO)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "3", "--dist", "loadfile"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    spans = [(name, float(a), float(b)) for name, a, b in (line.split() for line in open(tmp_path / "spans.txt"))]
    alone = [s for s in spans if s[0].startswith("alone")]
    others = [s for s in spans if not s[0].startswith("alone")]
    assert (len(alone), len(others)) == (3, 16)

    def overlap(one: tuple[str, float, float], other: tuple[str, float, float]) -> bool:
        return one[1] < other[2] and other[1] < one[2]

    assert not [(a[0], o[0]) for a in alone for o in others if overlap(a, o)]
    assert any(overlap(o, p) for o in others for p in others if o is not p)  # the others ran side by side
