"""Fixtures of the TUI tests: the recorded fleet over real HTTP, and helpers to read the screen."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.tui.fleet import NODES, RecordedFleet, trainer_exposition

#: GPU UUIDs of the fake NVML library (the recorded agents' GPUs 0 and 1).
GPU0 = "GPU-fa4e0000-0000-4000-8000-000000000000"
GPU1 = "GPU-fa4e0000-0000-4000-8000-000000000001"


@pytest.fixture
def fleet() -> Iterator[RecordedFleet]:
    """Three recorded agents, a malformed and a slow endpoint, and two trainer ranks on gpu-node-1
    (rank 1 on GPU 1 takes 0.60 s per step against rank 0's 0.50 s: the straggler)."""
    fleet = RecordedFleet()
    for node in NODES:
        fleet.agent(node)
    fleet.malformed()
    fleet.slow(delay=3.0)
    fleet.trainer("rank0", trainer_exposition(0, "gpu-node-1", GPU0, step_seconds=0.50, data_wait=0.02))
    fleet.trainer("rank1", trainer_exposition(1, "gpu-node-1", GPU1, step_seconds=0.60, data_wait=0.09))
    yield fleet
    fleet.close()


def table_text(table) -> list[str]:
    """The lines a VirtualTable draws now (header first)."""
    return [table.render_line(y).text.rstrip() for y in range(table.size.height)]


def lines_text(widget) -> list[str]:
    """The text of a Lines widget, one string per line."""
    return ["".join(text for text, _ in line) for line in widget.lines]


@pytest.fixture
def anyio_backend() -> str:
    """Async tests here run on asyncio (anyio's pytest plugin, which httpx brings)."""
    return "asyncio"


async def until(pilot, check: Callable[[], object], timeout: float = 15.0, what: str = "condition"):
    """Let the app run until ``check()`` is truthy; return its value, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.05)
    return value
