"""SVG snapshots of every screen at 80x24, 120x40 and 200x50, from fixed snapshots at a pinned clock
(``tests/tui/scenes.py``: recorded agent answers and the trainer's real exporter; the app does not
poll). The Node screen is shown for an 8-GPU, a 16-GPU, a partial-power, a lost/MIG and a GPU-less
node; the Run screen in progress and finished; the GPU grid with 1,024 nodes (8,192 GPUs).

Update after an intended change with ``pytest tests/tui/test_snapshots.py --snapshot-update``, then
look at the pictures: ``python -m tests.tui.snapshots_to_png`` renders every SVG to PNG.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from observe.tui import fmt
from observe.tui.app import make_app
from tests.support.scenes import (
    NOW,
    SOURCE,
    big_snapshot,
    cpu_only_snapshot,
    fetched_page,
    finished_snapshot,
    fleet_snapshot,
    forensics_snapshot,
    hang_snapshot,
)

SIZES = {"80x24": (80, 24), "120x40": (120, 40), "200x50": (200, 50)}


class Offline:
    """A source that is never polled (the test shows its snapshot by hand)."""

    description = SOURCE

    async def cycle(self, focus, deadline):
        raise AssertionError("not polled")

    def close(self) -> None:
        pass


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch):
    """Pin the clock the screens show, in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(fmt, "now", lambda: NOW)
    yield
    monkeypatch.undo()
    time.tzset()


def scene(snapshot, node: str | None = None, keys: tuple[str, ...] = ()):
    """``(app, run_before)`` showing ``snapshot``, then ``node``'s screen, then ``keys``."""
    app = make_app(Offline(), interval=2.0, poll=False)

    async def run_before(pilot) -> None:
        app.show_snapshot(snapshot)
        await pilot.pause()
        if node is not None:
            from observe.tui.screens.node import NodeScreen

            await app.push_screen(NodeScreen(node))
            await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()

    return app, run_before


SCENES = {
    "cluster": lambda: scene(fleet_snapshot()),
    "cluster_cpu_only": lambda: scene(cpu_only_snapshot()),
    "node_8gpu": lambda: scene(fleet_snapshot("p5-node-8gpu"), "p5-node-8gpu"),
    "node_16gpu": lambda: scene(fleet_snapshot("gb200-node-16gpu"), "gb200-node-16gpu"),
    "node_partial_power": lambda: scene(fleet_snapshot("p5-node-nopower"), "p5-node-nopower"),
    "node_lost_mig": lambda: scene(fleet_snapshot("gpu-node-2"), "gpu-node-2"),
    "node_no_gpus": lambda: scene(fleet_snapshot("cpu-node-3"), "cpu-node-3"),
    "run": lambda: scene(fleet_snapshot(), keys=("2",)),
    "run_finished": lambda: scene(finished_snapshot(), keys=("2",)),
    "run_no_trainers": lambda: scene(replace(cpu_only_snapshot(), trainers=0), keys=("2",)),
    "alerts": lambda: scene(fleet_snapshot(), keys=("3",)),
    "grid": lambda: scene(big_snapshot(1024), keys=("4",)),
}


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(SCENES))
def test_screen(snap_compare, pinned, name: str, size: str) -> None:
    app, run_before = SCENES[name]()
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


#: The Run screen's verdict banner from what real gloo ranks served (tests/tui/recorded/forensics),
#: and a simulated 8,192-rank hang in that format: at the two sizes a terminal usually has.
VERDICT_SCENES = {
    "run_hang": lambda: scene(forensics_snapshot("hang"), keys=("2",)),
    "run_gil": lambda: scene(forensics_snapshot("gil"), keys=("2",)),
    "run_straggler": lambda: scene(forensics_snapshot("straggle"), keys=("2",)),
    "run_healthy": lambda: scene(forensics_snapshot("healthy"), keys=("2",)),
    "run_hang_8192": lambda: scene(hang_snapshot(), keys=("2",)),
}


@pytest.mark.parametrize("size", ["80x24", "120x40"])
@pytest.mark.parametrize("name", list(VERDICT_SCENES))
def test_verdict(snap_compare, pinned, name: str, size: str) -> None:
    app, run_before = VERDICT_SCENES[name]()
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


def rank_scene(mode: str):
    """The Run screen of ``mode``'s recording with its first row (the culprit) opened, its page as
    the rank served it (or, for a rank that did not answer, its timeout and what its peer said)."""
    app, show = scene(forensics_snapshot(mode), keys=("2",))

    async def run_before(pilot) -> None:
        await show(pilot)
        screen = app.screen
        screen.open_rank(screen.table.current_row, fetched=fetched_page(mode, screen.table.current_row.rank.rank))
        await pilot.pause()

    return app, run_before


@pytest.mark.parametrize("size", ["80x24", "120x40"])
@pytest.mark.parametrize("mode", ["hang", "gil", "straggle"])
def test_rank_view(snap_compare, pinned, mode: str, size: str) -> None:
    app, run_before = rank_scene(mode)
    assert snap_compare(app, terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize(
    "name,keys",
    [
        ("node_8gpu_detailed", ("c",)),
        ("grid_temperature", ("m", "m")),
        ("sort_menu", ("s",)),
        ("help", ("question_mark",)),
        ("node_8gpu_gpu_popup", ("tab", "enter")),
    ],
)
def test_screen_after_keys(snap_compare, pinned, name: str, keys: tuple[str, ...]) -> None:
    if name.startswith("node"):
        app, run_before = scene(fleet_snapshot("p5-node-8gpu"), "p5-node-8gpu", keys)
    elif name.startswith("grid"):
        app, run_before = scene(big_snapshot(1024), keys=("4", *keys))
    else:
        app, run_before = scene(fleet_snapshot(), keys=keys)
    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
