"""Held-out loss and perplexity, every ``--val-every`` steps and at the end.

The held-out split is made of the documents ``trainer.runspec.corpus.is_held_out`` selects (training
never sees them). Each rank draws its ``--val-batches`` micro-batches once, at start-up, and
evaluates the same ones every time, so successive values are comparable.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from observe.errors import UserError
from trainer.data import IGNORE_INDEX, Batch, BatchIterator, EmptyStream, Tokenizer


def validation_batches(
    files: list[Path],
    tokenizer: Tokenizer,
    seq_len: int,
    batch_size: int,
    rank: int,
    world_size: int,
    seed: int,
    fraction: float,
    count: int,
) -> list[Batch]:
    """This rank's fixed validation micro-batches (a small corpus's split is cycled to fill them).

    Raises:
        UserError: no document falls in the held-out split (flag ``--val-fraction``).
    """
    it = BatchIterator(files, tokenizer, seq_len, batch_size, rank, world_size, seed, held_out=fraction, split="val")
    try:
        return [next(it) for _ in range(count)]
    except EmptyStream:
        raise UserError(
            "--val-fraction",
            f"no document of the {len(files)} data file(s) falls in the held-out {fraction:.1%}",
            "raise --val-fraction or add documents",
        ) from None


def token_loss_sum(model: torch.nn.Module, batch: Batch, device: torch.device) -> torch.Tensor:
    """Summed cross-entropy (nats) over the batch's labelled tokens: a 0-d fp32 device tensor."""
    inputs = batch.input_ids.to(device, non_blocking=True)
    targets = batch.targets.to(device, non_blocking=True)
    logits = model(input_ids=inputs).logits
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum")


@torch.no_grad()
def evaluate(model: torch.nn.Module, batches: list[Batch], device: torch.device) -> tuple[float, float]:
    """Token-weighted held-out loss over all ranks' batches, and its perplexity ``exp(loss)``.

    A collective (one all-reduce); every rank must call it with the same number of batches.
    Returns ``(loss, perplexity)``; perplexity is ``inf`` when ``exp`` overflows.
    """
    model.eval()
    totals = torch.zeros(2, dtype=torch.float64, device=device)
    for batch in batches:
        totals[0] += token_loss_sum(model, batch, device)
        totals[1] += batch.labelled_tokens
    model.train()
    dist.all_reduce(totals)
    loss_sum, labels = totals.tolist()
    loss = loss_sum / max(1.0, labels)
    try:
        return loss, math.exp(loss)
    except OverflowError:
        return loss, math.inf
