"""The TUI at its edges, one test each: screens at 80x24 / 120x40, 8- and 16-GPU nodes, and the TUI
telling the truth at the edges (partial sums, finished runs, the straggler by compute, loss points per
log window, data-wait unit, "no run" wording, duplicate agents, bad --agents-file lines, status
messages, Ctrl-C, no terminal, the sort menu's backdrop, help covering every key, --help text).

Screens are driven with Pilot over fixed snapshots (``tests/tui/scenes.py``) or over the recorded
fleet served by real local HTTP servers; trainer ranks are the trainer's own exporter.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from observe.cli import main as cli_main
from observe.sources.direct import DirectSource, Endpoint, LossHistory, same_endpoint_key
from observe.sources.verdicts import run_verdict
from observe.sources.view import ClusterSnapshot, NodeStatus, RankStatus, RunStatus, node_figures
from observe.tui.app import make_app
from observe.tui.screens.base import SortMenu, error_lines, status_line
from observe.tui.screens.cluster import COLUMNS, columns_for
from observe.tui.screens.gpus import _note as gpu_note
from observe.tui.screens.gpus import uuid_tails
from observe.tui.screens.help import KEYS, HelpScreen, MessagesScreen
from observe.tui.screens.node import PROCESS_COLUMNS, NodeScreen
from observe.tui.screens.run import RunScreen, run_lines
from observe.tui.screens.run_ranks import RANK_COLUMNS, deviation_bar, rank_rows
from observe.tui.widgets.grid import GpuGrid
from observe.tui.widgets.lines import Lines
from observe.tui.widgets.table import VirtualTable, column_layout
from tests.support.fleet import RecordedFleet, recorded, trainer_exposition
from tests.support.scenes import NOW, big_snapshot, finished_snapshot, fleet_snapshot, no_power_reading
from tests.support.tui import GPU0, GPU1, Offline, lines_text, table_text, until

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.anyio


async def shown(snapshot: ClusterSnapshot, size: tuple[int, int], node: str | None = None, keys: tuple = ()):
    """An app (context manager already entered) showing ``snapshot``; returns ``(app, pilot, ctx)``."""
    app = make_app(Offline(), interval=2.0, poll=False)
    ctx = app.run_test(size=size)
    pilot = await ctx.__aenter__()
    app.show_snapshot(snapshot)
    await pilot.pause()
    if node is not None:
        await app.push_screen(NodeScreen(node))
        await pilot.pause()
    for key in keys:
        await pilot.press(key)
        await pilot.pause()
    return app, pilot, ctx


# -- layout ---------------------------------------------------------------------------------------


def test_columns_give_way_in_their_order_and_the_essential_ones_never_drop() -> None:
    at80 = [c.key for c, _ in column_layout(COLUMNS, 80)]
    assert {"node", "state", "xid", "note"} <= set(at80) and "cpu" not in at80
    assert len(column_layout(COLUMNS, 200)) == len(COLUMNS)  # room for all at 200
    process = dict((c.key, w) for c, w in column_layout(PROCESS_COLUMNS, 80))
    assert process["command"] >= 24 and {"pid", "cpu", "res", "state"} <= set(process) and "time" not in process
    assert dict((c.key, w) for c, w in column_layout(PROCESS_COLUMNS, 120))["command"] >= 40


def test_the_rank_tables_collective_is_whole_at_120_columns_and_node_stays_at_80() -> None:
    # "in #73 all_gather_single" needs 24 characters: at 120 a figure column drops rather than the
    # collective being cut mid-word; at 80 NODE (a regrow column) is never dropped for it
    at120 = {c.key: w for c, w in column_layout(RANK_COLUMNS, 120)}
    collective = next(c for c in RANK_COLUMNS if c.key == "collective")
    assert at120["collective"] == collective.width >= 24 and {"node", "gpu", "blocked", "coll_wait"} <= set(at120)
    assert sum(at120.values()) + len(at120) - 1 <= 120
    at80 = {c.key: w for c, w in column_layout(RANK_COLUMNS, 80)}
    assert {"rank", "node", "state", "collective", "compute", "vs", "note"} <= set(at80)
    assert len(column_layout(RANK_COLUMNS, 200)) == len(RANK_COLUMNS)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_cluster_screen_keeps_state_and_xid_at_small_sizes(size) -> None:
    app, pilot, ctx = await shown(fleet_snapshot(), size)
    header = table_text(app.screen.query_one(VirtualTable))[0]
    assert "STATE" in header and "XID/1h" in header and "UTIL AVG" in header and "GMEM%" not in header
    await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize(
    ("node", "gpus", "size"),
    [
        ("p5-node-8gpu", 8, (80, 24)),
        ("p5-node-8gpu", 8, (120, 40)),
        ("gb200-node-16gpu", 16, (120, 40)),
        ("p5-node-8gpu", 8, (200, 50)),
    ],
)
async def test_every_gpu_of_a_node_is_on_screen_with_the_command_column(node, gpus, size) -> None:
    app, pilot, ctx = await shown(fleet_snapshot(node), size, node)
    screen = app.screen
    table = screen.query_one("#gpu-table", VirtualTable)
    drawn = [line for line in table_text(table)[1:] if line.strip()]
    assert len(drawn) == gpus and drawn[-1].split()[0] == str(gpus - 1)  # the last GPU is visible
    assert table.region.bottom <= size[1] - 1  # above the footer, not scrolled off
    assert "COMMAND" in table_text(screen.query_one("#processes", VirtualTable))[0]
    if table.size.width >= 120:
        assert "…" in drawn[0]  # UUIDs by their tail
    else:  # at 80 columns (and the 79 of the side-by-side pane) the UUID tail gives way to the whole NOTE
        assert drawn[0].rstrip().endswith("XID gpu_reset; throttle sw_power_cap"), drawn[0]
    await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_an_unreachable_agents_reason_is_whole_on_the_cluster_screen(size) -> None:
    # the GPU columns are there (the fleet has GPU nodes): NOTE must still say why in full
    app, pilot, ctx = await shown(fleet_snapshot(), size)
    table = app.screen.query_one(VirtualTable)
    assert "UTIL AVG" in table_text(table)[0]
    (row,) = [line for line in table_text(table)[1:] if line.startswith("10.0.0.9:9401")]
    assert " unreachable " in row and row.endswith(" connection refused"), row
    await ctx.__aexit__(None, None, None)


async def test_a_mixed_fleet_keeps_cpu_and_mem_at_120_columns() -> None:
    # GPU nodes and a node without GPUs: the GPU columns stay, and CPU% and MEM% (one pair: a
    # host's load) both show; less telling GPU figures give way first
    snapshot = fleet_snapshot()
    figures = [n.figures for n in snapshot.nodes if n.figures is not None]
    assert any(f.gpus for f in figures) and any(not f.gpus for f in figures)
    assert columns_for(snapshot.nodes) == COLUMNS
    app, pilot, ctx = await shown(snapshot, (120, 40))
    lines = table_text(app.screen.query_one(VirtualTable))
    header = lines[0].replace("▲", " ").split()
    assert {"CPU%", "MEM%", "GPUS", "LOST", "XID/1h", "NOTE"} <= set(header), header
    (cpu_node,) = [line for line in lines[1:] if line.startswith("cpu-node-3")]
    assert cpu_node.count("%") >= 2, cpu_node  # its CPU% and MEM% figures
    await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize(
    ("node", "size", "keys"),
    [
        ("gpu-node-2", (80, 24), ()),  # a LOST GPU, MIG
        ("gpu-node-2", (200, 50), ("c",)),  # the side-by-side GPU pane (79 wide), as lines
        ("p5-node-8gpu", (80, 24), ()),  # XID and throttle; a stale NVML reading
        ("p5-node-8gpu", (200, 50), ()),
    ],
)
async def test_every_gpus_note_is_whole_on_the_node_screen(node, size, keys) -> None:
    app, pilot, ctx = await shown(fleet_snapshot(node), size, node, keys)
    table = app.screen.query_one("#gpu-table", VirtualTable)
    drawn = table_text(table)[1:]
    notes = [gpu_note(row) for row in table.rows]
    assert len(drawn) >= len(notes) and any(notes)
    for line, note in zip(drawn, notes, strict=False):
        assert line.endswith(" " + note), (table.size.width, line, note)
    await ctx.__aexit__(None, None, None)


async def test_c_switches_between_compact_lines_and_detailed_blocks() -> None:
    app, pilot, ctx = await shown(fleet_snapshot("p5-node-8gpu"), (120, 40), "p5-node-8gpu")
    screen = app.screen
    assert screen.query_one("#gpu-table").display and not screen.query_one("#gpu-blocks").display
    await pilot.press("c")
    await pilot.pause()
    blocks = "\n".join(lines_text(screen.query_one("#gpus", Lines)))
    assert screen.query_one("#gpu-blocks").display and "GPU-abc00000-1111-2222-3333-00dea0000007" in blocks
    await ctx.__aexit__(None, None, None)


async def test_a_node_without_gpus_gives_the_gpu_pane_back() -> None:
    app, pilot, ctx = await shown(fleet_snapshot("cpu-node-3"), (120, 40), "cpu-node-3")
    screen = app.screen
    processes = screen.query_one("#processes", VirtualTable)
    assert not screen.query_one("#nvtop").display and processes.size.width == 120
    assert "GPU MEM" not in table_text(processes)[0]
    await ctx.__aexit__(None, None, None)


def test_uuid_tails_tell_the_gpus_apart() -> None:
    uuids = [f"GPU-abc00000-1111-2222-3333-00dea{i:07x}" for i in range(8)]
    tails = uuid_tails(uuids)
    assert len(set(tails)) == 8 and all(t.startswith("…") and len(t) <= 8 for t in tails)
    assert uuid_tails(["GPU-aaaa-1234567", "GPU-bbbb-1234567"]) == ["…a-1234567", "…b-1234567"]
    assert uuid_tails([None, "x"]) == ["N/A", "x"]


async def test_process_table_has_res_and_state() -> None:
    app, pilot, ctx = await shown(fleet_snapshot("gpu-node-1"), (120, 40), "gpu-node-1")
    lines = table_text(app.screen.query_one("#processes", VirtualTable))
    assert " S " in lines[0] and "RES" in lines[0]
    row = next(line for line in lines[1:] if "printf" in line)
    assert " S " in row and "1.0M" in row  # sleeping, 1 MiB resident
    await ctx.__aexit__(None, None, None)


# -- the GPU grid -----------------------------------------------------------------------------------


async def test_the_grid_shows_8192_gpus_on_one_screen_and_enter_opens_the_node() -> None:
    app, pilot, ctx = await shown(big_snapshot(1024), (200, 50), keys=("4",))
    grid = app.screen.query_one(GpuGrid)
    assert grid.gpus() == 8192 and len(grid._rows) <= grid.size.height  # nothing scrolled off
    legend = lines_text(app.screen.query_one("#grid-legend", Lines))[0]
    assert "GPU utilisation" in legend and "8,192 GPUs on 1,024 nodes" in legend
    for _ in range(37):
        await pilot.press("right")
    node_line = lines_text(app.screen.query_one("#grid-node", Lines))[0]
    assert "gpu-node-0037" in node_line and " 2% " in node_line  # its idle GPU 3
    await pilot.press("m")
    assert "GPU memory used" in lines_text(app.screen.query_one("#grid-legend", Lines))[0]
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, NodeScreen), what="the node")
    assert app.screen.node == "gpu-node-0037"
    await ctx.__aexit__(None, None, None)


async def test_the_grid_says_when_rows_are_out_of_sight() -> None:
    app, pilot, ctx = await shown(big_snapshot(1024), (80, 24), keys=("4",))
    await pilot.pause()
    legend = lines_text(app.screen.query_one("#grid-legend", Lines))[0]
    assert "more rows below (PgDn)" in legend
    await pilot.press("end")
    await pilot.pause()
    assert "more rows below" not in lines_text(app.screen.query_one("#grid-legend", Lines))[0]
    await ctx.__aexit__(None, None, None)


def test_grid_cells_mark_lost_hot_xid_and_unreachable_gpus() -> None:
    from observe.tui.widgets.grid import MODES, node_cells

    nodes = big_snapshot(1024).nodes
    util, _, temperature, xid = MODES
    assert node_cells(nodes[451], util)[0] == ("▀", "s7", "lost")  # GPU 1 lost (bottom half of cell 0)
    assert node_cells(nodes[200], temperature)[3][1] == "heat7"  # GPU 6 at 91 °C
    assert node_cells(nodes[612], xid)[2][2] == "x-reboot" and node_cells(nodes[612], xid)[0][1] == "x-none"
    assert {ch for ch, _, _ in node_cells(nodes[800], util)} == {"░"}
    assert node_cells(nodes[37], util)[1][2] == "s0"  # GPU 3 idle


# -- the truth at the edges ----------------------------------------------------------------------------


def test_a_sum_over_fewer_gpus_than_the_node_has_is_partial() -> None:
    f = node_figures(no_power_reading(recorded("gpu-node-1", NOW), "n", gpu=5), NOW)
    assert (f.gpus, f.power_gpus) == (8, 7) and f.partial(f.power_gpus) and not f.partial(f.util_gpus)
    lost = node_figures(recorded("gpu-node-2", NOW), NOW)  # a lost GPU: every figure is partial
    assert lost.partial(lost.power_gpus) and lost.partial(lost.temperature_gpus)


async def test_partial_figures_are_marked_on_the_cluster_and_node_screens() -> None:
    app, pilot, ctx = await shown(fleet_snapshot("p5-node-nopower"), (200, 50))
    rows = {line.split()[0]: line for line in table_text(app.screen.query_one(VirtualTable))[1:] if line.strip()}
    assert "4,430 W*" in rows["p5-node-nopower"] and "10,800 W " in rows["gb200-node-16gpu"]
    await app.push_screen(NodeScreen("p5-node-nopower"))
    await pilot.pause()
    summary = lines_text(app.screen.query_one("#gpu-summary", Lines))[0]
    assert "power 4,430 W (7 of 8 GPUs read)" in summary
    await ctx.__aexit__(None, None, None)


async def test_a_finished_run_is_finished_even_after_its_ranks_stop_answering() -> None:
    fleet = RecordedFleet()
    try:
        urls = [
            fleet.trainer(f"rank{r}", trainer_exposition(r, "gpu-node-1", uuid, 0.5, 0.02, step=200, phase="finished"))
            for r, uuid in ((0, GPU0), (1, GPU1))
        ]
        source = DirectSource([], [Endpoint(u) for u in urls], timeout=1.0)
        first = await source.cycle(None, 2.0)
        assert [r.shown_state for r in first.runs[0].ranks] == ["finished", "finished"]
        fleet.servers["rank1"].close()  # the linger is over: the process exits
        second = await source.cycle(None, 2.0)
        source.close()
        (run,) = second.runs
        assert [r.state for r in run.ranks] == ["ok", "finished"] and run.ranks[1].error is None
        assert run.finished and run.step == 200 and run.eta_seconds == 0.0 and not second.errors
        text = "\n".join("".join(t for t, _ in line) for line in run_lines(second, run, 120))
        assert "finished" in text and "200 / 200" in text and "ETA done" in text
    finally:
        fleet.close()


async def test_the_run_screen_says_finished_with_the_final_figures() -> None:
    app, pilot, ctx = await shown(finished_snapshot(), (120, 40), keys=("2",))
    screen = app.screen
    header = "\n".join(lines_text(screen.query_one("#run", Lines)))
    ranks = table_text(screen.query_one("#ranks", VirtualTable))
    assert "finished" in header and "200 / 200" in header and "ETA done" in header
    assert "finished" in ranks[2] and "unreachable" not in "\n".join(ranks)
    await ctx.__aexit__(None, None, None)


def _run(*compute: float, step: float = 0.5) -> RunStatus:
    """A moving run whose ranks take ``step`` seconds per step each (as synchronous ranks do),
    rank ``i`` computing ``compute[i]`` of it; with its verdict, as the sources judge it."""
    ranks = tuple(
        RankStatus(
            rank=i,
            run_id="r",
            window_step_seconds=step,
            window_compute_seconds=c,
            window_collective_wait_seconds=step - c,
            train_state="computing",
            stalled=False,
            step=10,
            planned_steps=20,
        )
        for i, c in enumerate(compute)
    )
    return RunStatus("r", ranks, verdict=run_verdict(ranks, NOW)[0])


def test_the_straggler_mark_is_the_verdicts_by_compute_and_bars_on_a_deviation_scale() -> None:
    snapshot = ClusterSnapshot(time_unix=NOW)
    close = _run(0.200, 0.260)  # 1.3x the median's compute: below the verdict's 1.5x
    rows = rank_rows(snapshot, close)
    assert not any(r.straggler for r in rows) and close.verdict.verdict == "healthy"
    text = "\n".join("".join(t for t, _ in line) for line in run_lines(snapshot, close, 120))
    assert "Verdict  healthy" in text and "most compute: rank 1, 1.30× the median" in text and "◀" not in text
    assert deviation_bar(0.0).strip() == "│" and deviation_bar(0.01).count("█") == 0  # 1 %: a sliver
    assert deviation_bar(1.0).count("█") == 6 and deviation_bar(-1.0).count("█") == 6
    assert deviation_bar(0.5).count("█") == 3  # the verdict's 1.5x: half a side
    far = rank_rows(snapshot, _run(0.2, 0.2, 0.36))  # 1.8x, and 160 ms over the median is 32 % of the step
    assert [r.straggler for r in far] == [False, False, True] and far[2].vs_median == pytest.approx(0.8)
    tiny = rank_rows(snapshot, _run(0.010, 0.010, 0.030))  # 3x, but 20 ms of a 500 ms step: noise
    assert not any(r.straggler for r in tiny)


def test_the_loss_history_has_one_point_per_log_window() -> None:
    history = LossHistory()
    window = (2.5, 0.8, 0.01, 5000.0)
    for step in range(11, 20):  # nine refreshes inside one log window: the step moves, the window does not
        points = history.add("r", step, 2.5, window)
    assert points == ((11, 2.5),)
    points = history.add("r", 21, 2.4, (2.4, 0.79, 0.01, 5010.0))
    assert points == ((11, 2.5), (21, 2.4))


async def test_data_wait_is_a_share_of_the_step_as_in_the_trainer_log() -> None:
    # at 200 columns (at 120 DATA WAIT gives its room to the whole collective name)
    app, pilot, ctx = await shown(fleet_snapshot(), (200, 50), keys=("2",))
    ranks = table_text(app.screen.query_one("#ranks", VirtualTable))
    # the straggler (rank 1) first
    assert "DATA WAIT" in ranks[0] and "15.0%" in ranks[1] and "3.3%" in ranks[2] and "90 ms" not in ranks[1]
    await ctx.__aexit__(None, None, None)


@pytest.mark.parametrize(
    ("trainers", "errors", "expected"),
    [
        (0, (), "no trainer endpoints"),
        (2, ("trainer http://h:9500/metrics: unreachable: connection refused",), "2 trainer endpoints given"),
        (None, (), "Prometheus has no fsdp_train_* series"),
    ],
)
async def test_no_run_says_why(trainers, errors, expected) -> None:
    app, pilot, ctx = await shown(
        ClusterSnapshot(time_unix=NOW, trainers=trainers, errors=errors), (120, 40), keys=("2",)
    )
    text = "\n".join(lines_text(app.screen.query_one("#run", Lines)))
    assert expected in text and ("give trainer endpoints" in text) == (trainers == 0)
    if errors:
        assert "connection refused" in text
    await ctx.__aexit__(None, None, None)


async def test_one_agent_under_two_names_is_one_row() -> None:
    fleet = RecordedFleet()
    try:
        url = fleet.agent("gpu-node-1")
        port = url.rsplit(":", 1)[1]
        assert same_endpoint_key(f"localhost:{port}") == same_endpoint_key(f"http://127.0.0.1:{port}/")
        source = DirectSource([Endpoint(f"localhost:{port}"), Endpoint(url + "/"), Endpoint(f"127.0.0.1:{port}")], [])
        assert len(source.agents) == 1 and source.description.startswith("1 agent,")
        other = fleet.agent("gpu-node-1")  # a second address answering for the same node
        source = DirectSource([Endpoint(url), Endpoint(other)], [])
        snapshot = await source.cycle(None, 2.0)
        source.close()
        assert [n.name for n in snapshot.nodes] == ["gpu-node-1"]
        assert any("answers as node gpu-node-1, the same as" in e for e in snapshot.errors)
    finally:
        fleet.close()


def test_a_bad_agents_file_line_is_one_error_naming_the_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "nodes.txt"
    path.write_text("# rack 1\n10.0.0.1:9401\nnot a url at all\n")
    assert cli_main(["top", "--agents-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"error: --agents-file: {path} line 3: 'not a url at all' is not an address; give host:port or "
        "http://host:port\n"
    )


def test_status_messages_are_cut_at_word_boundaries_and_say_how_to_see_them() -> None:
    error = (
        "listing agent pods in fsdp-observe: API server https://10.0.0.1:6443 unreachable (Max retries "
        "exceeded with url: /api/v1/namespaces/fsdp-observe/pods)"
    )
    (line,) = error_lines((error,), 80)
    text = "".join(t for t, _ in line)
    assert len(text) <= 80 and "(e: all 1 message)" in text
    kept = text.split("…")[0].removeprefix(" ! ")
    assert error.startswith(kept) and error[len(kept)] == " "  # the cut falls before a space
    one = status_line(
        ClusterSnapshot(time_unix=NOW, nodes=(NodeStatus(name="a", source="a", state="ok"),)), "Cluster", 1.0, 80
    )
    assert "1 node " in "".join(t for t, _ in one) + " "


async def test_e_shows_every_message_in_full() -> None:
    long = "trainer http://10.0.0.1:9500/metrics: unreachable: " + "a very long reason " * 8
    app, pilot, ctx = await shown(
        ClusterSnapshot(time_unix=NOW, errors=(long, "second", "third", "fourth")), (80, 24), keys=("e",)
    )
    assert isinstance(app.screen, MessagesScreen)
    text = " ".join(lines_text(app.screen.query_one("#messages-lines", Lines)))
    assert "fourth" in text and " ".join(long.split()) in " ".join(text.replace("!", "").split())
    await ctx.__aexit__(None, None, None)


async def test_ctrl_c_quits() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app._exit, what="quit on Ctrl-C")


def test_top_without_a_terminal_refuses_in_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "observe.cli", "top", "--agent", "127.0.0.1:9"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: terminal: stdout is not a terminal; ") and proc.stderr.count("\n") == 1


async def test_the_sort_menu_keeps_the_table_visible() -> None:
    app, pilot, ctx = await shown(fleet_snapshot(), (120, 40), keys=("s",))
    assert isinstance(app.screen, SortMenu) and app.screen.styles.background.a < 1  # translucent
    await ctx.__aexit__(None, None, None)


async def test_help_lists_every_key_a_footer_shows() -> None:
    from observe.tui.app import TopApp
    from observe.tui.screens.alerts import AlertsScreen
    from observe.tui.screens.cluster import ClusterScreen
    from observe.tui.screens.grid import GridScreen

    listed = " ".join(key for key, _ in KEYS).lower().replace("esc", "escape")
    for owner in (TopApp, ClusterScreen, NodeScreen, RunScreen, AlertsScreen, GridScreen, HelpScreen):
        for binding in owner.BINDINGS:
            for key in binding.key.split(","):
                name = {"question_mark": "?", "slash": "/", "f6": "f6", "ctrl+c": "ctrl-c"}.get(key, key)
                assert name.lower() in listed, f"{owner.__name__}: {key} is not in the help"


def test_help_texts_have_no_restructuredtext_markup() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "observe.cli", "top", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0 and "``" not in proc.stdout
    assert "Give exactly one kind of source" in " ".join(proc.stdout.split())


def test_rank_without_answers_keeps_state() -> None:
    rank = RankStatus(rank=0, run_id="r", phase="training", state="unreachable")
    assert rank.shown_state == "unreachable" and replace(rank, phase="finished").shown_state == "unreachable"
    assert asyncio.iscoroutinefunction(DirectSource.cycle)


def test_a_refresh_that_lands_while_the_app_closes_is_kept_not_drawn() -> None:
    """A refresh the poller delivered just before ``q`` reached the app once its screens were gone:
    ``ScreenStackError`` from inside the message loop. It is kept as the latest snapshot, and not drawn."""
    app = make_app(Offline(), interval=2.0, poll=False)  # not running: no screen on its stack
    snapshot = fleet_snapshot()
    app.show_snapshot(snapshot)
    assert app.snapshot is snapshot and app.refreshes == 1
