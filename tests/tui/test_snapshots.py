"""SVG snapshots of every screen at a fixed terminal size, from the recorded fleet at a pinned clock.

The snapshot is built from the recorded agent answers (tests/tui/recorded) and the trainer's real
exporter, as the direct source builds it, but without the network and at a fixed time so the
pictures do not move; the app does not poll. Update after an intended change with
``pytest tests/tui/test_snapshots.py --snapshot-update`` and look at the SVGs.
"""

from __future__ import annotations

import time

import pytest

from observe.sources.direct import LossHistory, build_runs
from observe.sources.trainer import parse_exposition, ranks_from_samples
from observe.sources.view import ClusterSnapshot, NodeStatus, node_status
from observe.tui import fmt
from observe.tui.app import make_app
from tests.support.fleet import NODES, recorded, trainer_exposition
from tests.support.tui import GPU0, GPU1

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC


class Offline:
    """A source that is never polled (the test shows its snapshot by hand)."""

    description = "3 agents, 2 trainer endpoints"

    async def cycle(self, focus, deadline):
        raise AssertionError("not polled")

    def close(self) -> None:
        pass


def fixed_snapshot(focus: str | None = None) -> ClusterSnapshot:
    nodes = [node_status(n, f"http://10.0.0.{i + 1}:9401", recorded(n, NOW, age=0.4), NOW, keep=n == focus)
             for i, n in enumerate(NODES)]
    nodes.append(NodeStatus(name="10.0.0.9:9401", source="http://10.0.0.9:9401", state="unreachable",
                            error="connection refused", checked_unix=NOW))
    nodes.append(NodeStatus(name="10.0.0.8:9401", source="http://10.0.0.8:9401", state="malformed",
                            error="not a snapshot: snapshot schema_version 2 is not 1; upgrade fsdp-observe on the "
                                  "reading side", checked_unix=NOW))
    ranks = []
    for rank, (uuid, seconds, wait) in enumerate(((GPU0, 0.50, 0.02), (GPU1, 0.60, 0.09))):
        text = trainer_exposition(rank, "gpu-node-1", uuid, seconds, wait)().decode()
        ranks += ranks_from_samples(parse_exposition(text), f"http://10.0.0.1:{9500 + rank}/metrics", NOW)
    history = LossHistory()
    for step, loss in ((20, 7.1), (40, 5.2), (60, 4.1), (80, 3.4), (100, 3.1)):
        history.add("llama-ft-7", step, loss)
    return ClusterSnapshot(time_unix=NOW - 0.3, source=Offline.description, nodes=tuple(nodes),
                           runs=build_runs(ranks, history), focus=focus, cycle_seconds=0.042)


@pytest.fixture
def pinned(monkeypatch: pytest.MonkeyPatch):
    """Pin the clock the screens show, in UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setattr(fmt, "now", lambda: NOW)
    yield
    monkeypatch.undo()
    time.tzset()


def app_showing(focus: str | None = None):
    app = make_app(Offline(), interval=2.0, poll=False)

    async def show(pilot) -> None:
        app.show_snapshot(fixed_snapshot(focus))
        await pilot.pause()

    return app, show


def test_cluster_screen(snap_compare, pinned) -> None:
    app, show = app_showing()
    assert snap_compare(app, terminal_size=(160, 16), run_before=show)


def test_node_screen_with_lost_and_mig_gpus(snap_compare, pinned) -> None:
    from observe.tui.screens.node import NodeScreen

    app = make_app(Offline(), interval=2.0, poll=False)

    async def open_node(pilot) -> None:
        app.show_snapshot(fixed_snapshot("gpu-node-2"))
        await app.push_screen(NodeScreen("gpu-node-2"))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(160, 40), run_before=open_node)


def test_run_screen(snap_compare, pinned) -> None:
    app, show = app_showing()
    assert snap_compare(app, terminal_size=(130, 20), press=["2"], run_before=show)


def test_alerts_screen(snap_compare, pinned) -> None:
    app, show = app_showing()
    assert snap_compare(app, terminal_size=(160, 24), press=["3"], run_before=show)
