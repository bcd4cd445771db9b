"""Checkpoints, exact resume, elastic restarts (c10d and etcd-v2) and SIGTERM, on real torchrun.

Every interrupted run is compared with one uninterrupted run of the same settings (bf16, two
ranks, checkpoints every 5 steps, validation every 10): its loss at every step, its held-out
losses and its final weights must be *identical* (bitwise: the same computation on the same
CPU is deterministic). A sample skipped or seen twice would change the loss of the step that
reads it and, through the optimizer, every weight after it; a wrong RNG, optimizer or
scheduler state would too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import torch

from observe import catalog as c
from tests.support.processes import wait_for
from tests.support.trainer_runs import (
    FAST,
    LastScrape,
    events,
    final_weights,
    losses,
    rank_pids,
    read_log,
    run_trainer,
    start,
    stop_group,
    torchrun_cmd,
)
from trainer.progress import Progress, read_progress
from trainer.runspec.checkpoint_files import TrainerState, is_complete, newest_complete, step_dir
from trainer.runspec.launch import UNSHARE_STORE_ENV

STEPS = 30


def trainer_args(corpus: Path, workdir: Path, *extra: str) -> list[str]:
    return [
        "--data",
        str(corpus),
        "--steps",
        str(STEPS),
        *FAST,
        "--checkpoint-dir",
        str(workdir / "ckpt"),
        "--checkpoint-every",
        "5",
        "--val-every",
        "10",
        "--val-fraction",
        "0.05",
        "--log-json",
        str(workdir / "run.jsonl"),
        *extra,
    ]


@pytest.fixture(scope="module")
def uninterrupted(corpus: Path, tmp_path_factory, session_env) -> dict:
    """The reference: the same run, never interrupted."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    proc = run_trainer(trainer_args(corpus, workdir, "--metrics", "off"), session_env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    records = read_log(workdir / "run.jsonl")
    return {
        "records": records,
        "losses": {s: v[0] for s, v in losses(records).items()},
        "validation": {r["step"]: r["loss"] for r in events(records, "validation")},
        "weights": final_weights(step_dir(workdir / "ckpt", STEPS), workdir),
        "goodput": events(records, "end")[0]["goodput"],
    }


def assert_same_run(
    records: list[dict], checkpoint_root: Path, tmp: Path, reference: dict, first_step: int = 1
) -> None:
    """Every logged loss from ``first_step`` on, the validation losses and the final weights equal the reference's."""
    logged = losses(records)
    assert sorted(logged) == list(range(first_step, STEPS + 1)), "a step is missing from the log"
    for step, values in logged.items():
        assert all(v == reference["losses"][step] for v in values), (step, values, reference["losses"][step])
    for record in events(records, "validation"):
        assert record["loss"] == reference["validation"][record["step"]]
        assert record["perplexity"] == pytest.approx(2.718281828459045 ** record["loss"])
    final = newest_complete(checkpoint_root)
    assert final == step_dir(checkpoint_root, STEPS)
    state = TrainerState.read(final)
    assert state.batches_consumed == STEPS and state.reason == "final"
    weights = final_weights(final, tmp)
    for name, want in reference["weights"].items():
        assert torch.equal(weights[name], want), name


@pytest.fixture
def etcd_v2(tmp_path: Path, port_block):
    """A real etcd 3.4 with the v2 API (Debian's etcd-server), on free local ports."""
    import shutil

    import httpx

    binary = shutil.which("etcd")
    if binary is None:
        pytest.fail("etcd is not on PATH: install Debian's etcd-server (.ci/run does)")
    client, peer = port_block(1), port_block(1)
    proc = subprocess.Popen(
        [
            binary,
            "--enable-v2",
            "--name",
            "test",
            "--data-dir",
            str(tmp_path / "etcd"),
            "--listen-client-urls",
            f"http://127.0.0.1:{client}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client}",
            "--listen-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}",
            "--initial-cluster",
            f"test=http://127.0.0.1:{peer}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{client}/v2/keys", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, 20, "etcd to serve the v2 API", interval=0.1)
        yield f"127.0.0.1:{client}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("backend", ["c10d", "etcd-v2"])
def test_killed_rank_restarts_the_group_which_resumes_exactly(
    backend: str, request, corpus: Path, tmp_path: Path, port_block, subprocess_env, uninterrupted
) -> None:
    endpoint = request.getfixturevalue("etcd_v2") if backend == "etcd-v2" else f"127.0.0.1:{port_block(1)}"
    rdzv = [
        f"--rdzv-backend={backend}",
        f"--rdzv-endpoint={endpoint}",
        f"--rdzv-id=test-{uuid.uuid4().hex[:8]}",
        "--nnodes=1",
    ]
    env = {**subprocess_env, UNSHARE_STORE_ENV: "1"}  # see trainer.runspec.launch.restart_store_hazard
    metrics_port = port_block(2)
    args = trainer_args(
        corpus, tmp_path, "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics_port), "--metrics-linger", "3"
    )
    with LastScrape(f"http://127.0.0.1:{metrics_port}/metrics") as scrape:
        proc = start(torchrun_cmd(args, 2, rdzv=rdzv, max_restarts=1), env)
        try:
            wait_for(lambda: is_complete(step_dir(tmp_path / "ckpt", 5)), 120, "the first checkpoint")
            # a step past it done too, so the restart has steps to do again (rank 0 records each one)
            wait_for(lambda: (read_progress(tmp_path / "ckpt") or Progress("", 0)).step >= 6, 120, "step 6 done")
            victim = wait_for(lambda: rank_pids(proc.pid).get(1), 10, "rank 1's pid")
            os.kill(victim, signal.SIGKILL)
            output = proc.communicate(timeout=180)[0]
        finally:
            stop_group(proc)
    assert proc.returncode == 0, output[-4000:]
    assert "terminate called" not in output

    records = read_log(tmp_path / "run.jsonl")
    assert [r["restart"] for r in events(records, "start")] == [0, 1]
    resume = events(records, "resume")[0]
    assert resume["restart"] == 1 and 5 <= resume["step"] < STEPS and resume["step"] % 5 == 0
    redone = [step for step, values in losses(records).items() if len(values) == 2]
    assert redone == sorted(redone) and all(step > resume["step"] for step in redone)
    assert_same_run(records, tmp_path / "ckpt", tmp_path, uninterrupted)

    end = events(records, "end")[-1]
    assert end["restarts"] == 1
    assert end["phase_seconds"]["restarting"] > 0 and end["phase_seconds"]["loading_weights"] == 0
    assert end["goodput"] < uninterrupted["goodput"]  # the restart cost wall time the reference did not pay

    assert scrape.value(c.TRAIN_RESTARTS.name) == 1
    # the steps the first attempt had done past the checkpoint, counted as a number (rank 0's endpoint)
    assert scrape.value(c.TRAIN_STEPS_REDONE.name) == len(redone) >= 1
    assert f"progress: {len(redone)} steps done after step {resume['step']} are done again" in output
    assert scrape.value(c.TRAIN_CHECKPOINT_LOAD_SECONDS.name + "_count") == 1
    assert scrape.value(c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + "_count") >= 1
    assert scrape.value(c.TRAIN_PHASE.name, phase="finished") == 1
    assert scrape.value(c.TRAIN_PHASE.name, phase="training") == 0
    assert scrape.value(c.TRAIN_LAST_CHECKPOINT_STEP.name) == STEPS
    assert 0 < scrape.value(c.TRAIN_GOODPUT.name) < 1
    assert scrape.value(c.TRAIN_VALIDATION_LOSS.name) == uninterrupted["validation"][STEPS]
    labels = dict(scrape.samples[c.TRAIN_STEP.name][0][0])
    assert labels["run_id"] == events(records, "start")[0]["run_id"]  # the restarted ranks keep the run's id


@pytest.mark.serial("the ranks must save and exit within a 10 s grace period")
def test_sigterm_saves_exits_within_grace_and_the_run_resumes_exactly(
    corpus: Path, tmp_path: Path, subprocess_env, uninterrupted
) -> None:
    grace = 10.0
    args = trainer_args(corpus, tmp_path, "--metrics", "off", "--sigterm-grace", str(grace))
    proc = start(torchrun_cmd(args, 2), subprocess_env)
    try:
        wait_for(lambda: 7 in losses(read_log(tmp_path / "run.jsonl")), 120, "step 7")
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # as the kubelet signals the container's main process
        output = proc.communicate(timeout=grace + 30)[0]
        took = time.monotonic() - signalled
    finally:
        stop_group(proc)
    assert took < grace, output[-4000:]
    assert "grace period" not in output and "terminate called" not in output

    records = read_log(tmp_path / "run.jsonl")
    stop = events(records, "stop")[0]
    stopped = stop["step"]
    assert stop["signal"] == "SIGTERM"
    assert 7 <= stopped < STEPS
    assert f"SIGTERM: all ranks stop after step {stopped}" in output
    saved = newest_complete(tmp_path / "ckpt")
    assert saved == step_dir(tmp_path / "ckpt", stopped)
    assert TrainerState.read(saved).reason in ("sigterm", "periodic")  # periodic when it fell on a multiple of 5
    assert events(records, "end")[0]["exit_status"] == 143 and events(records, "end")[0]["stopped_by"] == "SIGTERM"

    proc = run_trainer(args, subprocess_env)
    assert proc.returncode == 0, proc.stdout[-4000:]
    records = read_log(tmp_path / "run.jsonl")
    assert events(records, "resume")[0]["step"] == stopped
    assert_same_run(records, tmp_path / "ckpt", tmp_path, uninterrupted)
