"""``fsdp-observe top`` against the live demo: the demo's own node agent and a two-rank CPU run.

The components are the ones ``fsdp-observe demo`` starts (``start_local_agent``, torchrun with the
``tiny`` preset); the agent's GPUs come from the fake ``libnvidia-ml.so.1`` (the test suite's
stand-in for a driver, on the agent's library path). The app is driven with Pilot: the Run screen
must show both ranks moving, the Cluster screen the node with its GPUs, and the Node screen the
ranks' processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from observe.demo import start_local_agent
from observe.sources.direct import DirectSource, Endpoint
from observe.tui.app import make_app
from observe.tui.screens.cluster import ClusterScreen
from observe.tui.screens.node import NodeScreen
from observe.tui.screens.run import RunScreen
from observe.tui.widgets.lines import Lines
from observe.tui.widgets.table import VirtualTable
from tests.support.fake_nvml import FakeNvml
from tests.support.tui import lines_text, table_text, until
from trainer.runspec.config import MetricsConfig, TrainConfig
from trainer.runspec.launch import prepare, torchrun_command, torchrun_env

pytestmark = pytest.mark.anyio
NODE = "demo-node"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def live_demo(native, tmp_path: Path, port_block, subprocess_env, monkeypatch: pytest.MonkeyPatch):
    """The demo's agent (GPUs: the stand-in) and a two-rank run; yields (agent URL, rank URLs)."""
    fake = FakeNvml(native.fake_nvml, tmp_path / "nvml.conf")
    fake.set("gpus 2")
    for key, value in {**fake.env(subprocess_env), "NODE_NAME": NODE}.items():
        monkeypatch.setenv(key, value)
    base = port_block(2)
    cfg = prepare(
        TrainConfig(
            steps=2000, metrics=MetricsConfig(log_every=5, port_base=base, address="127.0.0.1", run_id="e2e-top")
        ),
        2,
    )  # before anything starts
    agent, agent_url = start_local_agent(0, tmp_path / "agent.log")
    log = open(tmp_path / "train.log", "wb")
    run = subprocess.Popen(
        torchrun_command(cfg, 2), env=torchrun_env(2), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        yield agent_url, [f"http://127.0.0.1:{base + r}/metrics" for r in range(2)]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
        run.wait(timeout=30)
        log.close()
        agent.terminate()
        agent.wait(timeout=15)


async def test_top_over_the_live_demo(live_demo) -> None:
    agent_url, rank_urls = live_demo
    app = make_app(DirectSource([Endpoint(agent_url)], [Endpoint(u) for u in rank_urls]), interval=1.0)

    def both_ranks_stepping() -> bool:
        runs = app.snapshot.runs
        return (
            bool(runs)
            and len(runs[0].ranks) == 2
            and all((r.step or 0) >= 10 and r.window_step_seconds for r in runs[0].ranks)
        )

    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, both_ranks_stepping, 300, "both ranks to report steps")  # 10 s steps under load
        await pilot.press("2")
        screen = await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen, 10, "the Run screen")
        await pilot.pause(1.2)
        text = lines_text(screen.query_one("#run", Lines))
        assert any("run e2e-top" in line and "world size 2" in line for line in text)
        ranks = [line for line in table_text(screen.query_one("#ranks", VirtualTable))[1:] if line.strip()]
        assert len(ranks) == 2 and all(NODE in line and "cpu" in line and " training" not in line for line in ranks)
        # what the training thread does (collective tracking is on by default); data wait as a share of the step
        assert all(any(f" {s} " in line for s in ("computing", "collective", "data")) and "%" in line for line in ranks)
        assert any(line.startswith(" Loss") and "log window" in line for line in text)

        await pilot.press("1")
        cluster = await until(pilot, lambda: isinstance(app.screen, ClusterScreen) and app.screen, 10, "Cluster")
        table = cluster.query_one(VirtualTable)
        row = await until(
            pilot, lambda: next((line for line in table_text(table) if line.startswith(NODE)), None), 10, "row"
        )
        assert " ok " in row and " 2 " in row and "75%" in row  # the stand-in's two GPUs at 75 %

        await pilot.press("enter")
        node = await until(pilot, lambda: isinstance(app.screen, NodeScreen) and app.screen, 10, "the Node screen")
        processes = node.query_one("#processes", VirtualTable)
        await until(pilot, lambda: processes.rows, 15, "the node's processes")
        commands = [p.command or "" for p in processes.rows]
        assert sum("fsdp-observe-trainer" in c for c in commands) >= 2  # the two ranks (and torchrun's agent)
