"""A real two-rank FSDP run under torchrun (gloo, CPU), scraped over HTTP while it trains."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from observe import catalog as c
from trainer.runspec.launch import installed_script

REQUIRED = [
    c.TRAIN_INFO,
    c.TRAIN_STEPS,
    c.TRAIN_LABELLED_TOKENS,
    c.TRAIN_SAMPLES,
    c.TRAIN_STEP_SECONDS,
    c.TRAIN_DATA_WAIT_SECONDS,
    c.TRAIN_STEP,
    c.TRAIN_LAST_STEP_TIMESTAMP,
    c.TRAIN_WINDOW_STEP_SECONDS,
    c.TRAIN_TOKENS_PER_SECOND,
    c.TRAIN_LOSS,
    c.TRAIN_GRAD_NORM,
    c.TRAIN_LEARNING_RATE,
    c.TRAIN_FLOPS_PER_TOKEN,
]


def scrape(url: str) -> dict[str, list]:
    families = text_string_to_metric_families(httpx.get(url, timeout=2).text)
    return {f.name: f.samples for f in families}


def test_two_rank_run_trains_and_exports(tmp_path: Path, port_block, subprocess_env) -> None:
    base = port_block(2)
    log_json = tmp_path / "run.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--no-python",
        installed_script(),
        "--steps",
        "40",
        "--log-every",
        "5",
        "--seq-len",
        "128",
        "--batch-size",
        "4",
        "--lr",
        "3e-3",
        "--metrics-address",
        "127.0.0.1",
        "--metrics-port",
        str(base),
        "--metrics-linger",
        "4",
        "--log-json",
        str(log_json),
        "--run-id",
        "e2e-run",
    ]
    proc = subprocess.Popen(cmd, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        for rank in (0, 1):
            try:
                seen[rank] = scrape(f"http://127.0.0.1:{base + rank}/metrics")
            except (httpx.HTTPError, ValueError):
                pass
        time.sleep(0.5)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, output
    assert "terminate called" not in output

    for rank in (0, 1):
        families = seen[rank]
        for metric in REQUIRED:
            assert metric.family in families or metric.name in families, (rank, metric.name)
        step = families[c.TRAIN_STEP.name][0]
        assert step.labels == {
            "run_id": "e2e-run",
            "rank": str(rank),
            "local_rank": str(rank),
            "node": step.labels["node"],
        }
        assert step.value == 40
        info = families[c.TRAIN_INFO.name][0].labels
        assert info["sharding_strategy"] == "FULL_SHARD" and info["world_size"] == "2"
        assert c.TRAIN_MFU.name not in families  # CPU: no peak, so no MFU
        assert c.TRAIN_DEVICE_MEMORY_ALLOCATED.name not in families
        tokens = families[c.TRAIN_LABELLED_TOKENS.family][0].value
        assert tokens == 40 * 4 * 128
    assert c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name in seen[0]
    assert c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name not in seen[1]
    assert seen[0][c.TRAIN_LOSS.name][0].value == seen[1][c.TRAIN_LOSS.name][0].value  # one global loss

    records = [json.loads(line) for line in log_json.read_text().splitlines()]
    windows = [r for r in records if r["event"] == "window"]
    assert [w["window_steps"] for w in windows] == [1, 4] + [5] * 7
    assert windows[-1]["loss"] < windows[0]["loss"] - 0.5
    assert records[-1]["event"] == "end" and records[-1]["steps"] == 40
    assert "step     40/40 | loss" in output and "MFU n/a" in output
