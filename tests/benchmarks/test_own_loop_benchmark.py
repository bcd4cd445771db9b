"""``benchmarks/own_loop_overhead.py`` stays runnable, and its sync probe holds: device values are
read on log steps only, through the API and through the injector's hooks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.benchmark import REPO, run_benchmark

#: Runs the benchmark in child processes (torchrun with two gloo ranks serving /metrics): not the inner loop.
pytestmark = pytest.mark.e2e

LOG_STEPS = {0, 4, 9, 14, 19}  # steps 1, 5, 10, 15, 20 of 20 with a log window of 5


def test_the_probe_counts_reads_on_log_steps_only(subprocess_env) -> None:
    code = "import json; from benchmarks import own_loop_overhead as b; print(json.dumps(b.probe_reads()))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, env=subprocess_env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    reads = json.loads(proc.stdout.strip().splitlines()[-1])
    for path in ("api", "auto"):
        assert [i for i, n in enumerate(reads[path]) if n] == sorted(LOG_STEPS), (path, reads[path])
        assert all(reads[path][i] == 1 for i in LOG_STEPS), (path, reads[path])  # one transfer per log step


def test_a_tiny_run_writes_the_table_and_json(tmp_path: Path, subprocess_env) -> None:
    out = tmp_path / "own.json"
    proc = run_benchmark(
        "own_loop_overhead",
        *("--pairs", "1", "--steps", "12", "--workloads", "loop", "--out", str(out)),
        env=subprocess_env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    loop = report["workloads"]["loop"]
    assert len(loop["pair_ratios"]) == 1 and loop["median_ratio"] > 0
    assert report["probe_reads_on_non_log_steps"] == {"api": 0, "auto": 0}
    assert 0 < report["hook_seconds_per_step"] < 0.01  # microseconds, measured directly
    assert "loop: median pair ratio" in proc.stdout and "load average" in proc.stdout
