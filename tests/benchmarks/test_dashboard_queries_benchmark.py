"""``benchmarks/dashboard_queries.py`` stays runnable: its simulated cluster converts with the real
promtool, and a tiny run times every panel and rule against a real Prometheus."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.simulated_cluster import Cluster, series_total, write_span
from tests.support.benchmark import run_benchmark

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None or shutil.which("prometheus") is None,
    reason="apt-get install prometheus (CI installs it)",
)


def test_the_simulated_cluster_is_what_the_estimate_says_and_promtool_reads_it(tmp_path: Path) -> None:
    cluster = Cluster(nodes=2, gpus=2, ranks=2, cores=4, start=0, end=600)
    out = io.StringIO()
    samples = write_span(cluster, out, 0, 600)
    text = out.getvalue()
    (tmp_path / "in.om").write_text(text)
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "in.om"), str(tmp_path / "tsdb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    row = done.stdout.strip().splitlines()[-1].split()  # ULID, min, max, duration, samples, chunks, series, size
    assert int(row[4]) == samples == 40 * series_total(cluster)
    assert int(row[6]) == series_total(cluster)
    # a fleet mid-upgrade: node 0 on 4.5.3-4.8.2 (Hostname), node 1 on 4.6.0-4.8.3 (hostname)
    assert 'Hostname="gpu-node-0000"' in text and 'hostname="gpu-node-0001"' in text
    assert 'job="nvidia-dcgm-exporter"' in text


@pytest.mark.e2e  # starts a real Prometheus
def test_a_tiny_run_times_every_panel_and_rule_and_compares_with_a_baseline(tmp_path: Path, subprocess_env) -> None:
    out = tmp_path / "result.json"
    tiny = ("--nodes", "1", "--hours", "0.25", "--cores", "4", "--repeat", "1", "--workdir", str(tmp_path / "work"))
    done = run_benchmark("dashboard_queries", *tiny, "--keep", "--out", str(out), env=subprocess_env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = json.loads(out.read_text())["runs"]
    kinds = {r["kind"] for r in run["results"]}
    assert kinds == {"panel", "variable", "rule"}
    assert [r["where"] for r in run["results"] if r["verdict"] == "ERROR"] == []
    assert re.search(r"\d+ queries, \d+ miss a target", done.stdout)

    # The same TSDB again (its history ends where it was built), against a baseline revision whose
    # "Lost GPUs" panel was one constant series: that row alone is "changed", with both answers.
    baseline = json.loads(out.read_text())
    (lost,) = [r for r in baseline["runs"][0]["results"] if r["where"] == "fsdp-gpu-health / Lost GPUs / A"]
    lost["expr"] = "vector(1)"
    (tmp_path / "baseline.json").write_text(json.dumps(baseline))
    again = tmp_path / "again.json"
    done = run_benchmark(
        "dashboard_queries",
        *tiny,
        *("--reuse", "--baseline", str(tmp_path / "baseline.json"), "--out", str(again)),
        env=subprocess_env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (rerun,) = json.loads(again.read_text())["runs"]
    assert {r["where"]: r["series"] for r in rerun["results"]} == {r["where"]: r["series"] for r in run["results"]}
    rows = {r["where"]: r for r in rerun["compared"]["rows"]}
    assert set(rows) == {r["where"] for r in run["results"]}
    assert [w for w, r in rows.items() if r["changed"]] == ["fsdp-gpu-health / Lost GPUs / A"]
    assert rows["fsdp-gpu-health / Lost GPUs / A"]["base_series"] == 1
    assert all(r["base_series"] == r["new_series"] for w, r in rows.items() if not r["changed"])
    assert rerun["compared"]["band"]["unchanged_queries"] == len(rows) - 1
    assert "the noise band" in done.stdout


def test_a_wrong_baseline_or_reuse_is_one_line_before_any_building(tmp_path: Path, subprocess_env) -> None:
    (tmp_path / "other.json").write_text(json.dumps({"runs": [{"cluster": {"nodes": 64}, "results": []}]}))
    for args, message in (
        (["--baseline", str(tmp_path / "none.json")], "not this benchmark's JSON"),
        (["--baseline", str(tmp_path / "other.json")], "has no run at [16] nodes (it has [64])"),
        (["--reuse"], "--reuse: give the --workdir a run with --keep built"),
    ):
        done = run_benchmark("dashboard_queries", "--nodes", "16", *args, env=subprocess_env, timeout=60)
        assert done.returncode == 2 and message in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
