"""What the TUI leaves for Python's garbage collector at scale (no stall above 50 ms at 4,096 nodes): one object
per node, nothing of a covered screen, the grid drawn a few rows per frame, and full collections
only where the poller paces them. ``benchmarks/tui_fanin.py`` measures the effect; these tests pin
the mechanisms, each of which fails on the code before it."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import threading
import time

import pytest

from observe.sources.view import ClusterSnapshot, NodeFigures, NodeStatus, node_status
from observe.tui.app import make_app
from observe.tui.poller import NEVER, CollectorPacing, Poller
from observe.tui.screens.base import SortMenu
from observe.tui.screens.cluster import ClusterScreen
from observe.tui.screens.grid import GridScreen
from observe.tui.screens.node import NodeScreen
from observe.tui.widgets.grid import CELLS_PER_PAINT, GpuGrid
from observe.tui.widgets.table import VirtualTable
from tests.support.fleet import recorded
from tests.support.scenes import NOW, big_snapshot
from tests.support.tui import Offline, reach, until

pytestmark = pytest.mark.anyio


def test_a_node_is_one_object_for_the_collector() -> None:
    node = node_status("gpu-node-1", "http://a:9401", recorded("gpu-node-1", NOW), NOW, keep=False)
    assert node.figures is node and isinstance(node, NodeFigures)
    assert not hasattr(node, "__dict__")  # slots: no per-instance dict for the collector to walk
    assert node.gpus == 4 and node.power_watts is not None
    gc.collect()  # tuples of numbers are untracked by the first collection that sees them
    tracked = [o for o in gc.get_referents(node) if gc.is_tracked(o) and o not in (node.xid_events, NodeStatus)]
    assert tracked == [], tracked  # its figures are numbers, strings and their tuples: nothing more to walk
    assert NodeStatus(name="x", source="u").figures is None  # no data yet


async def test_a_covered_screen_lets_go_of_its_nodes_and_gets_its_cursor_back() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_snapshot(big_snapshot(64))
        await pilot.pause()
        table = app.screen.query_one(VirtualTable)
        for _ in range(5):
            await pilot.press("down")
        chosen = table.current_row.source
        await reach(pilot, SortMenu, "s")  # a modal: the table stays drawn behind it, rows and all
        assert len(table.rows) == 64
        await pilot.press("escape")
        await reach(pilot, GridScreen, "4")
        assert table.rows == [] and table._all == []  # the Cluster screen under the grid holds no node
        await reach(pilot, ClusterScreen, "escape")  # back: the Cluster screen redraws, its cursor where it was
        assert len(table.rows) == 64 and table.current_row.source == chosen


async def test_the_grid_under_a_node_screen_lets_go_and_keeps_its_cursor() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_snapshot(big_snapshot(64))
        await pilot.pause()
        await reach(pilot, GridScreen, "4")
        grid = app.screen.query_one(GpuGrid)
        await pilot.press("right", "right", "right")
        chosen = grid.current.name
        await reach(pilot, NodeScreen, "enter")
        node_screen = app.screen
        assert node_screen.node == chosen and grid.nodes == () and grid._lines == {}
        await reach(pilot, GridScreen, "escape")
        assert len(grid.nodes) == 64 and grid.current.name == chosen
        await pilot.press("right")
        chosen = grid.current.name
        await reach(pilot, NodeScreen, "enter")  # the kept Node screen (TopApp.kept), on the node asked for
        assert app.screen is node_screen and node_screen.node == chosen == app.poller.focus


async def test_a_grid_redraws_a_few_rows_per_frame_after_new_data() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(200, 50)) as pilot:
        app.show_snapshot(big_snapshot(4096))
        await pilot.pause()
        await reach(pilot, GridScreen, "4")
        grid = app.screen.query_one(GpuGrid)
        drawn: list[list[int]] = []  # rows drawn after each of the grid's paint requests
        firsts: list[int] = []  # the first row of each paint request
        render_line, paint_rows = grid.render_line, grid._paint_rows

        def recording(y: int):
            if drawn:
                drawn[-1].append(y)
            return render_line(y)

        def requesting(first: int, painting: int) -> None:
            drawn.append([])
            firsts.append(first)
            paint_rows(first, painting)

        grid.render_line = recording  # type: ignore[method-assign]
        grid._paint_rows = requesting  # type: ignore[method-assign]
        new = big_snapshot(4096)
        new = dataclasses.replace(
            new,
            nodes=tuple(dataclasses.replace(n, gpu_util_ratios=tuple(reversed(n.gpu_util_ratios))) for n in new.nodes),
        )
        app.show_snapshot(new)
        height = grid.size.height
        await until(pilot, lambda: height - 1 in {y for frame in drawn for y in frame}, what="the last row")
        await pilot.pause()
        rows = CELLS_PER_PAINT // grid.size.width
        assert firsts == list(range(0, height, rows)), firsts  # one paint per CELLS_PER_PAINT cells
        frames = [sorted(set(f)) for f in drawn if f]
        # Each paint is asked for once the one before is on screen; on a loaded machine Textual may
        # still put two of them in one frame, but never the whole grid at once.
        assert len(frames) > 1, frames
        assert [y for f in frames for y in f] == list(range(height))  # every row once, top to bottom


def test_collector_pacing_stops_full_collections_until_stopped() -> None:
    before = gc.get_threshold()
    pacing = CollectorPacing()
    pacing.start()
    try:
        assert gc.get_threshold() == (before[0], before[1], NEVER) and gc.isenabled()  # young ones still run
    finally:
        pacing.stop()
    assert gc.get_threshold() == before


class OneNode:
    """A source answering one node at once (no network: the pacing is what is tested)."""

    description = "one node"

    async def cycle(self, focus, deadline):
        return ClusterSnapshot(time_unix=time.time(), nodes=(NodeStatus(name="n", source="u"),))

    def close(self) -> None:
        pass


def test_the_poller_collects_once_per_refresh_after_handing_it_over() -> None:
    collections: list[tuple[str, int]] = []
    delivered: list[float] = []
    done = threading.Event()

    def seen(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            collections.append((threading.current_thread().name, len(delivered)))

    def deliver(_: ClusterSnapshot) -> None:
        delivered.append(time.monotonic())
        if len(delivered) >= 3:
            done.set()

    gc.callbacks.append(seen)
    before = gc.get_threshold()
    poller = Poller(OneNode(), deliver, interval=0.2, pace_collector=True)
    try:
        poller.start()
        assert gc.get_threshold()[2] == NEVER
        assert done.wait(10)
        time.sleep(0.3)
    finally:
        poller.stop()
        gc.callbacks.remove(seen)
    assert gc.get_threshold() == before
    paced = [n for thread, n in collections if thread == "fsdp-observe-fanin"]
    assert paced[:2] == [1, 2], collections  # one full collection after each refresh was handed over


async def test_an_app_that_polls_paces_the_collector_and_gives_it_back() -> None:
    before = gc.get_threshold()
    app = make_app(OneNode(), interval=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.refreshes >= 1, what="a refresh")
        assert gc.get_threshold()[2] == NEVER
    await asyncio.sleep(0)
    assert gc.get_threshold() == before
