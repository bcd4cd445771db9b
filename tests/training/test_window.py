"""Log windows: step counts per window and per-device vs global tokens/s (trainer-metrics.md)."""

from __future__ import annotations

import pytest

from observe.training.window import LogWindow, WindowStats, is_log_step


class FakeClock:
    """A settable clock: the test decides how much wall time passes."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_log_steps_are_first_every_nth_and_last() -> None:
    assert [s for s in range(1, 26) if is_log_step(s, 10, 25)] == [1, 10, 20, 25]


def test_windows_hold_the_steps_really_in_them() -> None:
    clock = FakeClock()
    window = LogWindow(start_step=0, clock=clock)
    sizes = []
    for step in range(1, 21):
        clock.now += 0.5
        window.add(0.1, 100)
        if is_log_step(step, 10, 20):
            stats = window.close(step)
            sizes.append(stats.steps)
            assert stats.step_seconds == pytest.approx(0.5)
            assert stats.data_wait_ratio == pytest.approx(0.2)
    assert sizes == [1, 9, 10]


def test_window_after_resume_at_96_holds_4_steps() -> None:
    clock = FakeClock()
    window = LogWindow(start_step=96, clock=clock)
    for _ in range(4):
        clock.now += 2.0
        window.add(0.0, 10)
    stats = window.close(100)
    assert stats.steps == 4
    assert stats.step_seconds == pytest.approx(2.0)


def test_close_must_advance() -> None:
    window = LogWindow(start_step=10)
    with pytest.raises(ValueError, match="does not advance"):
        window.close(10)


def test_tokens_per_second_vector_8_ranks() -> None:
    """8 ranks x 4 sequences x 4096 tokens per 1.0 s step: 16,384/s per device, 131,072 global."""
    per_rank = [WindowStats(steps=1, seconds=1.0, data_wait_seconds=0.0, labelled_tokens=4 * 4096) for _ in range(8)]
    assert per_rank[0].tokens_per_second == 16_384
    assert sum(w.tokens_per_second for w in per_rank) == 131_072


def _windows(metrics, steps: list[float], start: float = 100.0) -> list[WindowStats]:
    """Run steps of the given durations through ``TrainingMetrics`` on a made-up clock; its windows."""
    windows: list[WindowStats] = []
    metrics.on_window = lambda report: windows.append(report.stats)
    now = start
    for seconds in steps:
        metrics.begin_step(at=now)
        now += seconds
        metrics.end_step(now=now)
    return windows


def test_the_first_step_of_a_process_is_left_out_of_the_steady_step_time() -> None:
    """Before: the step-1 window (warm-up alone) gave the log an ETA of 8:39 for a 97 s run."""
    from observe.training import TrainingMetrics

    m = TrainingMetrics(planned_steps=20, serve=False, log_every=10)
    first, second, third = _windows(m, [5.0] + [0.5] * 19)
    assert (first.steps, first.warmup_steps, first.step_seconds) == (1, 1, 5.0)
    assert first.steady_step_seconds is None  # nothing but warm-up yet: no rate to predict with
    assert (second.steps, second.warmup_steps) == (9, 0)
    assert second.steady_step_seconds == pytest.approx(0.5) == second.step_seconds
    assert third.steady_step_seconds == pytest.approx(0.5)
    m.close(linger_seconds=0)


def test_after_a_resume_the_first_window_leaves_its_warm_up_step_out() -> None:
    from observe.training import TrainingMetrics

    m = TrainingMetrics(planned_steps=100, serve=False, log_every=10)
    m.checkpoint_loaded(step=96, seconds=1.0, saved_at=0.0)
    (window,) = _windows(m, [3.0, 1.0, 1.0, 1.0])
    assert (window.steps, window.warmup_steps) == (4, 1)
    assert window.step_seconds == pytest.approx(1.5)  # the logged window figure, as trainer-metrics.md defines it
    assert window.steady_step_seconds == pytest.approx(1.0)  # what the ETA uses
    m.close(linger_seconds=0)
