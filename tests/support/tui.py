"""Reading a Textual screen in tests: the text a widget draws, and waiting on a Pilot."""

from __future__ import annotations

import time
from collections.abc import Callable

#: GPU UUIDs of the fake NVML library (the recorded agents' GPUs 0 and 1).
GPU0 = "GPU-fa4e0000-0000-4000-8000-000000000000"
GPU1 = "GPU-fa4e0000-0000-4000-8000-000000000001"


def table_text(table) -> list[str]:
    """The lines a VirtualTable draws now (header first)."""
    return [table.render_line(y).text.rstrip() for y in range(table.size.height)]


def lines_text(widget) -> list[str]:
    """The text of a Lines widget, one string per line."""
    return ["".join(text for text, _ in line) for line in widget.lines]


async def until(pilot, check: Callable[[], object], timeout: float = 15.0, what: str = "condition"):
    """Let the app run until ``check()`` is truthy; return its value, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.05)
    return value


async def reach(pilot, screen: type, *keys: str) -> None:
    """Press ``keys``, then let the app run until a ``screen`` is on top and drawn."""
    await pilot.press(*keys)
    await until(pilot, lambda: isinstance(pilot.app.screen, screen), what=screen.__name__)
    await pilot.pause()


class Offline:
    """A source that is never polled: the tests show snapshots by hand."""

    description = "offline"

    async def cycle(self, focus, deadline):
        raise AssertionError("not polled")

    def close(self) -> None:
        pass
