"""Every sharding strategy trains exactly like one process: same losses, same weights on every rank.

Each case runs the trainer under torchrun (gloo, CPU) in fp32 and compares, step by step, the
logged global loss with ``reference.reference_run``, a plain single-process PyTorch loop on the
same global batch (no FSDP, no DTensor). Activation checkpointing and gradient accumulation
are folded into the cases: neither may change the math.

Tolerance: 1e-5 absolute on losses near 4-6 nats. Float32 has a relative resolution of 1.2e-7
(about 5e-7 absolute here); the sharded run sums gradients in another order (reduce-scatter of
per-rank means vs one big mean) and multiplies matrices of other shapes, so last-bit
differences are expected. Measured here: at most 4e-7 over 8 steps for every case. A real
error (a rank's gradient missing, a wrong batch, a wrong scale) moves the loss by 1e-2 or more.
Final weights are compared with the same reasoning at 1e-4 (AdamW normalises updates, so
last-bit gradient differences reach the weights at lr-scale only where a gradient is ~0).
``--verify-weights`` makes every rank gather the full weights and hash them: the digests must
be identical on all ranks (replicas of HYBRID_SHARD and NO_SHARD included).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from tests.support.trainer_reference import reference_run
from tests.support.trainer_runs import FAST, events, final_weights, losses, read_log, run_trainer

STEPS = 8
LOSS_TOLERANCE = 1e-5
WEIGHT_TOLERANCE = 1e-4

CASES = {
    "FULL_SHARD": (2, ["--sharding-strategy", "FULL_SHARD"], 1),
    "SHARD_GRAD_OP+full-ac+accum2": (
        2,
        ["--sharding-strategy", "SHARD_GRAD_OP", "--activation-checkpointing", "full", "--grad-accum-steps", "2"],
        2,
    ),
    "NO_SHARD+every-2-ac": (2, ["--sharding-strategy", "NO_SHARD", "--activation-checkpointing", "every-2"], 1),
    "HYBRID_SHARD-1x2": (2, ["--sharding-strategy", "HYBRID_SHARD"], 1),
    "HYBRID_SHARD-2x2+accum2": (
        4,
        [
            "--sharding-strategy",
            "HYBRID_SHARD",
            "--replicate-degree",
            "2",
            "--shard-degree",
            "2",
            "--grad-accum-steps",
            "2",
        ],
        2,
    ),
}


@functools.cache
def reference(corpus: Path, global_batch: int):
    return reference_run([corpus / "docs.jsonl"], STEPS, seq_len=64, global_batch=global_batch, lr=3e-3, warmup_steps=2)


@pytest.mark.parametrize("case", list(CASES))
def test_strategy_matches_single_process(case: str, corpus: Path, tmp_path: Path, subprocess_env) -> None:
    nproc, flags, accum = CASES[case]
    log = tmp_path / "run.jsonl"
    proc = run_trainer(
        [
            "--data",
            str(corpus),
            "--steps",
            str(STEPS),
            *FAST,
            "--mixed-precision",
            "fp32",
            "--metrics",
            "off",
            "--log-json",
            str(log),
            "--checkpoint-dir",
            str(tmp_path / "ckpt"),
            "--verify-weights",
            *flags,
        ],
        subprocess_env,
        nproc=nproc,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    records = read_log(log)
    start = events(records, "start")[0]
    assert start["world_size"] == nproc and start["grad_accum_steps"] == accum
    if case.startswith("HYBRID_SHARD-2x2"):
        assert start["mesh"] == [2, 2]

    want_losses, want_weights = reference(corpus, nproc * 2 * accum)
    got = losses(records)
    assert sorted(got) == list(range(1, STEPS + 1))
    diffs = [abs(got[step][0] - want) for step, want in zip(range(1, STEPS + 1), want_losses, strict=False)]
    assert max(diffs) < LOSS_TOLERANCE, list(zip(got.values(), want_losses, strict=False))
    assert want_losses[-1] < want_losses[0] - 1.0  # it does train

    digests = events(records, "end")[0]["weights_sha256"]
    assert len(digests) == nproc and len(set(digests)) == 1, digests
    assert "weights: identical on all" in proc.stdout

    weights = final_weights(tmp_path / "ckpt" / f"step-{STEPS:08d}", tmp_path)
    for name, want in want_weights.items():
        assert torch.allclose(weights[name], want, rtol=0, atol=WEIGHT_TOLERANCE), name
