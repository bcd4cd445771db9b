"""What a rank reads beside its step on log steps: the window's all-reduce and the CUDA allocator.

torch is never imported here at module import: ``all_reduce_sum`` imports it when called (only
with ``global_loss``, which needs a process group), and ``cuda_memory`` uses it only when the
program has imported it already.
"""

from __future__ import annotations

import sys
from typing import Any

from observe.training.collector import DeviceMemory


def all_reduce_sum(values: list[float], device: Any = None) -> list[float]:
    """``values`` summed over the ranks of the default process group, in one float64 all-reduce
    on ``device`` (default ``cpu``); ``values`` unchanged when no process group is initialised.

    Every rank must call it at the same point (a collective)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    totals = torch.tensor(values, dtype=torch.float64, device=device or "cpu")
    dist.all_reduce(totals)
    return [float(v) for v in totals.tolist()]


def cuda_memory() -> DeviceMemory | None:
    """The CUDA caching allocator's figures for the current device (host-side counters, no
    synchronisation: ``torch.cuda.memory_stats``), or ``None`` where CUDA is not initialised or
    the driver fails (memory then stays absent: a driver problem must not stop training)."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_initialized():
            return None
        stats = torch.cuda.memory_stats()
    except Exception:  # noqa: BLE001 - a driver problem must not stop training: memory stays absent
        return None
    return DeviceMemory(
        stats.get("allocated_bytes.all.current", 0),
        stats.get("reserved_bytes.all.current", 0),
        stats.get("allocated_bytes.all.peak", 0),
        stats.get("num_alloc_retries", 0),
    )
