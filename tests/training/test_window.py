"""Log windows: step counts per window and per-device vs global tokens/s (trainer-metrics.md)."""

from __future__ import annotations

import pytest

from observe.training.tensors import Accumulator
from observe.training.window import OpenWindow, WindowStats, is_log_step
from tests.support.sync_probe import SyncProbe, probe


def test_log_steps_are_first_every_nth_and_last() -> None:
    assert [s for s in range(1, 26) if is_log_step(s, 10, 25)] == [1, 10, 20, 25]


def tokens(n: int) -> Accumulator:
    counted = Accumulator()
    counted.add(n)
    return counted


def test_windows_hold_the_steps_really_in_them() -> None:
    window, now, sizes = OpenWindow(), 100.0, []
    for step in range(1, 21):
        started, now = now, now + 0.5
        window.add_step(started, now, data_wait=0.1, tokens=tokens(100), first=step == 1)
        if is_log_step(step, 10, 20):
            stats, _ = window.stats(now, None)
            window.restart(now)
            sizes.append(stats.steps)
            assert stats.step_seconds == pytest.approx(0.5)
            assert stats.data_wait_ratio == pytest.approx(0.2)
            assert stats.labelled_tokens == 100 * stats.steps
    assert sizes == [1, 9, 10]


def test_device_tokens_are_counted_in_when_the_window_is_read() -> None:
    window, on_device = OpenWindow(), Accumulator()
    on_device.add(probe(7.0))
    before = SyncProbe.total()
    window.add_step(0.0, 1.0, data_wait=None, tokens=on_device, first=False)
    assert SyncProbe.total() == before and window.device_tokens.device is not None  # kept on the device, unread
    stats, extra = window.stats(1.0, 7.0)
    assert (stats.labelled_tokens, extra, stats.data_wait_seconds) == (7, 7, None)


def test_a_window_without_counted_tokens_has_none() -> None:
    window = OpenWindow()
    window.add_step(0.0, 2.0, data_wait=0.5, tokens=None, first=False)
    stats, extra = window.stats(2.0, None)
    assert (stats.labelled_tokens, stats.tokens_per_second, extra) == (None, None, 0)


def test_tokens_per_second_vector_8_ranks() -> None:
    """8 ranks x 4 sequences x 4096 tokens per 1.0 s step: 16,384/s per device, 131,072 global."""
    per_rank = [WindowStats(steps=1, seconds=1.0, data_wait_seconds=0.0, labelled_tokens=4 * 4096) for _ in range(8)]
    assert per_rank[0].tokens_per_second == 16_384
    assert sum(w.tokens_per_second for w in per_rank) == 131_072


def _windows(metrics, steps: list[float], start: float = 100.0) -> list[WindowStats]:
    """Run steps of the given durations through ``TrainingMetrics`` on a made-up clock; its windows."""
    windows: list[WindowStats] = []
    recorder = metrics.recorder
    recorder.on_window = lambda report: windows.append(report.stats)
    now = start
    for seconds in steps:
        recorder.begin_step(at=now)
        now += seconds
        recorder.end_step(now=now)
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
