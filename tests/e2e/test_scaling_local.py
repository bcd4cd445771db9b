"""``fsdp-observe scaling`` local mode: real torchrun runs at 1 and 2 ranks, measured over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.support.stop_stress import run_to_end

STEPS, WARMUP, SEQ, BATCH = 20, 3, 128, 4


def test_local_mode_at_one_and_two_ranks(tmp_path: Path, port_block, subprocess_env) -> None:
    out = tmp_path / "report"
    proc = run_to_end(
        [
            sys.executable,
            "-m",
            "observe.cli",
            "scaling",
            "--world-sizes",
            "1,2",
            "--steps",
            str(STEPS),
            "--warmup-steps",
            str(WARMUP),
            "--seq-len",
            str(SEQ),
            "--batch-size",
            str(BATCH),
            "--metrics-port",
            str(port_block(2)),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "fsdp-observe/scaling-report/v1"
    assert report["mode"] == "local" and report["scaling"] == "weak"
    assert report["baseline_world_size"] == 1 and report["warmup_steps"] == WARMUP
    assert (report["model"], report["sharding_strategy"], report["device_type"]) == ("tiny", "FULL_SHARD", "cpu")
    assert "N/N0 x tokens/s at N0" in report["efficiency_definition"]
    assert "VmHWM" in report["memory_source"]
    sizes = report["sizes"]
    assert [s["world_size"] for s in sizes] == [1, 2]

    for s in sizes:
        n = s["world_size"]
        assert s["nodes"] == 1 and s["finished"] and s["step_to"] == STEPS
        assert WARMUP <= s["step_from"] < STEPS
        assert s["per_rank_batch_size"] == BATCH and s["global_batch_size"] == BATCH * n
        assert [r["rank"] for r in s["ranks"]] == list(range(n))
        for r in s["ranks"]:
            # Every measured step carries exactly batch x seq labelled tokens (the trainer's own counter).
            assert r["tokens"] == r["steps"] * BATCH * SEQ and r["samples"] == r["steps"] * BATCH
            assert r["tokens_per_second"] == pytest.approx(r["tokens"] / r["seconds"])
            assert r["memory_peak_bytes"] > 50 * 2**20  # a rank with torch loaded: tens of MiB at least
        assert s["global_tokens_per_second"] == pytest.approx(sum(r["tokens_per_second"] for r in s["ranks"]))
        assert s["tokens_per_second_per_rank"] == pytest.approx(s["global_tokens_per_second"] / n)
        assert s["memory_peak_bytes_max"] == max(r["memory_peak_bytes"] for r in s["ranks"])
        assert 0 < s["step_seconds_p50"] <= s["step_seconds_p95"]
        assert "exact" in s["step_time_quantiles_from"]
        assert 0 <= s["data_wait_ratio"] < 1
        log = out / "runs" / f"n{n}" / "trainer.jsonl"
        windows = {
            w["step"]: w["step_seconds"]
            for w in map(json.loads, log.read_text().splitlines())
            if w["event"] == "window"
        }
        measured = sorted(windows[k] for k in range(s["step_from"] + 1, s["step_to"] + 1))
        assert measured[0] <= s["step_seconds_p50"] <= measured[-1]

    # Efficiency recomputed from the raw figures: tokens/s at N / (N/N0 x tokens/s at N0).
    t1, t2 = (s["global_tokens_per_second"] for s in sizes)
    assert sizes[0]["scaling_efficiency"] == pytest.approx(1.0)
    assert sizes[1]["scaling_efficiency"] == pytest.approx(t2 / (2 / 1 * t1))

    with Image.open(out / "report.png") as image:
        image.verify()
    with Image.open(out / "report.png") as image:
        assert image.format == "PNG" and image.size[0] > 1000 and image.size[1] > 500

    table = proc.stdout
    assert "global tokens/s" in table and "efficiency" in table and "100.0%" in table
    assert f"{sizes[1]['scaling_efficiency']:.1%}" in table
    assert str(out / "report.json") in table
