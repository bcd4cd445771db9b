"""The compute / collective-wait split a rank's ``/debug/state`` gives ``fsdp-observe diagnose``."""

from __future__ import annotations

from observe.training.collectives import CollectiveTracker
from observe.training.forensics import MEDIAN_STEPS, RankForensics


def _rank_after(steps: list[tuple[float, float]]) -> RankForensics:
    """A rank's real ``RankForensics`` after steps of (compute, collective wait) seconds."""
    tracker = CollectiveTracker()
    forensics = RankForensics(
        tracker, {"rank": 0}, phase=lambda: "training", step=lambda: 0, flight_status=lambda: None
    )
    for i, (compute, wait) in enumerate(steps):
        tracker.wait_seconds += wait
        forensics.step_ended(i, 0.0, compute + wait, 0.0)
    return forensics


def test_a_few_slow_steps_do_not_move_the_figures_the_straggler_verdict_reads() -> None:
    """Before: means, so 4 steps of 64 slowed to 2 s by the host (a GC pause, a neighbour's burst)
    made a 100 ms rank read 219 ms, more than a real straggler's excess."""
    steps = [(0.1, 0.3)] * (MEDIAN_STEPS - 4) + [(2.0, 0.0)] * 4
    split = _rank_after(steps).state_json(stack=False)["split"]
    assert split["recent_steps"] == MEDIAN_STEPS
    assert abs(split["recent_compute_seconds"] - 0.1) < 1e-9
    assert abs(split["recent_collective_wait_seconds"] - 0.3) < 1e-9


def test_a_rank_slow_on_most_steps_reads_slow() -> None:
    steps = [(0.1, 0.3)] * 20 + [(0.9, 0.0)] * (MEDIAN_STEPS - 20)
    split = _rank_after(steps).state_json(stack=False)["split"]
    assert abs(split["recent_compute_seconds"] - 0.9) < 1e-9 and split["recent_collective_wait_seconds"] == 0.0


def test_only_the_last_steps_count() -> None:
    steps = [(5.0, 0.0)] * 100 + [(0.2, 0.1)] * MEDIAN_STEPS
    split = _rank_after(steps).state_json(stack=False)["split"]
    assert abs(split["recent_compute_seconds"] - 0.2) < 1e-9
