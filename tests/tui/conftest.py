"""Fixtures of the TUI tests: the recorded fleet over real HTTP, and helpers to read the screen."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fleet import NODES, RecordedFleet, trainer_exposition
from tests.support.tui import GPU0, GPU1


@pytest.fixture
def fleet() -> Iterator[RecordedFleet]:
    """Three recorded agents, a malformed and a slow endpoint, and two trainer ranks of our trainer
    on gpu-node-1, 0.60 s per step each (synchronous ranks share one step time): rank 1 on GPU 1
    computes 480 ms of it, rank 0 300 ms (and waits for rank 1 in collectives): the straggler."""
    fleet = RecordedFleet()
    for node in NODES:
        fleet.agent(node)
    fleet.malformed()
    fleet.slow(delay=3.0)
    fleet.trainer("rank0", trainer_exposition(0, "gpu-node-1", GPU0, step_seconds=0.60, data_wait=0.02, compute=0.30))
    fleet.trainer("rank1", trainer_exposition(1, "gpu-node-1", GPU1, step_seconds=0.60, data_wait=0.09, compute=0.48))
    yield fleet
    fleet.close()


@pytest.fixture
def anyio_backend() -> str:
    """Async tests here run on asyncio (anyio's pytest plugin, which httpx brings)."""
    return "asyncio"
