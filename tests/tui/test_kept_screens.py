"""One screen of each kind per app (``TopApp.kept``): going back to the grid, the Run or Alerts
screen, or into a node again, reuses the screen already mounted instead of composing and styling
a new one (at 8-16 nodes a new Node screen stalled the UI for 65-112 ms per Enter;
``benchmarks/tui_fanin.py`` measures switches). These tests pin what must stay true when a
screen is reused: it shows the node asked for, its cursor starts at the top of another node and
stays on the same node, the poller fetches the full snapshot of the node shown and of no other,
and a kept screen's widgets are frozen out of the collector's sight once."""

from __future__ import annotations

import gc

import pytest

from observe.sources.view import ClusterSnapshot, node_status
from observe.tui.app import make_app
from observe.tui.screens.cluster import ClusterScreen
from observe.tui.screens.gpus import GpuDetailScreen
from observe.tui.screens.grid import GridScreen
from observe.tui.screens.node import NodeScreen
from observe.tui.screens.run import RunScreen
from observe.tui.widgets.grid import GpuGrid
from observe.tui.widgets.table import VirtualTable
from tests.support.fleet import NODES, recorded
from tests.support.scenes import NOW, big_snapshot
from tests.support.tui import Offline, lines_text, reach

pytestmark = pytest.mark.anyio


def every_node_in_full() -> ClusterSnapshot:
    """The recorded fleet with every node's whole snapshot (processes), as if each were focused."""
    nodes = [
        node_status(name, f"http://10.0.0.{i + 1}:9401", recorded(name, NOW, age=0.4), NOW, keep=True)
        for i, name in enumerate(NODES)
    ]
    return ClusterSnapshot(time_unix=NOW, source="recorded", nodes=tuple(nodes))


async def test_enter_on_another_node_reuses_the_node_screen_and_shows_that_node() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_snapshot(every_node_in_full())
        await pilot.pause()
        nodes = app.screen.query_one(VirtualTable)
        first = nodes.current_row.name
        await reach(pilot, NodeScreen, "enter")
        node_screen = app.screen
        assert node_screen.node == first and app.poller.focus == first
        processes = node_screen.query_one("#processes", VirtualTable)
        await pilot.press("down", "down", "down")
        pid = processes.current_row.pid
        await reach(pilot, ClusterScreen, "escape")
        assert app.poller.focus is None  # back on the Cluster screen: summaries only
        await reach(pilot, NodeScreen, "enter")  # the same node again: the cursor is on the same process
        assert app.screen is node_screen and processes.current_row.pid == pid
        await reach(pilot, ClusterScreen, "escape")
        await pilot.press("down")
        second = nodes.current_row.name
        assert second != first
        await reach(pilot, NodeScreen, "enter")
        assert app.screen is node_screen and node_screen.node == second and app.poller.focus == second
        assert any(second in line for line in lines_text(node_screen.query_one("#host")))
        assert processes.cursor == 0 and processes.rows  # another node's processes, from the top


async def test_a_modal_over_the_node_screen_keeps_its_full_snapshot_coming() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_snapshot(every_node_in_full())
        await pilot.pause()
        app.open_node("gpu-node-1")
        await reach(pilot, NodeScreen)
        node = app.screen.node
        await pilot.press("c")  # compact lines: the GPU table
        await pilot.pause()
        app.screen.query_one("#gpu-table", VirtualTable).focus()
        await reach(pilot, GpuDetailScreen, "enter")
        assert app.poller.focus == node  # behind the GPU's detail the node's figures still show
        await reach(pilot, NodeScreen, "escape")
        assert app.poller.focus == node


async def test_screens_are_kept_and_frozen_once() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_snapshot(big_snapshot(16))
        await pilot.pause()
        before = gc.get_freeze_count()
        await reach(pilot, GridScreen, "4")
        grid_screen = app.screen
        await pilot.pause(0.1)
        frozen = gc.get_freeze_count()
        assert frozen > before  # the kept grid's widgets, after its first frame
        await reach(pilot, RunScreen, "2")
        run_screen = app.screen
        await reach(pilot, GridScreen, "4")
        await pilot.pause(0.1)
        assert app.screen is grid_screen and grid_screen.is_mounted
        await reach(pilot, RunScreen, "2")
        assert app.screen is run_screen
        await reach(pilot, ClusterScreen, "1")
        assert [type(s) for s in app.screen_stack[1:]] == [ClusterScreen]
        assert grid_screen.query_one(GpuGrid).nodes == ()  # out of sight, it holds no node
