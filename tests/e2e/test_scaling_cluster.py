"""Cluster mode against a real Prometheus that scraped two real trainer runs (1 and 2 ranks).

Prometheus (Debian's ``prometheus``) is started on loopback with a static scrape config for the
three ranks; the two torchrun runs go at the same time (their efficiency is meaningless here and
not asserted: only the arithmetic and its agreement with Prometheus' own functions are).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from PIL import Image

from observe import prometheus_local
from observe.monitoring.queries import scaling_queries
from observe.scaling.cluster import find_window
from observe.sources.prometheus import PrometheusAPI
from tests.support.processes import wait_for
from trainer.runspec.launch import installed_script

STEPS, SEQ, BATCH, WARMUP = 60, 128, 4, 3
RUNS = {"scale-a": 1, "scale-b": 2}


@pytest.fixture
def prometheus(tmp_path: Path, port_block):
    """A real Prometheus on loopback scraping ports (base_a) and (base_b, base_b+1) every 0.25 s."""
    if prometheus_local.binary() is None:
        pytest.skip("the prometheus binary is missing: apt-get install prometheus (CI installs it)")
    web = port_block(4)  # one block, so the four ports cannot overlap
    base_a, base_b = web + 1, web + 2
    targets = [f"127.0.0.1:{base_a}", f"127.0.0.1:{base_b}", f"127.0.0.1:{base_b + 1}"]
    prom = prometheus_local.start(
        tmp_path / "prometheus", prometheus_local.config({"trainer": targets}, [], scrape_interval="250ms"), web
    )
    url = prom.url
    try:

        def discovered():  # the first scrape only comes after target discovery hands over (~5 s)
            try:
                active = httpx.get(f"{url}/api/v1/targets", timeout=1).json()["data"]["activeTargets"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            return len(active) == 3 and all(t["lastScrape"] > "2000" for t in active)

        wait_for(discovered, 20, "Prometheus to discover its targets")
        yield url, base_a, base_b
    finally:
        prom.stop()


def start_run(run_id: str, ranks: int, port: int, env: dict[str, str], tmp_path: Path) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={ranks}",
        "--no-python",
        installed_script(),
        "--steps",
        str(STEPS),
        "--log-every",
        "5",
        "--seq-len",
        str(SEQ),
        "--batch-size",
        str(BATCH),
        "--metrics-address",
        "127.0.0.1",
        "--metrics-port",
        str(port),
        "--metrics-linger",
        "3",
        "--run-id",
        run_id,
    ]
    return subprocess.Popen(cmd, env=env, stdout=open(tmp_path / f"{run_id}.log", "w"), stderr=subprocess.STDOUT)


def promql(url: str, expr: str, at: float | None = None) -> list[dict]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    body = httpx.get(f"{url}/api/v1/query", params=params, timeout=10).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "observe.cli", "scaling", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_cluster_mode_reads_two_runs_from_a_real_prometheus(prometheus, tmp_path: Path, subprocess_env) -> None:
    url, base_a, base_b = prometheus
    procs = [
        start_run("scale-a", 1, base_a, subprocess_env, tmp_path),
        start_run("scale-b", 2, base_b, subprocess_env, tmp_path),
    ]
    for proc in procs:
        assert proc.wait(timeout=240) == 0, (tmp_path / "scale-a.log").read_text() + (
            tmp_path / "scale-b.log"
        ).read_text()

    def final_steps_scraped():
        found = promql(url, 'last_over_time(fsdp_train_step{run_id=~"scale-.*"}[5m])')
        return len(found) == 3 and all(float(s["value"][1]) == STEPS for s in found)

    wait_for(final_steps_scraped, 10, "Prometheus to hold every rank's last step")

    out = tmp_path / "report"
    proc = cli(
        [
            "--prometheus",
            url,
            "--run-id",
            "scale-b",
            "--run-id",
            "scale-a",
            "--warmup-steps",
            str(WARMUP),
            "--out",
            str(out),
        ],
        subprocess_env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "cluster" and report["scaling"] == "weak" and report["baseline_world_size"] == 1
    sizes = report["sizes"]
    assert [(s["run_id"], s["world_size"], s["nodes"]) for s in sizes] == [("scale-a", 1, 1), ("scale-b", 2, 1)]
    for s in sizes:
        assert s["finished"] and s["step_to"] == STEPS and s["step_from"] >= WARMUP
        assert "histogram_quantile" in s["step_time_quantiles_from"]
        for r in s["ranks"]:
            assert r["tokens"] == r["steps"] * BATCH * SEQ > 0
            assert r["memory_peak_bytes"] > 50 * 2**20
        assert s["global_tokens_per_second"] == pytest.approx(sum(r["tokens_per_second"] for r in s["ranks"]))
    t1, t2 = sizes[0]["global_tokens_per_second"], sizes[1]["global_tokens_per_second"]
    assert sizes[1]["scaling_efficiency"] == pytest.approx(t2 / (2 * t1))
    with Image.open(out / "report.png") as image:
        image.verify()

    # p50/p95 agree with Prometheus' own histogram_quantile over the same window.
    api = PrometheusAPI(url)
    try:
        for s in sizes:
            window = find_window(api, s["run_id"], WARMUP, 3600, time.time())
            end_at = window.end + 2 * window.interval
            bucket = f'fsdp_train_step_seconds_bucket{{run_id="{s["run_id"]}"}}'
            delta = (
                f"sum by (le) (last_over_time({bucket}[{math.ceil(end_at - window.start)}s])) - "
                f"sum by (le) ({bucket} @ {window.start:.3f})"
            )
            for q, key in ((0.5, "step_seconds_p50"), (0.95, "step_seconds_p95")):
                [result] = promql(url, f"histogram_quantile({q}, {delta})", end_at)
                assert float(result["value"][1]) == pytest.approx(s[key], rel=1e-9)
    finally:
        api.close()

    # The dashboard's PromQL gives the same definition over both runs.
    queries = scaling_queries(range_="10m")
    efficiency = {s["metric"]["run_id"]: s for s in promql(url, queries.efficiency)}
    throughput = {s["metric"]["run_id"]: float(s["value"][1]) for s in promql(url, queries.throughput)}
    ranks = {s["metric"]["run_id"]: float(s["value"][1]) for s in promql(url, queries.ranks)}
    assert set(efficiency) == set(RUNS) and ranks == {k: float(v) for k, v in RUNS.items()}
    for run_id, series in efficiency.items():
        assert series["metric"] == {
            "run_id": run_id,
            "model": "tiny",
            "sharding_strategy": "FULL_SHARD",
            "world_size": str(RUNS[run_id]),
        }
    assert float(efficiency["scale-a"]["value"][1]) == pytest.approx(1.0)
    expected = (throughput["scale-b"] / 2) / (throughput["scale-a"] / 1)
    assert float(efficiency["scale-b"]["value"][1]) == pytest.approx(expected)

    # Bad input against the same server: an unknown run, and a warm-up longer than the runs.
    for args, message in (
        (
            ["--run-id", "no-such-run", "--run-id", "scale-a"],
            f"error: --run-id: no trainer series with run_id 'no-such-run' in {url} over the last --lookback; "
            "check the id (the run_id label) or widen --lookback",
        ),
        (
            ["--run-id", "scale-a", "--run-id", "scale-b", "--warmup-steps", "100"],
            f"error: --warmup-steps: run scale-a: Prometheus holds no step after the warm-up to measure (last step {STEPS}, "
            "warm-up 100); lower --warmup-steps or scrape more often",
        ),
    ):
        proc = cli(["--prometheus", url, *args, "--out", str(tmp_path / "bad")], subprocess_env)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines() == [message]
        assert not (tmp_path / "bad" / "report.json").exists()
