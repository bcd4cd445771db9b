"""Check that every rank holds the same full weights (``--verify-weights``)."""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.tensor import DTensor

T = TypeVar("T")


def full_weights_sha256(model: torch.nn.Module) -> str:
    """SHA-256 over every parameter's full (unsharded) tensor, in state-dict order (a collective).

    Each DTensor is gathered with ``full_tensor()`` over its mesh, one parameter at a time, so
    replicas that drifted apart (HYBRID_SHARD, NO_SHARD) give different digests. Costs one
    all-gather of the model and host copies of one parameter at a time.
    """
    digest = hashlib.sha256()
    for name, tensor in get_model_state_dict(model).items():
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
        assert isinstance(full, torch.Tensor)  # a model's state dict holds tensors only
        digest.update(name.encode())
        digest.update(full.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def gather_from_ranks(value: T) -> list[T]:
    """``value`` of every rank, in rank order (``all_gather_object``; a collective)."""
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out
