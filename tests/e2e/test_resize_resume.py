"""A resize resumes: a checkpoint written by 2 ranks continues on 1 rank and back on 2 (real torchrun, gloo).

An elastic job's resize (or a job rendered again with another ``NUM_NODES``) changes the world
size, which an exact resume refuses (``--nproc-per-node``: the data each rank reads depends on
it). ``--resume-any-world-size`` (``job render`` sets it with a checkpoint volume) reshards the
model and optimizer onto the new mesh (DCP) and continues the data at the first global block no
rank has read.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.trainer_runs import FAST, events, losses, read_log
from trainer.runspec.checkpoint_files import TrainerState, step_dir


def test_a_checkpoint_of_two_ranks_resumes_on_one_and_back_on_two(corpus: Path, tmp_path: Path, subprocess_env) -> None:
    ckpt, log = tmp_path / "ckpt", tmp_path / "run.jsonl"

    def train(nproc: int, steps: int, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "observe.cli",
                "train",
                "--nproc-per-node",
                str(nproc),
                "--data",
                str(corpus),
                "--steps",
                str(steps),
                *FAST,
                "--checkpoint-dir",
                str(ckpt),
                "--metrics",
                "off",
                "--log-json",
                str(log),
                *extra,
            ],
            env=subprocess_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=240,
        )

    first = train(2, 6)
    assert first.returncode == 0, first.stdout[-3000:]
    exact = train(1, 10)
    assert exact.returncode == 2, exact.stdout[-3000:]
    (error,) = exact.stdout.splitlines()  # the launcher's check, before any rank starts
    assert (
        error.startswith("error: --nproc-per-node: checkpoint step-00000006 was written with world_size 2")
        and "--resume-any-world-size to continue it resharded" in error
    )

    one = train(1, 10, "--resume-any-world-size")
    assert one.returncode == 0, one.stdout[-3000:]
    assert (
        "resume: the checkpoint of step 6 was written by 2 rank(s), resharded onto 1; the data continues at "
        "block 24 of the run's stream" in one.stdout
    )  # 6 steps x 2 sequences x 2 ranks
    state = TrainerState.read(step_dir(ckpt, 10))
    assert (state.layout["world_size"], state.blocks_before, state.batches_consumed) == (1, 24, 4)
    loss = {step: values[-1] for step, values in losses(read_log(log)).items()}
    assert loss[7] < loss[1] - 0.3 and abs(loss[7] - loss[6]) < 0.3, loss  # the trained weights, not new ones

    two = train(2, 14, "--resume-any-world-size")
    assert two.returncode == 0, two.stdout[-3000:]
    assert "written by 1 rank(s), resharded onto 2; the data continues at block 32" in two.stdout  # 24 + 4 x 2
    assert [r["step"] for r in events(read_log(log), "resume")] == [6, 10]
    assert events(read_log(log), "end")[-1]["step"] == 14
    loss = {step: values[-1] for step, values in losses(read_log(log)).items()}
    assert abs(loss[11] - loss[10]) < 0.3, loss
