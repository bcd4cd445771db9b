"""The TUI driven with Pilot over a recorded fleet served by real local HTTP servers.

The nodes are snapshots recorded from the real agent (tests/tui/recorded; GPUs from the fake NVML
stand-in, XIDs from the field case's kernel log); trainer ranks are the trainer's own exporter.
Every screen is visited: sorting, filtering, drilling down, an unreachable node, a malformed
answer, a slow one, a node that goes away mid-run.
"""

from __future__ import annotations

import time

import pytest

from observe.sources.direct import DirectSource, Endpoint
from observe.tui.app import TopApp, make_app
from observe.tui.screens.alerts import AlertsScreen
from observe.tui.screens.base import SortMenu
from observe.tui.screens.cluster import ClusterScreen
from observe.tui.screens.help import HelpScreen
from observe.tui.screens.node import NodeScreen
from observe.tui.screens.run import RunScreen
from observe.tui.widgets.lines import Lines
from observe.tui.widgets.table import VirtualTable
from tests.support.fleet import RecordedFleet
from tests.support.scenes import fleet_snapshot
from tests.support.tui import Offline, lines_text, table_text, until

SIZE = (160, 48)
pytestmark = pytest.mark.anyio


def make(fleet: RecordedFleet, unreachable: bool = True) -> TopApp:
    agents = [Endpoint(s.url) for name, s in fleet.servers.items() if not name.startswith("rank")]
    if unreachable:
        agents.append(Endpoint(fleet.unreachable()))
    trainers = [Endpoint(s.url + "/metrics") for name, s in fleet.servers.items() if name.startswith("rank")]
    return make_app(DirectSource(agents, trainers, timeout=0.5), interval=1.0)


def rows(app: TopApp) -> dict[str, str]:
    """Node name -> its drawn row on the Cluster screen."""
    table = app.screen.query_one(VirtualTable)
    return {line.split()[0]: line for line in table_text(table)[1:] if line.strip()}


async def test_the_cluster_screen_marks_every_node_and_fault(fleet) -> None:
    app = make(fleet)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.refreshes >= 2 and len(rows(app)) == 6, what="six rows")
        drawn = rows(app)
        assert "ok" in drawn["gpu-node-1"].split()[1] and "ok" in drawn["cpu-node-3"]
        assert "  4     1 " in drawn["gpu-node-2"]  # 4 GPUs, 1 LOST (its own column)
        assert "1,050 W*" in drawn["gpu-node-2"] and "1,400 W " in drawn["gpu-node-1"]  # partial sum marked
        assert "N/A (MIG)" not in drawn["gpu-node-2"]  # two readable GPUs still give a mean
        unreachable = next(line for name, line in drawn.items() if "unreachable" in line)
        assert "connection refused" in unreachable and "never" in unreachable and "N/A" in unreachable
        assert "malformed" in drawn["127.0.0.1:" + fleet.servers["malformed"].url.rsplit(":", 1)[1]]
        assert "not a snapshot" in drawn["127.0.0.1:" + fleet.servers["malformed"].url.rsplit(":", 1)[1]]
        slow = drawn["127.0.0.1:" + fleet.servers["slow"].url.rsplit(":", 1)[1]]
        assert "slow" in slow and "no answer within 0.5 s" in slow
        assert " 12" in drawn["gpu-node-1"]  # XID events of the last hour
        status = lines_text(app.screen.query_one("#status", Lines))[0]
        assert "6 nodes" in status and "3 ok" in status and "1 unreachable" in status and "1 malformed" in status
        # only summaries are asked for on the Cluster screen
        assert all("view=summary" in path for path in fleet.requests("gpu-node-1"))


async def test_sort_menu_and_invert(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(rows(app)) == 5 and app.refreshes >= 2, what="rows")
        table = app.screen.query_one(VirtualTable)
        await pilot.press("f6")
        menu = await until(pilot, lambda: isinstance(app.screen, SortMenu) and app.screen, what="the sort menu")
        keys = [c.key for c in table.columns]
        for _ in range(keys.index("gpus") - keys.index("node")):
            await pilot.press("down")
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, SortMenu), what="the menu to close")
        assert menu is not app.screen and table.sort_key == "gpus" and table.reverse  # numbers: biggest first
        order = [r.name for r in table.rows]
        assert order[:2] == ["gpu-node-1", "gpu-node-2"] and order[2] == "cpu-node-3"
        assert "GPUS▼" in table_text(table)[0]
        await pilot.press("I")
        assert table.reverse is False and [r.name for r in table.rows][-2:] != order[-2:]
        await pilot.press("s")
        await until(pilot, lambda: isinstance(app.screen, SortMenu), what="the sort menu (s)")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ClusterScreen), what="back")


async def test_filter_drill_down_and_back(fleet) -> None:
    app = make(fleet)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(rows(app)) == 6, what="rows")
        await pilot.press("slash", *"node-2")
        assert list(rows(app)) == ["gpu-node-2"]
        await pilot.press("enter")  # keeps the filter, back to the table
        await pilot.press("enter")  # opens the node
        screen = await until(pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen, what="node screen")
        processes = screen.query_one(VirtualTable)
        await until(pilot, lambda: processes.rows, what="processes (the full snapshot)")
        assert any("view" not in path for path in fleet.requests("gpu-node-2"))
        drawn = table_text(processes)
        outside = next(line for line in drawn if line.split() and line.split()[0] == "31999")
        assert "?" in outside and "8.0G" in outside  # another PID namespace: user unknown, memory kept
        gpus = "\n".join(lines_text(screen.query_one("#gpus", Lines)))
        assert "LOST" in gpus and "N/A (MIG)" in gpus and "MIG 0" in gpus and "FAN N/A" in gpus
        host = "\n".join(lines_text(screen.query_one("#host", Lines)))
        assert "gpu-node-2" in host and "Mem" in host and "host PID namespace" in host
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ClusterScreen), what="back on the cluster")
        assert list(rows(app)) == ["gpu-node-2"]  # the filter is kept
        await pilot.press("escape")  # clears it
        assert len(rows(app)) == 6
        before = len(fleet.requests("gpu-node-2"))
        await until(pilot, lambda: len(fleet.requests("gpu-node-2")) > before + 1, what="more refreshes")
        assert all("view=summary" in path for path in fleet.requests("gpu-node-2")[before + 1 :])


async def test_hostile_command_lines_are_shown_as_text(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=(200, 48)) as pilot:
        await until(pilot, lambda: "gpu-node-1" in rows(app), what="rows")
        table = app.screen.query_one(VirtualTable)
        table.cursor = next(i for i, r in enumerate(table.rows) if r.name == "gpu-node-1")
        await pilot.press("enter")
        screen = await until(pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen, what="node screen")
        processes = screen.query_one(VirtualTable)
        await until(pilot, lambda: len(processes.rows) >= 5, what="processes")
        text = "\n".join(table_text(processes))
        assert "[bold red]not markup[/]" in text  # not parsed as Rich markup
        assert "\\x1b[31mred" in text and "\x1b" not in text  # escapes stay escaped
        assert 'python -c print("}{")' in text and "bash -c echo a\\necho b" in text
        assert "<redacted>" in text and "hf_Qm" not in text
        gpu_row = next(line for line in table_text(processes) if "}{" in line)
        assert "20.0G" in gpu_row  # its GPU memory, from NVML's process list


async def test_alerts_newest_first_with_meaning_and_action(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=(200, 48)) as pilot:
        await until(pilot, lambda: app.refreshes >= 1 and app.snapshot.xid_events(), what="XIDs")
        await pilot.press("3")
        screen = await until(pilot, lambda: isinstance(app.screen, AlertsScreen) and app.screen, what="alerts")
        table = screen.query_one(VirtualTable)
        await until(pilot, lambda: len(table.rows) == 12, what="12 events")
        times = [x.time_unix for x in table.rows]
        assert times == sorted(times, reverse=True)
        drawn = table_text(table)
        fell_off = next(line for line in drawn if " 79 " in line)
        assert "GPU has fallen off the bus" in fell_off and "node_reboot" in fell_off and "RESTART_BM" in fell_off
        unknown = next(line for line in drawn if "99999" in line)
        assert "unknown" in unknown
        table.cursor = next(i for i, x in enumerate(table.rows) if x.xid == 154)
        await pilot.pause(0.1)
        detail = "\n".join(lines_text(screen.query_one("#xid-detail", Lines)))
        assert "XID 154" in detail and "Drain and Reset" in detail
        await pilot.press("enter")
        node = await until(pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen, what="the node")
        assert node.node == "gpu-node-1"


async def test_run_screen_names_the_straggler_by_compute_tied_to_node_and_gpu(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.snapshot.runs and len(app.snapshot.runs[0].ranks) == 2, what="two ranks")
        await pilot.press("2")
        screen = await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen, what="run screen")
        text = lines_text(screen.query_one("#run", Lines))
        joined = "\n".join(text)
        assert "run llama-ft-7" in joined and "world size 2" in joined and "model llama2-7b" in joined
        # the fixture's ranks stay at step 120: no pace seen, so no ETA (never the last window's 0.60 s,
        # which after step 1 is the warm-up alone); tests/tui/test_sources.py checks the pace and ETA
        assert "120 / 200" in joined and "ETA N/A" in joined
        assert "Tokens/s 20,000" in joined and "Step time 600 ms" in joined
        # both ranks take 600 ms per step: only the compute split names the straggler, with its GPU's
        # index from the agent's data
        banner = " ".join(line.strip() for line in text[text.index(next(t for t in text if "STRAGGLER" in t)) :])
        assert "rank 1 (node gpu-node-1, GPU 1" in banner and "computes 480 ms per step" in banner
        assert "median of 300 ms" in banner
        rank_lines = table_text(screen.query_one("#ranks", VirtualTable))[1:3]
        assert rank_lines[0].split()[0] == "1" and "◀ straggler" in rank_lines[0]  # the culprit first
        assert "GPU 1" in rank_lines[0] and "GPU 0" in rank_lines[1]
        assert "480 ms" in rank_lines[0] and "1.60×" in rank_lines[0] and "300 ms" in rank_lines[1]
        assert "15.0%" in rank_lines[0] and "3.3%" in rank_lines[1]  # data wait as the trainer logs it


async def test_help_refresh_and_quit(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.refreshes >= 1, what="a refresh")
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, ClusterScreen), what="help closed")
        app.poller.fixed_interval = app.poller.interval = 30.0  # no timer refresh from now on
        await pilot.pause(1.2)
        before = len(fleet.requests("gpu-node-1"))
        await pilot.press("r")
        await until(pilot, lambda: len(fleet.requests("gpu-node-1")) > before, what="refresh on r")
        await pilot.press("q")
        await until(pilot, lambda: app._exit, what="quit")


async def test_a_node_that_goes_away_keeps_its_last_data_with_its_age(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: "ok" in rows(app).get("gpu-node-1", ""), what="gpu-node-1 ok")
        fleet.servers["gpu-node-1"].close()
        await until(pilot, lambda: "unreachable" in rows(app).get("gpu-node-1", ""), timeout=20, what="unreachable")
        await pilot.pause(1.1)
        row = rows(app)["gpu-node-1"]
        assert "connection refused" in row and "75%" in row  # last figures kept
        node = app.snapshot.node("gpu-node-1")
        assert node.age(time.time()) >= 1.0 and node.figures.gpus == 4


def test_a_refresh_that_lands_while_the_app_closes_is_kept_without_drawing() -> None:
    # the fan-in thread's last snapshot can arrive after the screens are gone (seen in the live demo's
    # test under load: ScreenStackError at the end of run_test)
    app = make_app(Offline(), interval=2.0, poll=False)
    snapshot = fleet_snapshot()
    app.show_snapshot(snapshot)  # no screen on the stack
    assert app.snapshot is snapshot


async def test_the_alerts_detail_shows_the_event_in_full_at_80x24(fleet) -> None:
    app = make(fleet, unreachable=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.refreshes >= 1 and app.snapshot.xid_events(), what="XIDs")
        await pilot.press("3")
        screen = await until(pilot, lambda: isinstance(app.screen, AlertsScreen) and app.screen, what="alerts")
        table = screen.query_one(VirtualTable)
        await until(pilot, lambda: len(table.rows) == 12, what="12 events")
        for i, event in enumerate(table.rows):
            table.cursor = i
            await pilot.pause(0.05)
            drawn = lines_text(screen.query_one("#xid-detail", Lines))
            assert all(len(line) <= 80 for line in drawn), drawn
            words = " ".join(" ".join(drawn).split())
            for text in (event.action, event.raw or event.message):
                if text:  # every word of the action and the kernel's line is there, none cut
                    assert " ".join(text.split()) in words, (text, drawn)


def test_no_xid_events_claims_nothing_about_gpus() -> None:
    from observe.tui.screens.alerts import detail_lines

    (line,) = detail_lines(None)
    assert "".join(text for text, _ in line) == " no XID events in the kernel logs of the nodes shown"
