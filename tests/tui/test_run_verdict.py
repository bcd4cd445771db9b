"""The Run screen's verdict, driven with Pilot over real HTTP from what real gloo ranks served.

Each rank is a local server answering ``/metrics`` and ``/debug/state`` with the pages two real
gloo ranks served under ``fsdp-observe run`` (tests/tui/recorded/forensics: a hang, a rank holding
the GIL), its last step's time moved to each request's moment as a live rank's would be. The
8,192-rank hang is simulated from that recording's format (``tests.support.forensics.hang_fleet``).
"""

from __future__ import annotations

import time

import pytest

from observe.sources.direct import DirectSource, Endpoint
from observe.tui.app import TopApp, make_app
from observe.tui.screens import rank as rank_screen
from observe.tui.screens.rank import RankScreen
from observe.tui.screens.run import RunScreen
from observe.tui.widgets.lines import Lines
from observe.tui.widgets.table import VirtualTable
from tests.support.fleet import RecordedFleet
from tests.support.forensics import RECORDED, render
from tests.support.scenes import hang_snapshot
from tests.support.tui import Offline, lines_text, reach, table_text, until

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


def serve(fleet: RecordedFleet, mode: str, rank: int, delay: float = 0.0) -> str:
    """Rank ``rank`` of ``mode``'s recording on a local server; its ``/metrics`` URL."""
    pages = {"/metrics": render(mode, rank, "/metrics")}
    if (RECORDED / mode / f"rank{rank}.state.json").exists():
        pages["/debug/state"] = render(mode, rank, "/debug/state")
    return fleet.rank(f"rank{rank}", pages, delay)


def app_over(urls: list[str]) -> TopApp:
    return make_app(DirectSource([], [Endpoint(u) for u in urls], timeout=0.5), interval=1.0)


async def run_screen(pilot, app: TopApp) -> RunScreen:
    await until(pilot, lambda: app.snapshot.runs and app.snapshot.runs[0].verdict is not None, what="a verdict")
    await reach(pilot, RunScreen, "2")
    return app.screen


def banner(screen: RunScreen) -> str:
    text = lines_text(screen.query_one("#run", Lines))
    start = next(i for i, line in enumerate(text) if line.startswith(" Verdict"))
    return " ".join(line.strip() for line in text[start:])


async def test_a_hang_names_the_rank_behind_first_and_enter_shows_its_stack() -> None:
    fleet = RecordedFleet()
    try:
        app = app_over([serve(fleet, "hang", 0), serve(fleet, "hang", 1)])
        async with app.run_test(size=SIZE) as pilot:
            screen = await run_screen(pilot, app)
            said = banner(screen)
            assert (
                "HANG" in said and "rank 1 (node vm) has not entered all_gather_single #73 on process group 0" in said
            )
            assert "rank 0 waits in it" in said
            rows = table_text(screen.query_one("#ranks", VirtualTable))[1:3]
            assert rows[0].split()[:3] == ["1", "vm", "cpu"] and "issued #72" in rows[0] and "◀ behind" in rows[0]
            assert "! computing" in rows[0] and "! collective" in rows[1] and "in #73 all_gather" in rows[1]
            assert "/debug/state" not in fleet.requests("rank1")  # the refresh reads /metrics only
            await pilot.press("enter")
            view = await until(
                pilot, lambda: isinstance(app.screen, RankScreen) and app.screen.fetched and app.screen, what="page"
            )
            text = " ".join(line.strip() for line in lines_text(view.query_one("#rank-lines", Lines)))
            assert "behind: it has not entered all_gather_single #73 on process group 0" in text
            assert "recorded/forensics/spike_train.py:17 in <module>" in text
            assert 'print("hanging", flush=True); time.sleep(10**6)' in text
            assert "reduce_scatter_single #72 on pg 0" in text  # the last collective it issued
            assert fleet.requests("rank1").count("/debug/state") == 1  # asked once, on Enter
            await reach(pilot, RunScreen, "escape")
    finally:
        fleet.close()


async def test_a_rank_holding_the_gil_is_shown_with_the_stack_its_peer_serves(monkeypatch) -> None:
    monkeypatch.setattr(rank_screen, "PAGE_TIMEOUT", 1.0)
    fleet = RecordedFleet()
    try:
        # rank 1 holds the GIL: its port accepts connections and never answers
        app = app_over([serve(fleet, "gil", 0), fleet.rank("rank1", {}, delay=60.0)])
        async with app.run_test(size=SIZE) as pilot:
            screen = await run_screen(pilot, app)
            said = banner(screen)
            assert "HANG" in said and "rank 1 does not answer" in said and "holds the GIL" in said
            assert "rank 0 waits in it (all_gather_single #73 on process group 0)" in said
            rows = table_text(screen.query_one("#ranks", VirtualTable))[1:3]
            assert rows[0].split()[0] == "1" and "slow" in rows[0] and "◀ no answer" in rows[0]
            await pilot.press("enter")
            view = await until(
                pilot, lambda: isinstance(app.screen, RankScreen) and app.screen.fetched and app.screen, what="page"
            )
            text = " ".join(line.strip() for line in lines_text(view.query_one("#rank-lines", Lines)))
            assert "no answer (timeout" in text and "its training thread holds the GIL" in text
            assert "rank 0 of the same node reports its process (pid 3960) alive" in text
            assert text.index("spike_train.py:21 in <module>") < text.index("re/__init__.py:166 in match")
            assert "/debug/state" in fleet.requests("rank0")  # the peer was asked what it knows
    finally:
        fleet.close()


async def test_the_page_is_asked_without_holding_up_the_screen() -> None:
    fleet = RecordedFleet()
    try:
        app = app_over([serve(fleet, "hang", 0), serve(fleet, "hang", 1, delay=0.0)])
        async with app.run_test(size=SIZE) as pilot:
            screen = await run_screen(pilot, app)
            fleet.servers["rank1"].httpd.RequestHandlerClass.do_GET = _never_answer  # rank 1 stops answering
            await pilot.press("enter")
            view = await until(pilot, lambda: isinstance(app.screen, RankScreen) and app.screen, what="rank view")
            assert "asking http://127.0.0.1:" in "\n".join(lines_text(view.query_one("#rank-lines", Lines)))
            started = time.monotonic()
            await reach(pilot, RunScreen, "escape")  # the page's 5 s wait does not hold the keys up
            assert time.monotonic() - started < 2.0 and app.screen is screen
    finally:
        fleet.close()


def _never_answer(handler) -> None:
    time.sleep(30)


async def test_8192_ranks_show_the_culprit_first_and_count_the_crowd() -> None:
    app = make_app(Offline(), interval=2.0, poll=False)
    snapshot = hang_snapshot(8192, culprit=5121)
    async with app.run_test(size=(80, 24)) as pilot:
        app.show_snapshot(snapshot)
        await reach(pilot, RunScreen, "2")
        screen = app.screen
        said = banner(screen)
        assert "rank 5121 (node node-0640) has not entered all_gather_single #73" in said
        assert "8,191 ranks (0–5120, 5122–8191) wait in it" in said and "0, 1, 2" not in said  # counted, not listed
        table = screen.query_one("#ranks", VirtualTable)
        assert len(table.rows) == 8192 and table.rows[0].rank.rank == 5121
        first = table_text(table)[1]
        assert first.split()[0] == "5121" and "◀ behind" in first
        await pilot.press("slash", *"behind", "enter")
        await until(pilot, lambda: len(table.rows) == 1, what="the filter")
        assert table.rows[0].rank.rank == 5121
