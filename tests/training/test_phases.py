"""Phase clock, goodput across restarts, and the process start time."""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.catalog import TRAIN_PHASES
from observe.training.phases import Goodput, PhaseClock, process_start_time


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_seconds_per_phase_include_the_running_one() -> None:
    clock = Clock()
    phases = PhaseClock("loading_weights", clock=clock, already=2.0)
    clock.now += 3
    phases.enter("training")
    clock.now += 10
    phases.enter("checkpointing")
    clock.now += 1
    phases.enter("training")
    clock.now += 4
    seconds = phases.seconds()
    assert set(seconds) == set(TRAIN_PHASES)
    assert seconds["loading_weights"] == 5 and seconds["training"] == 14 and seconds["checkpointing"] == 1
    assert seconds["restarting"] == 0 and phases.current == "training"


def test_unknown_phase_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown phase 'idle'"):
        PhaseClock("training").enter("idle")


def test_goodput_counts_only_kept_steps_over_the_runs_wall_time() -> None:
    """A run started at t=0; its checkpoint banked 40 s of steps; this attempt adds 10 s at t=100."""
    clock = Clock(100.0)
    goodput = Goodput(run_started=0.0, productive_seconds=40.0, clock=clock)
    for _ in range(10):
        goodput.add_step(1.0)
    assert goodput.ratio() == pytest.approx(0.5)
    assert Goodput(run_started=100.0, clock=clock).ratio() is None  # no wall time yet


def test_process_start_time_from_proc(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # pid (comm with spaces and a ')') state ppid ... field 22 = starttime in clock ticks
    fields = ["S"] + ["0"] * 18 + ["500"] + ["0"] * 10
    stat.write_text("42 (a (b) c) " + " ".join(fields))
    proc_stat = tmp_path / "proc-stat"
    proc_stat.write_text("cpu  1 2 3\nbtime 1000\n")
    import os

    assert process_start_time(str(stat), str(proc_stat)) == pytest.approx(1000 + 500 / os.sysconf("SC_CLK_TCK"))
    assert process_start_time(str(tmp_path / "missing"), str(proc_stat)) > 1e9  # falls back to now
