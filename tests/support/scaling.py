"""Synthetic snapshots for the scaling tests: ranks that ran steps of a known length."""

from __future__ import annotations

import math

from observe.scaling.figures import SizeFigures, measure
from observe.scaling.snapshot import HistogramState, RankSnapshot

BOUNDS = (0.5, 1.0, 2.5, math.inf)
INFO = {
    "model": "llama2-7b",
    "sharding_strategy": "FULL_SHARD",
    "mixed_precision": "bf16",
    "device_type": "cuda",
    "backend": "nccl",
}


def snap(
    rank: int,
    step: int,
    *,
    world: int,
    ts: float,
    seq: int = 4096,
    batch: int = 4,
    step_s: float = 1.0,
    wait_s: float = 0.05,
    memory: float | None = 40 * 2**30,
    node: str = "n0",
) -> RankSnapshot:
    """A rank that has run ``step`` steps of ``step_s`` seconds each, ``batch`` x ``seq`` tokens per step."""
    counts = tuple(float(step) if bound >= step_s else 0.0 for bound in BOUNDS)
    return RankSnapshot(
        rank=rank,
        node=node,
        step=step,
        planned_steps=100,
        steps_total=step,
        labelled_tokens=step * batch * seq,
        samples=step * batch,
        last_step_timestamp=ts,
        step_seconds=HistogramState(tuple(zip(BOUNDS, counts, strict=False)), step * step_s, step),
        data_wait_seconds=step * wait_s,
        memory_peak_bytes=memory,
        memory_source="device peak allocated",
        info={**INFO, "world_size": str(world)},
    )


def run(world: int, *, step_s: float = 1.0, batch: int = 4, nodes: int = 1, run_id: str = "r", **kw) -> SizeFigures:
    """One measured run of ``world`` ranks over ``nodes`` nodes: steps 11..30 of ``step_s`` seconds each."""
    per_node = max(1, world // nodes)
    start = {
        r: snap(r, 10, world=world, ts=1000.0, step_s=step_s, batch=batch, node=f"n{r // per_node}", **kw)
        for r in range(world)
    }
    end = {
        r: snap(r, 30, world=world, ts=1000.0 + 20 * step_s, step_s=step_s, batch=batch, node=f"n{r // per_node}", **kw)
        for r in range(world)
    }
    return measure(f"{run_id}{world}", start, end)
