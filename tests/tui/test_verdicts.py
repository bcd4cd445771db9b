"""Each run's verdict from its ranks' ``/metrics`` series (``observe.sources.verdicts``), and the rank
view's words, from what real gloo ranks served (tests/tui/recorded/forensics: healthy, a straggler,
a hang, a rank holding the GIL; ``python -m tests.tui.record_forensics`` records them)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from observe.diagnosis import RankEvidence, Unreached, from_state, judge
from observe.sources.direct import DirectSource, Endpoint
from observe.sources.prometheus import PrometheusSource
from observe.sources.trainer import parse_exposition, ranks_from_samples
from observe.sources.verdicts import rank_evidence, run_verdict
from observe.sources.view import DEADLINE_MISSED, ClusterSnapshot, RunStatus
from observe.tui.poller import Poller, adaptive_interval
from observe.tui.screens.rank import Fetched, culprit_text, page_lines
from tests.support.fleet import RecordedFleet, trainer_exposition
from tests.support.forensics import hang_fleet, recorded_ranks, render, state_doc
from tests.support.scenes import NOW, fleet_snapshot
from tests.support.tui import GPU0

URL = "http://10.0.0.1:9501/metrics"


def test_a_real_ranks_hang_series_are_read_into_its_status() -> None:
    waiting, behind = recorded_ranks("hang", NOW)
    assert waiting.train_state == "collective" and waiting.waiting == ("0", "all_gather_single", 73)
    assert waiting.collectives == (("0", 73, 72),) and waiting.stalled and waiting.stall_threshold_seconds == 5.0
    assert waiting.blocked_seconds == pytest.approx(7.25, abs=0.01)
    assert behind.train_state == "computing" and behind.waiting is None and behind.collectives == (("0", 72, 72),)
    assert behind.blocked_seconds == 0 and behind.window_compute_seconds == pytest.approx(1.035, abs=0.001)
    assert behind.last_step_unix == pytest.approx(NOW - 7.09, abs=0.01)  # moved to the test's clock


@pytest.mark.parametrize(
    ("mode", "verdict", "culprits"), [("healthy", "healthy", []), ("straggle", "straggler", [1]), ("hang", "hang", [1])]
)
def test_the_metrics_alone_give_the_verdict_the_ranks_pages_give(mode: str, verdict: str, culprits: list[int]) -> None:
    judged, stand_ins = run_verdict(recorded_ranks(mode, NOW), NOW)
    assert judged is not None and judged.verdict == verdict and judged.culprit_ranks == culprits and not stand_ins
    # what fsdp-observe diagnose --trainer says from the same ranks' /debug/state pages
    pages = judge([from_state(state_doc(mode, r)) for r in (0, 1)])
    assert (pages.verdict, pages.culprit_ranks) == (verdict, culprits)


def test_the_hang_names_the_collective_and_the_straggler_its_compute() -> None:
    hang, _ = run_verdict(recorded_ranks("hang", NOW), NOW)
    assert hang is not None
    culprit = hang.culprits[0]
    assert (culprit.kind, culprit.pg, culprit.seq, culprit.op, culprit.waiting_ranks) == (
        "behind",
        "0",
        73,
        "all_gather_single",
        [0],
    )
    slow, _ = run_verdict(recorded_ranks("straggle", NOW), NOW)
    assert slow is not None and slow.culprits[0].seconds == pytest.approx(0.354, abs=0.001)
    assert slow.culprits[0].median_compute_seconds == pytest.approx(0.0637, abs=0.001)


def test_without_hang_series_there_is_no_verdict() -> None:
    text = trainer_exposition(0, "n", GPU0, 0.5, 0.02)().decode()  # collective tracking off
    ranks = ranks_from_samples(parse_exposition(text), URL, NOW)
    assert ranks[0].train_state is None and run_verdict(ranks, NOW) == (None, [])


def test_a_rank_whose_pull_failed_is_unreached_with_why() -> None:
    rank = recorded_ranks("hang", NOW)[1]
    assert rank_evidence(replace(rank, state="slow", error="no answer"), NOW) == Unreached(
        rank.source, "timeout", "no answer", 1, "vm"
    )
    assert rank_evidence(replace(rank, state="unreachable"), NOW).reason == "refused"  # type: ignore[union-attr]
    assert rank_evidence(replace(rank, state="malformed"), NOW).reason == "error"  # type: ignore[union-attr]
    # through Prometheus, a rank's failing scrapes say nothing of how it fails
    assert rank_evidence(replace(rank, state="unreachable", source="prometheus"), NOW).reason == "error"  # type: ignore[union-attr]
    finished = rank_evidence(replace(rank, state="finished", phase="finished"), NOW)
    assert isinstance(finished, RankEvidence) and finished.phase == "finished"  # its run is over, not gone


def test_an_address_that_never_answered_takes_the_missing_rank_and_joins_the_table() -> None:
    ranks = recorded_ranks("gil", NOW)  # rank 0 answered; rank 1 holds the GIL and never did
    address = "http://127.0.0.1:16994/metrics"
    judged, stand_ins = run_verdict(ranks, NOW, [Unreached(address, "timeout", "no answer within 1.5 s")])
    assert judged is not None and judged.verdict == "hang" and judged.culprit_ranks == [1]
    assert judged.culprits[0].kind == "unresponsive"
    assert [(r.rank, r.state, r.source, r.run_id) for r in stand_ins] == [(1, "slow", address, ranks[0].run_id)]


def test_the_culprits_node_and_gpu_index_come_from_the_agents_data() -> None:
    (run,) = fleet_snapshot().runs
    assert run.verdict is not None and run.verdict.verdict == "straggler"
    culprit = run.verdict.culprits[0]
    assert (culprit.rank, culprit.node, culprit.gpu_index) == (1, "gpu-node-1", 1)


def test_the_direct_source_judges_each_refresh_from_metrics_alone() -> None:
    fleet = RecordedFleet()
    try:
        urls = [fleet.rank(f"rank{r}", {"/metrics": render("hang", r, "/metrics")}) for r in (0, 1)]
        source = DirectSource([], [Endpoint(u) for u in urls], timeout=2.0)

        async def cycle():
            try:
                return await source.cycle(None, 5.0)
            finally:
                source.close()

        (run,) = asyncio.run(cycle()).runs
        assert run.verdict is not None and run.verdict.verdict == "hang" and run.verdict.culprit_ranks == [1]
        assert fleet.requests("rank0") == ["/metrics"] and fleet.requests("rank1") == ["/metrics"]
    finally:
        fleet.close()


def test_prometheus_keeps_a_rank_whose_series_went_as_unreachable_while_its_run_lives() -> None:
    source = PrometheusSource("http://127.0.0.1:1")
    try:
        both = recorded_ranks("hang", NOW)
        source._keep_gone(both)
        kept = source._keep_gone(both[:1])  # rank 1's scrapes fail now
        assert [(r.rank, r.state) for r in kept] == [(0, "ok"), (1, "unreachable")]
        assert run_verdict(kept, NOW)[0].culprit_ranks == [1]  # type: ignore[union-attr]
        assert source._keep_gone([]) == []  # the whole run gone: nothing kept (it did not finish)
        done = [replace(r, phase="finished") for r in both]
        source._keep_gone(done)
        assert [r.state for r in source._keep_gone([])] == ["finished", "finished"]  # a finished run stays
    finally:
        source.close()


def test_the_rank_view_says_why_a_rank_does_not_answer() -> None:
    url = "http://10.0.0.1:9501/metrics"
    gone = Fetched(Unreached(url, "refused", "connection refused"), NOW, 0, {"alive": False, "pid": 42})
    text = " ".join("".join(t for t, _ in line) for line in page_lines(gone, url, 100))
    assert "http://10.0.0.1:9501/debug/state" in text and "nothing listens there: its process is gone" in text
    assert "reports its process (pid 42) not running" in text
    silent = Fetched(Unreached(url, "timeout", "no answer within 5.0 s"), NOW)
    text = " ".join("".join(t for t, _ in line) for line in page_lines(silent, url, 100))
    assert "its training thread holds the GIL" in text and "no other rank of its node answered" in text
    text = " ".join("".join(t for t, _ in line) for line in page_lines(None, None, 100))
    assert "this view reads Prometheus, which has no stacks" in text


def test_a_culprits_words_count_the_waiting_crowd() -> None:
    (hang, _) = run_verdict(recorded_ranks("hang", NOW), NOW)
    assert hang is not None
    culprit = replace(hang.culprits[0], waiting_ranks=list(range(8191)))
    assert culprit_text(culprit) == (
        "behind: it has not entered all_gather_single #73 on process group 0 for 7 s; 8,191 ranks (0–8190) wait in it"
    )


def test_a_rank_the_refresh_ran_out_of_time_for_keeps_its_last_figures() -> None:
    # at thousands of ranks a refresh can overrun its deadline: that says nothing of the ranks cut
    rank = recorded_ranks("hang", NOW)[1]
    cut = rank_evidence(replace(rank, state="slow", error=DEADLINE_MISSED), NOW)
    assert isinstance(cut, RankEvidence) and cut.groups["0"].enqueued == 72
    never = run_verdict(recorded_ranks("hang", NOW)[:1], NOW, [Unreached(URL, "timeout", "no answer within 1.5 s")])
    assert never[0] is not None and never[0].culprit_ranks == [1]  # an address that timed out is a culprit


def test_an_address_the_refresh_ran_out_of_time_for_is_no_culprit() -> None:
    fleet = RecordedFleet()
    try:
        urls = [fleet.rank("rank0", {"/metrics": render("hang", 0, "/metrics")}), fleet.unreachable() + "/metrics"]
        source = DirectSource([], [Endpoint(u) for u in urls], timeout=2.0)
        source._trainer_errors[urls[1]] = ("slow", DEADLINE_MISSED)  # as a cut pull leaves it

        async def cycle():
            source.trainers = source.trainers[:1]  # the cut address is not pulled again in this refresh
            try:
                return await source.cycle(None, 5.0)
            finally:
                source.close()

        (run,) = asyncio.run(cycle()).runs
        assert run.verdict is not None and run.verdict.culprits[0].kind == "unobserved"  # not "unresponsive"
    finally:
        fleet.close()


def test_trainer_ranks_count_as_nodes_for_the_refresh_interval() -> None:
    ranks = hang_fleet(8192, 5121, NOW)
    snapshot = ClusterSnapshot(time_unix=NOW, runs=(RunStatus("r", tuple(ranks)),))
    delivered: list[ClusterSnapshot] = []

    class Ranks:
        description = "8,192 ranks"

        async def cycle(self, focus, deadline):
            return snapshot

        def close(self) -> None:
            pass

    poller = Poller(Ranks(), delivered.append)
    poller.start()
    try:
        deadline = time.monotonic() + 10
        while not delivered and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        poller.stop()
    assert delivered and poller.interval == adaptive_interval(8192) == 6.0  # 1 s by its 0 nodes alone
