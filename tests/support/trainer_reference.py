"""A single-process reference trainer in plain PyTorch: no FSDP, no DTensor, no process group.

It shares only what defines the problem with ``trainer`` (the model skeleton and its seeded
initialisation, the data stream, the LR schedule) and does the training math itself: one
batch of ``world x batch_size x grad_accum`` sequences per step (the same blocks the ranks
read together), mean cross-entropy over all its tokens, ``clip_grad_norm_``, AdamW.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from trainer.data import IGNORE_INDEX, BatchIterator, ByteTokenizer
from trainer.model import build_model, materialize
from trainer.runspec.config import ModelConfig
from trainer.train import lr_lambda


def reference_run(
    files: list[Path],
    steps: int,
    seq_len: int,
    global_batch: int,
    lr: float,
    warmup_steps: int,
    seed: int = 0,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    min_lr_ratio: float = 0.1,
    held_out: float = 0.0,
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Train the ``tiny`` preset in fp32 on one process.

    Returns:
        The loss of every step (before its update) and the final weights (state-dict names).
    """
    torch.manual_seed(seed)
    model = build_model(ModelConfig(preset="tiny"))
    materialize(model, torch.device("cpu"), ModelConfig(preset="tiny"), seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(warmup_steps, steps, min_lr_ratio))
    batches = BatchIterator(
        files, ByteTokenizer(), seq_len, global_batch, rank=0, world_size=1, seed=seed, held_out=held_out
    )
    losses = []
    for _ in range(steps):
        batch = next(batches)
        logits = model(input_ids=batch.input_ids).logits
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE_INDEX)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        losses.append(loss.item())
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}
