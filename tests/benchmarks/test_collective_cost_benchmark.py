"""``benchmarks/collective_cost.py`` stays runnable: its wall-clock part (a one-rank gloo group in
its own process, the wrappers against torch's own functions) prints the table and writes the JSON.
The callgrind part takes minutes and is left to the benchmark's own runs."""

from __future__ import annotations

import json

import pytest

from tests.support.benchmark import run_benchmark

#: A child process with a gloo process group: not the inner loop.
pytestmark = pytest.mark.e2e


def test_the_wall_clock_part_writes_its_figures(tmp_path, subprocess_env) -> None:
    out = tmp_path / "collective_cost.json"
    done = run_benchmark(
        "collective_cost", "--no-callgrind", "--calls", "50", "--blocks", "3", "--out", str(out),
        env=subprocess_env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "wrapper: added per sync all_reduce" in done.stdout
    report = json.loads(out.read_text())
    per_call = report["per_collective_us"]
    assert per_call["sync_plain_us"] > 0 and per_call["async_wait_plain_us"] > 0
    assert report["per_step_us"] > 0
    assert "instructions_per_step" not in report  # --no-callgrind
