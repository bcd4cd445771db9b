"""The fan-in: the HTTP client against a real local server, the direct source's states, the cluster
figures (N/A never 0, LOST, MIG), the run's aggregates and the trainer parser."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import time
from dataclasses import replace

import pytest

from observe.model import XidEvent
from observe.sources.direct import DirectSource, Endpoint, LossHistory, decode_node
from observe.sources.http import FetchError, HttpFetcher
from observe.sources.trainer import parse_exposition, ranks_from_samples
from observe.sources.view import (
    NodeFigures,
    NodeStatus,
    RankStatus,
    RunStatus,
    node_figures,
    node_status,
    worst_severity,
)
from tests.support.fleet import RecordedFleet, recorded, trainer_exposition
from tests.support.tui import GPU0, GPU1

NOW = 1_800_000_000.0


# -- the HTTP client ------------------------------------------------------------------------------


class Server:
    """A raw asyncio HTTP server answering from ``replies`` (path -> raw response bytes or a delay)."""

    def __init__(self, replies: dict[str, bytes | float]) -> None:
        self.replies = replies
        self.connections = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.base_events.Server | None = None

    def drop(self) -> None:
        """Close every open connection from the server's side."""
        for writer in self.writers:
            writer.close()

    async def start(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            self.writers.append(writer)
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    path = head.split(b" ")[1].decode()
                    reply = self.replies[path]
                    if isinstance(reply, float):
                        await asyncio.sleep(reply)
                        reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                    writer.write(reply)
                    await writer.drain()
                    if b"Connection: close" in reply or b"Content-Length" not in reply and b"chunked" not in reply:
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


def ok(body: bytes, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body


def fetch(replies: dict[str, bytes | float], *paths: str, timeout: float = 2.0):
    """GET ``paths`` in order from a fresh server; returns (results or FetchErrors, connections made)."""

    async def run():
        server = Server(replies)
        base = await server.start()
        fetcher = HttpFetcher(concurrency=4, timeout=timeout)
        out = []
        for path in paths:
            try:
                out.append(await fetcher.get(base + path))
            except FetchError as exc:
                out.append(exc)
        fetcher.close()
        server.server.close()
        return out, server.connections

    return asyncio.run(run())


def test_keep_alive_content_length_chunked_gzip_and_close_delimited() -> None:
    replies = {
        "/a": ok(b"hello"),
        "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        "/gzip": ok(gzip.compress(b"zipped"), "Content-Encoding: gzip"),
        "/close": b"HTTP/1.0 200 OK\r\n\r\nuntil close",
    }
    results, connections = fetch(replies, "/a", "/chunked", "/gzip", "/a", "/close")
    assert results == [b"hello", b"hello world", b"zipped", b"hello", b"until close"]
    assert connections == 1  # one kept-alive connection for all five


def test_errors_are_typed_and_the_connection_is_not_reused_after_them() -> None:
    replies = {
        "/404": b"HTTP/1.1 404 Not Found\r\nContent-Length: 10\r\n\r\nnot found\n",
        "/slow": 1.0,
        "/junk": b"SSH-2.0-OpenSSH\r\n\r\n",
        "/ok": ok(b"fine"),
    }
    results, _ = fetch(replies, "/404", "/slow", "/ok", "/junk", "/ok", timeout=0.3)
    assert [getattr(r, "kind", r) for r in results] == ["malformed", "slow", b"fine", "malformed", b"fine"]
    assert str(results[0]) == "HTTP 404: not found" and "within 0.3 s" in str(results[1])


def test_a_refused_connection_is_unreachable() -> None:
    async def run() -> FetchError:
        try:
            await HttpFetcher(timeout=2).get(RecordedFleet.unreachable() + "/snapshot")
        except FetchError as exc:
            return exc
        raise AssertionError("no error")

    error = asyncio.run(run())
    assert error.kind == "unreachable" and str(error) == "connection refused"


def test_a_server_closing_an_idle_connection_costs_one_retry_not_an_error() -> None:
    replies = {"/once": ok(b"1", "Connection: keep-alive")}

    async def run() -> list[bytes]:
        server = Server(replies)
        base = await server.start()
        fetcher = HttpFetcher(timeout=2)
        first = await fetcher.get(base + "/once")
        server.drop()  # the server closes the idle connection
        await asyncio.sleep(0.05)
        second = await fetcher.get(base + "/once")
        fetcher.close()
        return [first, second, server.connections]

    assert asyncio.run(run()) == [b"1", b"1", 2]


# -- the direct source ---------------------------------------------------------------------------


def figure_values(node: NodeStatus) -> dict[str, object]:
    """A node's ``NodeFigures`` fields (its figures, without the pull's state)."""
    return {f.name: getattr(node, f.name) for f in dataclasses.fields(NodeFigures)}


def test_stale_malformed_and_recovered_states() -> None:
    previous = NodeStatus(name="10.0.0.1:9401", source="http://10.0.0.1:9401")
    fresh = recorded("gpu-node-1", NOW, age=1.0)
    ok_status = decode_node(previous, fresh.to_json().encode(), NOW, keep=False)
    assert ok_status.state == "ok" and ok_status.name == "gpu-node-1" and ok_status.snapshot is None
    bad = decode_node(ok_status, b'{"schema_version": 2}', NOW + 5, keep=False)
    assert bad.state == "malformed" and "schema_version 2" in bad.error
    assert bad.figures is not None and figure_values(bad) == figure_values(ok_status)  # last data kept
    assert bad.age(NOW + 5) == pytest.approx(6.0)
    stale = decode_node(bad, recorded("gpu-node-1", NOW, age=60).to_json().encode(), NOW, keep=True)
    assert stale.state == "stale" and "60 s old" in stale.error and stale.snapshot is not None


def test_a_cycle_respects_its_deadline_and_fetches_full_only_for_the_focus() -> None:
    fleet = RecordedFleet()
    try:
        urls = [fleet.agent("gpu-node-1"), fleet.agent("gpu-node-2"), fleet.slow(delay=3.0)]
        source = DirectSource([Endpoint(u) for u in urls], [], timeout=5.0)

        async def run():
            first = await source.cycle(None, deadline=1.0)
            second = await source.cycle("gpu-node-2", deadline=1.0)
            source.close()
            return first, second

        started = time.monotonic()
        first, second = asyncio.run(run())
        assert time.monotonic() - started < 5.0  # two 1 s deadlines, not the 3 s answers
        assert [n.state for n in first.nodes] == ["ok", "ok", "slow"]
        assert "refresh deadline" in first.nodes[2].error
        assert all("view=summary" in p for p in fleet.requests("gpu-node-1"))
        assert fleet.requests("gpu-node-2")[-1] == "/snapshot"
        assert second.node("gpu-node-2").snapshot.processes and second.node("gpu-node-1").snapshot is None
    finally:
        fleet.close()


def test_trainer_endpoints_become_ranks_and_failures_are_reported() -> None:
    fleet = RecordedFleet()
    try:
        rank0 = fleet.trainer("rank0", trainer_exposition(0, "gpu-node-1", GPU0, 0.5, 0.02))
        junk = fleet.agent("gpu-node-1") + "/snapshot"  # JSON where Prometheus text belongs
        source = DirectSource([], [Endpoint(rank0), Endpoint(junk), Endpoint(fleet.unreachable())], timeout=1.0)
        snapshot = asyncio.run(source.cycle(None, 2.0))
        source.close()
        (run,) = snapshot.runs
        assert run.run_id == "llama-ft-7" and [r.rank for r in run.ranks] == [0]
        assert run.ranks[0].gpu_uuid == GPU0 and run.ranks[0].node == "gpu-node-1"
        assert any("malformed" in e for e in snapshot.errors) and any(
            "connection refused" in e for e in snapshot.errors
        )
    finally:
        fleet.close()


# -- figures and aggregates ------------------------------------------------------------------------


def test_figures_skip_what_cannot_be_read_and_never_make_it_zero() -> None:
    two = node_figures(recorded("gpu-node-2", NOW), NOW)
    assert (two.gpus, two.gpus_lost, two.mig) == (4, 1, True)
    assert two.gpu_util_mean == pytest.approx(0.75) and two.gpu_util_max == pytest.approx(0.75)  # GPUs 0 and 1
    assert two.gpu_util_ratios[2] is None and two.gpu_util_ratios[3] is None  # MIG, LOST
    cpu = node_figures(recorded("cpu-node-3", NOW), NOW)
    assert cpu.gpus == 0 and cpu.gpu_util_mean is None and cpu.power_watts is None and cpu.hottest_celsius is None
    assert cpu.memory_ratio is not None and 0 < cpu.memory_ratio < 1


def test_xids_of_the_last_hour_and_their_worst_severity() -> None:
    snap = recorded("gpu-node-1", NOW, xid_age=10)
    figures = node_figures(snap, NOW)
    assert figures.xids_recent == 12 and figures.xid_severity == "node_reboot"
    old = replace(snap, xid_events=tuple(replace(x, time_unix=NOW - 7200) for x in snap.xid_events))
    assert node_figures(old, NOW).xids_recent == 0 and node_figures(old, NOW).xid_severity is None
    assert worst_severity(["informational", "application"]) == "application" and worst_severity([]) is None


def test_run_aggregates_and_eta() -> None:
    def rank(n: int, seconds: float | None, step: float = 100, **kw) -> RankStatus:
        return RankStatus(
            rank=n, run_id="r", node=f"node-{n}", window_step_seconds=seconds, step=step, planned_steps=200, **kw
        )

    run = RunStatus(
        "r",
        (
            rank(0, 1.0, global_tokens_per_second=5000.0, mfu_ratio=0.4),
            rank(1, 1.0),
            rank(2, 1.3, step=98, mfu_ratio=0.2),
            rank(3, 1.0),
        ),
        seconds_per_step=1.25,
    )
    assert run.step == 98 and run.step_seconds == 1.3 and run.eta_seconds == pytest.approx(102 * 1.25)
    assert replace(run, seconds_per_step=None).eta_seconds is None  # never the window's step time
    assert run.global_tokens_per_second == 5000.0 and run.mfu_ratio == pytest.approx(0.3)
    assert RunStatus("r", (rank(0, None), rank(1, None))).eta_seconds is None


def test_loss_history_adds_a_point_only_when_the_step_moves() -> None:
    history = LossHistory(points=3)
    for step, loss in ((10, 5.0), (10, 5.0), (20, 4.0), (30, 3.0), (40, 2.0), (None, 1.0)):
        points = history.add("r", step, loss)
    assert points == ((20, 4.0), (30, 3.0), (40, 2.0))


def test_trainer_exposition_parses_to_one_rank_with_its_labels() -> None:
    text = trainer_exposition(1, "gpu-node-1", GPU1, 0.6, 0.09)().decode()
    (r,) = ranks_from_samples(parse_exposition(text), "u", NOW)
    assert (r.rank, r.local_rank, r.node, r.gpu_uuid, r.run_id) == (1, 1, "gpu-node-1", GPU1, "llama-ft-7")
    assert (r.step, r.planned_steps, r.world_size, r.model) == (120, 200, 2, "llama2-7b")
    assert r.window_step_seconds == pytest.approx(0.6) and r.data_wait_ratio == pytest.approx(0.15)
    assert r.global_tokens_per_second is None  # exported by rank 0 only
    with pytest.raises(ValueError):
        parse_exposition('fsdp_train_step{rank="0" 12\n')


def test_node_status_keeps_the_snapshot_only_in_focus() -> None:
    snap = recorded("gpu-node-1", NOW)
    assert node_status("x", "u", snap, NOW, keep=False).snapshot is None
    kept = node_status("x", "u", snap, NOW, keep=True)
    assert kept.snapshot is snap and kept.xid_events == snap.xid_events and kept.figures.gpu_uuids[GPU1] == 1


def test_xid_event_order_across_nodes() -> None:
    from observe.sources.view import ClusterSnapshot

    def node(name: str, *times: float) -> NodeStatus:
        return NodeStatus(
            name=name,
            source=name,
            xid_events=tuple(
                XidEvent(xid=13, name="x", severity="application", action="a", node=name, time_unix=t) for t in times
            ),
        )

    snap = ClusterSnapshot(time_unix=NOW, nodes=(node("a", 1.0, 5.0), node("b", 3.0)))
    assert [(x.node, x.time_unix) for x in snap.xid_events()] == [("a", 5.0), ("b", 3.0), ("a", 1.0)]
    assert json.dumps([x.xid for x in snap.xid_events()]) == "[13, 13, 13]"


def test_the_eta_leaves_the_warm_up_out() -> None:
    """The step-1 window holds the warm-up alone (2.2 s against 0.8 s later); an ETA read off it
    said 7m04s for a run that ended 2m20s later. The pace comes from the steps seen since."""
    from observe.sources.direct import StepRate, build_runs

    def seen(step: int, ended: float) -> RankStatus:  # the step-1 window still shows step 1's 2.2 s
        return RankStatus(
            rank=0,
            run_id="r",
            step=step,
            planned_steps=200,
            window_step_seconds=2.2,
            last_step_unix=ended,
            phase="training",
        )

    history, rates = LossHistory(), StepRate()
    (first,) = build_runs([seen(1, 1000.0)], history, rates)
    assert first.eta_seconds is None  # one step seen: no pace yet, rather than 199 x 2.2 s
    (later,) = build_runs([seen(7, 1004.8)], history, rates)  # six steps of 0.8 s
    assert later.seconds_per_step == pytest.approx(0.8) and later.eta_seconds == pytest.approx(193 * 0.8)
    (again,) = build_runs([seen(7, 1004.8)], history, rates)  # a refresh without progress keeps the pace
    assert again.eta_seconds == pytest.approx(193 * 0.8)
    (restarted,) = build_runs([seen(5, 1100.0)], history, rates)  # resumed from an older checkpoint: start over
    assert restarted.eta_seconds is None


def test_the_pace_follows_the_last_two_minutes() -> None:
    from observe.sources.direct import StepRate

    rates = StepRate(seconds=120.0)
    for step in range(0, 101):  # 1 s per step for 100 s
        rates.add("r", float(step), 1000.0 + step)
    for step in range(101, 201):  # then 3 s per step for 300 s
        pace = rates.add("r", float(step), 1100.0 + 3 * (step - 100))
    assert pace == pytest.approx(3.0)


def test_prometheus_gpu_flags_become_lost_stale_and_unreadable() -> None:
    """The agent's flag series, as an instant query returns them, mark the GPUs as /snapshot does."""
    from observe import catalog as c
    from observe.sources.prometheus import UNREADABLE_IN_PROMETHEUS, build_nodes

    def sample(name: str, gpu: int, value: float) -> dict:
        labels = {"__name__": name, "node": "n", "gpu": str(gpu), "gpu_uuid": f"GPU-{gpu}"}
        return {"metric": labels, "value": [1.0, str(value)]}

    flags = (c.GPU_LOST.name, c.GPU_READING_STALE.name, c.GPU_UNREADABLE.name)
    series = [sample(name, gpu, int(gpu == i + 1)) for gpu in range(4) for i, name in enumerate(flags)]
    gpus = build_nodes([], series, [], 2.0)["n"].gpus
    assert [(g.lost, g.stale, g.unreadable) for g in gpus] == [
        (False, False, None),
        (True, False, None),
        (False, True, None),
        (False, False, UNREADABLE_IN_PROMETHEUS),
    ]
