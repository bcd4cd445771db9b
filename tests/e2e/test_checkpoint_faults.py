"""Checkpoints when the disk lets the run down, on real
torchrun with two gloo ranks: a damaged newest checkpoint (a shard cut short, a shard overwritten in
place) makes the resume fall back to the newest one that loads, with one line saying so; a save
that fails for a full disk (a real 20 MB tmpfs) removes its partial directory and says how much
space it needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.trainer_runs import FAST, read_log, run_trainer
from trainer.runspec.checkpoint_files import TrainerState, list_checkpoints, step_dir


def args(corpus: Path, ckpt: Path, steps: int, *extra: str) -> list[str]:
    return [
        "--data",
        str(corpus),
        "--steps",
        str(steps),
        *FAST,
        "--checkpoint-dir",
        str(ckpt),
        "--checkpoint-every",
        "10",
        "--metrics",
        "off",
        *extra,
    ]


@pytest.fixture(scope="module")
def trained(corpus: Path, tmp_path_factory, session_env) -> Path:
    """A checkpoint directory holding step-10 and step-20 of a real run."""
    ckpt = tmp_path_factory.mktemp("trained") / "ckpt"
    proc = run_trainer(args(corpus, ckpt, 20), session_env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert [s for s, _ in list_checkpoints(ckpt)] == [10, 20]
    return ckpt


def copy_of(trained: Path, tmp_path: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    shutil.copytree(trained, ckpt)
    return ckpt


def resumed_step(workdir: Path) -> int:
    (record,) = [r for r in read_log(workdir / "run.jsonl") if r.get("event") == "resume"]
    assert record["path"].endswith(f"step-{record['step']:08d}")
    return record["step"]


def test_a_shard_cut_short_is_skipped_for_the_previous_checkpoint(
    trained: Path, corpus: Path, tmp_path: Path, session_env
) -> None:
    ckpt = copy_of(trained, tmp_path)
    shard = sorted(step_dir(ckpt, 20).glob("*.distcp"))[-1]
    with open(shard, "r+b") as f:
        f.truncate(shard.stat().st_size // 2)
    proc = run_trainer(args(corpus, ckpt, 22, "--log-json", str(tmp_path / "run.jsonl")), session_env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("resume:")]
    assert len(lines) == 1 and "step-00000020" in lines[0] and shard.name in lines[0], proc.stdout[-3000:]
    assert "resuming from step-00000010" in lines[0]
    assert resumed_step(tmp_path) == 10


def test_a_shard_overwritten_in_place_fails_to_load_and_falls_back(
    trained: Path, corpus: Path, tmp_path: Path, session_env
) -> None:
    """Same size, other bytes: nothing shows before loading, so the load fails on every rank and
    all ranks move to the previous checkpoint together."""
    ckpt = copy_of(trained, tmp_path)
    shard = sorted(step_dir(ckpt, 20).glob("*.distcp"))[0]
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.write(os.urandom(min(size, 1 << 20)))
    assert shard.stat().st_size == size
    proc = run_trainer(args(corpus, ckpt, 22, "--log-json", str(tmp_path / "run.jsonl")), session_env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("resume:")]
    assert len(lines) == 1 and "falling back to step-00000010" in lines[0], proc.stdout[-3000:]
    assert "Traceback" not in proc.stdout
    assert resumed_step(tmp_path) == 10


def test_checkpoints_of_which_none_can_be_used_stop_the_run_with_one_line(
    trained: Path, corpus: Path, tmp_path: Path, session_env
) -> None:
    """Before: every checkpoint damaged meant 'resuming from the start', training from step 0 and
    exit status 0, then pruning the damaged checkpoints. ``fsdp-observe train`` says so before any
    rank starts; a rank started by torchrun itself (a restart) stops with the same line."""
    ckpt = copy_of(trained, tmp_path)
    for step in (10, 20):
        meta = step_dir(ckpt, step) / ".metadata"
        meta.write_bytes(meta.read_bytes()[: meta.stat().st_size // 2])
    cli = subprocess.run(
        [sys.executable, "-m", "observe.cli", "train", "--nproc-per-node", "2", *args(corpus, ckpt, 22)],
        env=session_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2 and cli.stdout == "", cli.stdout + cli.stderr
    (line,) = cli.stderr.splitlines()
    assert line.startswith("error: --resume: ") and "none can be resumed" in line
    assert "step-00000020 (.metadata is" in line and "step-00000010 (.metadata is" in line
    assert "a new --checkpoint-dir to start over" in line
    ranks = run_trainer(args(corpus, ckpt, 22), session_env)
    assert ranks.returncode != 0
    assert "error: --resume: " in ranks.stdout and "none can be resumed" in ranks.stdout, ranks.stdout[-3000:]
    assert "resuming from the start" not in ranks.stdout
    assert [s for s, _ in list_checkpoints(ckpt)] == [10, 20]  # nothing trained, nothing deleted


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 20 MB tmpfs: room for one tiny-preset checkpoint and part of another."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=20m", f"fsdp-observe-{uuid.uuid4().hex[:8]}", str(mount)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip()}); the full-disk case needs one (root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_save_that_fills_the_disk_removes_its_partial_directory_and_says_what_it_needed(
    small_disk: Path, corpus: Path, session_env
) -> None:
    ckpt = small_disk / "ckpt"
    filler = small_disk / "filler"
    proc = run_trainer(args(corpus, ckpt, 10), session_env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    one = sum(p.stat().st_size for p in step_dir(ckpt, 10).iterdir())
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * max(0, free - one // 2))  # leave room for half a checkpoint
    proc = run_trainer(args(corpus, ckpt, 20), session_env)
    assert proc.returncode != 0
    errors = [line for line in proc.stdout.splitlines() if "checkpoint save to" in line]
    assert errors, proc.stdout[-3000:]
    for line in errors:  # one per rank; the cause may read ENOSPC or torch's zip writer giving up
        assert "the save needs about" in line and "free there: not enough" in line, line
        needed_mb = float(line.split("the save needs about ")[1].split(" MB")[0].replace(",", ""))
        free_mb = float(line.split(" and ")[1].split(" MB")[0].replace(",", ""))
        assert 0.5 * one / 1e6 < needed_mb < 2.0 * one / 1e6, (needed_mb, one)
        assert free_mb > 0.3 * one / 1e6, line  # measured after the partial directory was removed
    assert [s for s, _ in list_checkpoints(ckpt)] == [10], "the partial step-00000020 was left behind"
    assert TrainerState.read(step_dir(ckpt, 10)).step == 10
