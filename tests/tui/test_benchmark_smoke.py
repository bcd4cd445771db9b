"""``benchmarks/tui_fanin.py`` runs end to end on a tiny fleet (its figures are not asserted: speed
targets live in the benchmark, not in tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmark import run_benchmark

#: Runs a benchmark script as a subprocess (torchrun or a simulated fleet): not the inner loop.
pytestmark = pytest.mark.e2e


def test_the_fanin_benchmark_runs_and_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "tui_fanin.json"
    proc = run_benchmark("tui_fanin", "--nodes", "8", "--cycles", "1", "--out", str(out), timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refresh wall med/max" in proc.stdout and "httpx CPU / ours" in proc.stdout
    (row,) = json.loads(out.read_text())["results"]
    assert row["nodes"] == 8 and row["cluster_nodes_ok_min"] == 8 and row["node_full_snapshots"] == 1
    assert row["cluster_full_snapshots"] == 0  # the Cluster screen asks for summaries only
    assert row["grid_gpus_drawn"] == 64 and row["grid_nodes_ok_min"] == 8  # the GPU grid phase ran
    assert row["node_rss_bytes"] > 0 and row["node_rss_peak_bytes"] >= row["cluster_rss_bytes"] // 2
    assert "RSS (peak)" in proc.stdout and "switch (stall)" in proc.stdout
    assert all(
        row[key] > 0 for key in ("grid_switch_ms", "node_switch_ms", "grid_back_switch_ms", "node_again_switch_ms")
    )
    assert row["grid_back_switch_stall_ms_max"] >= 0 and "cluster_switch_ms" not in row
