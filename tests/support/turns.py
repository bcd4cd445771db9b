"""Turns between pytest-xdist workers: most tests run side by side, a ``serial`` one runs alone.

Two lock files in a folder the workers share, held with ``flock`` (Linux). Every test first takes
the gate. A test that may share the machine then takes the turn lock shared and lets the gate go,
so any number run at once. A test that must run alone takes the turn lock exclusively, which waits
until the tests already running end, and keeps the gate until it ends itself, so no test starts
beside it meanwhile; holding the gate also means a waiting ``serial`` test is never starved by
workers that keep starting new tests.

``pytest_runtest_protocol`` is the hook that takes the turns; ``tests/conftest.py`` imports it, so
pytest finds it there.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def turn(folder: Path, alone: bool) -> Iterator[None]:
    """Hold a turn to run one test: shared with other workers' tests, or ``alone``. Blocks until the
    turn comes; ``folder`` must be the same for every worker of the run (it must exist)."""
    with open(folder / "tests-gate.lock", "a") as gate, open(folder / "tests-turn.lock", "a") as turn_lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(turn_lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
            yield
        finally:
            fcntl.flock(turn_lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under ``-n`` (pytest-xdist), a test marked ``serial`` runs alone: from its fixtures' set-up to
    their teardown no other worker runs a test. Without ``-n``, nothing. The lock files lie in the
    folder above the worker's base temporary folder, which all the run's workers share."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    folder = item.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    with turn(folder, alone=item.get_closest_marker("serial") is not None):
        yield
