"""``benchmarks/strategies.py`` stays runnable: its quick mode runs for real, its CUDA mode validates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmark import run_benchmark
from trainer.runspec.config import TrainConfig

#: Runs a benchmark script as a subprocess (torchrun or a simulated fleet): not the inner loop.
pytestmark = pytest.mark.e2e


def test_quick_mode_runs_and_writes_json(tmp_path: Path, subprocess_env) -> None:
    out = tmp_path / "strategies.json"
    proc = run_benchmark("strategies", "--quick", "--out", str(out), env=subprocess_env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert [(r["strategy"], r["activation_checkpointing"]) for r in report["rows"]] == [
        ("FULL_SHARD", "none"),
        ("FULL_SHARD", "full"),
    ]
    for row in report["rows"]:
        assert len(row["peak_rss_bytes_per_rank"]) == 2 and min(row["peak_rss_bytes_per_rank"]) > 0
        assert row["step_seconds_median"] > 0 and row["mfu"] is None and row["device_peak_bytes_per_rank"] is None
    assert "peak RSS MiB (max rank)" in proc.stdout


def test_cuda_mode_commands_validate_without_a_gpu(subprocess_env) -> None:
    proc = run_benchmark("strategies", "--cuda", "--dry-run", env=subprocess_env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    commands = [line.split() for line in proc.stdout.splitlines() if "torch.distributed.run" in line]
    assert len(commands) == 8 and all("--nproc-per-node=8" in c for c in commands)
    configs = [TrainConfig.from_argv(c[c.index("--no-python") + 2 :]) for c in commands]
    assert all(c.model.preset == "llama3.2-1b" and c.parallel.mixed_precision == "bf16" for c in configs)
    assert sum(c.parallel.replicate_degree == 2 for c in configs) == 2  # HYBRID_SHARD as 2 x 4
