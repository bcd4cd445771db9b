"""The report's arithmetic: per-rank deltas, pooled step time, efficiency, scaling kind."""

from __future__ import annotations

import json

import pytest

from observe.scaling.figures import (
    EFFICIENCY_DEFINITION,
    MeasureError,
    ReportError,
    build_report,
    measure,
    scaling_efficiency,
)
from observe.scaling.output import format_bytes, format_table
from tests.support.scaling import run, snap


def test_case_vector_tokens_per_second() -> None:
    # tests/cases/trainer-metrics.md, "Tokens per second": 8 ranks, each 4 sequences x 4096
    # tokens per step, 1.0 s per step -> 16,384 tokens/s per device, 131,072 global.
    f = run(8, nodes=2)
    assert [r.tokens_per_second for r in f.ranks] == [16_384] * 8
    assert f.global_tokens_per_second == 131_072
    assert f.tokens_per_second_per_rank == 16_384
    assert (f.world_size, f.nodes, f.step_from, f.step_to, f.finished) == (8, 2, 10, 30, False)
    assert (f.per_rank_batch_size, f.global_batch_size) == (4, 32)


def test_pooled_step_time_data_wait_and_memory() -> None:
    f = run(2, step_s=0.8, wait_s=0.04, memory=3 * 2**30)
    assert f.step_seconds_mean == pytest.approx(0.8)
    assert f.data_wait_ratio == pytest.approx(0.05)
    # every observation sits in (0.5, 1.0]: p50 = 0.5 + 0.5 * 0.5
    assert f.step_seconds_p50 == pytest.approx(0.75)
    assert "histogram_quantile" in f.step_time_quantiles_from
    assert f.memory_peak_bytes_max == 3 * 2**30 and [r.memory_peak_bytes for r in f.ranks] == [3 * 2**30] * 2


def test_exact_step_times_replace_the_bucket_estimate() -> None:
    start = {0: snap(0, 10, world=1, ts=0.0)}
    end = {0: snap(0, 14, world=1, ts=4.0)}
    f = measure("x", start, end, step_seconds_exact=[1.0, 2.0, 3.0, 4.0])
    assert f.step_seconds_p50 == pytest.approx(2.5)
    assert f.step_seconds_p95 == pytest.approx(3.85)  # numpy linear: 3 + 0.85 * (4 - 3)
    assert "exact" in f.step_time_quantiles_from


def test_a_missing_rank_a_restart_and_an_empty_window_are_errors() -> None:
    start = {r: snap(r, 10, world=2, ts=0.0) for r in range(2)}
    end = {r: snap(r, 20, world=2, ts=10.0) for r in range(2)}
    with pytest.raises(MeasureError, match=r"no metrics from rank\(s\) 1 of 2"):
        measure("x", start, {0: end[0]})
    with pytest.raises(MeasureError, match="went backwards"):
        measure("x", end, start)
    with pytest.raises(MeasureError, match="completed no step after the warm-up"):
        measure("x", start, start)


def test_efficiency_is_throughput_over_linear_from_the_smallest_size() -> None:
    sizes = [run(4, step_s=1.25), run(1), run(2, step_s=1.1)]
    report = build_report("cluster", sizes, warmup_steps=10)
    assert [s.world_size for s in report.sizes] == [1, 2, 4]
    t1 = report.sizes[0].global_tokens_per_second
    for s in report.sizes:
        assert s.scaling_efficiency == pytest.approx(s.global_tokens_per_second / (s.world_size / 1 * t1))
    assert [round(s.scaling_efficiency, 4) for s in report.sizes] == [1.0, round(1 / 1.1, 4), 0.8]
    assert report.scaling == "weak" and report.baseline_world_size == 1
    assert scaling_efficiency(100.0, 4, 0.0, 1) is None


def test_runs_tied_at_the_smallest_size_are_averaged() -> None:
    report = build_report("cluster", [run(2, step_s=1.0, run_id="a"), run(2, step_s=0.5, run_id="b"), run(4)], 5)
    mean2 = (2 * 16_384 + 2 * 32_768) / 2
    assert report.sizes[-1].scaling_efficiency == pytest.approx(4 * 16_384 / (2 * mean2))


def test_scaling_kind_follows_the_batches() -> None:
    strong = build_report("local", [run(1, batch=8), run(2, batch=4), run(4, batch=2)], 5)
    assert strong.scaling == "strong"
    assert build_report("local", [run(1, batch=8), run(2, batch=3)], 5).scaling == "mixed"


def test_runs_of_different_models_are_not_compared() -> None:
    other = run(2)
    other.info = {**other.info, "model": "llama3-8b"}
    with pytest.raises(ReportError, match="differ in model"):
        build_report("cluster", [run(1), other], 5)


def test_json_and_table_carry_the_definition_and_figures() -> None:
    report = build_report("cluster", [run(1), run(2, step_s=1.25, nodes=2)], 10, notes=["a caveat"])
    data = json.loads(json.dumps(report.to_json()))
    assert data["efficiency_definition"] == EFFICIENCY_DEFINITION
    assert data["schema"] == "fsdp-observe/scaling-report/v1"
    assert data["sizes"][1]["ranks"][1]["tokens_per_second"] == pytest.approx(16_384 / 1.25)
    table = format_table(report)
    assert "80.0%" in table and "26,214" in table and "40 GiB" in table and "note: a caveat" in table
    assert "N0 = 1" in table
    assert format_bytes(None) == "n/a" and format_bytes(5 * 2**20) == "5.0 MiB"
