"""Snapshots from the trainer's real exposition text, and histogram arithmetic."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observe import catalog as c
from observe.promtext import Sample
from observe.scaling.snapshot import HistogramState, rank_snapshots
from observe.training.collector import TrainingCollector
from observe.training.window import WindowStats

INFO = {
    "model": "tiny",
    "sharding_strategy": "FULL_SHARD",
    "mixed_precision": "bf16",
    "world_size": "2",
    "device_type": "cpu",
    "backend": "gloo",
}


def exposition(rank: int, steps: int) -> list[Sample]:
    """Samples parsed from the trainer exporter's own text (the format a /metrics scrape returns)."""
    m = TrainingCollector(
        {"run_id": "r1", "rank": str(rank), "local_rank": str(rank), "node": "n1"},
        INFO,
        planned_steps=10,
        flops_per_token=1000,
        peak_flops=None,
        export_global=rank == 0,
    )
    for step in range(1, steps + 1):
        m.on_step(step, step_seconds=0.2, data_wait_seconds=0.01, labelled_tokens=512, samples=4, learning_rate=1e-3)
    m.on_window(WindowStats(steps, 0.2 * steps, 0.01 * steps, 512 * steps), 2.0, 1.0, 5120.0, None)
    registry = CollectorRegistry()
    registry.register(m)
    text = generate_latest(registry).decode()
    return [Sample(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def test_snapshot_from_the_trainers_exposition() -> None:
    snaps = rank_snapshots(exposition(0, 3) + exposition(1, 3))
    assert sorted(snaps) == [0, 1]
    s = snaps[1]
    assert (s.rank, s.node, s.step, s.planned_steps, s.steps_total) == (1, "n1", 3, 10, 3)
    assert (s.labelled_tokens, s.samples) == (1536, 12)
    assert s.step_seconds.count == 3 and s.step_seconds.sum == pytest.approx(0.6)
    assert s.data_wait_seconds == pytest.approx(0.03)
    assert dict(s.step_seconds.buckets)[0.2] == 3 and math.isinf(s.step_seconds.buckets[-1][0])
    assert s.info == INFO  # only fsdp_train_info's own labels, not run_id/rank/job
    # On Linux the exporter reports the process's peak RSS (VmHWM); on CPU there is no device peak.
    assert s.memory_peak_bytes > 0 and "VmHWM" in s.memory_source
    assert s.last_step_timestamp is not None


def test_a_rank_without_its_step_counters_is_left_out() -> None:
    samples = [x for x in exposition(0, 2) if not x.name.startswith(c.TRAIN_STEPS.name)]
    assert rank_snapshots(samples) == {}


def hist(*pairs: tuple[float, float], total_sum: float = 0.0) -> HistogramState:
    return HistogramState(tuple(pairs), total_sum, pairs[-1][1])


def test_quantile_interpolates_like_histogram_quantile() -> None:
    h = hist((0.1, 2), (0.25, 6), (0.5, 10), (math.inf, 10))
    # rank 0.5*10 = 5 falls in (0.1, 0.25] holding counts 3..6: 0.1 + 0.15 * (5-2)/4
    assert h.quantile(0.5) == pytest.approx(0.1 + 0.15 * 3 / 4)
    assert h.quantile(0.95) == pytest.approx(0.25 + 0.25 * (9.5 - 6) / 4)
    assert h.quantile(0.1) == pytest.approx(0.1 * 1 / 2)  # the lowest bucket starts at 0


def test_quantile_in_the_inf_bucket_is_the_highest_finite_bound() -> None:
    assert hist((0.1, 1), (0.25, 1), (math.inf, 10)).quantile(0.5) == 0.25


def test_quantile_of_nothing_is_absent() -> None:
    assert hist((0.1, 0), (math.inf, 0)).quantile(0.5) is None
    with pytest.raises(ValueError):
        hist((0.1, 1), (math.inf, 1)).quantile(1.5)


def test_minus_gives_the_observations_in_between_and_catches_restarts() -> None:
    early = hist((0.1, 1), (0.25, 2), (math.inf, 2), total_sum=0.3)
    late = hist((0.1, 1), (0.25, 5), (math.inf, 6), total_sum=1.5)
    delta = late.minus(early)
    assert delta.buckets == ((0.1, 0), (0.25, 3), (math.inf, 4))
    assert (delta.count, delta.sum) == (4, pytest.approx(1.2))
    with pytest.raises(ValueError, match="restarted"):
        early.minus(late)
    with pytest.raises(ValueError, match="layouts differ"):
        late.minus(hist((0.5, 1), (0.25, 2), (math.inf, 2)))


def test_a_series_seen_twice_counts_once() -> None:
    samples = exposition(0, 3)
    snaps = rank_snapshots(samples + samples)  # e.g. a pod scraped by two Prometheus jobs
    assert snaps[0].step_seconds == rank_snapshots(samples)[0].step_seconds
