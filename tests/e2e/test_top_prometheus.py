"""``fsdp-observe top --prometheus``: a real Prometheus scraping two real agents and two trainer ranks.

The agents are ``python -m observe.cli agent`` processes (GPUs from the fake NVML stand-in: one node
healthy, one with a lost GPU; XIDs from the field case's kernel log); the ranks serve the
trainer's own exporter text, with its hang and straggler series. Prometheus (Debian's
``prometheus``) scrapes them every 250 ms; the source must turn its answers into the same
ClusterSnapshot the direct source builds, each run with its verdict.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from observe import prometheus_local
from observe.sources.prometheus import PrometheusSource
from tests.support.cases import CASES
from tests.support.fake_nvml import FakeNvml
from tests.support.fleet import RecordedFleet, trainer_exposition
from tests.support.processes import AgentProcess, wait_for
from tests.support.tui import GPU0, GPU1


@pytest.fixture
def scraped(native, tmp_path: Path, port_block, subprocess_env):
    if prometheus_local.binary() is None:
        pytest.skip("the prometheus binary is missing: apt-get install prometheus (CI installs it)")
    agents, fleet, prom = [], RecordedFleet(), None
    try:
        for node, scenario, log in (
            ("prom-node-a", "gpus 2\nbus@0 0x3b\n", str(CASES / "xid" / "kernel-log.txt")),
            ("prom-node-b", "gpus 2\nlost@1 1\n", str(tmp_path / "empty.log")),
        ):
            (tmp_path / "empty.log").touch()
            fake = FakeNvml(native.fake_nvml, tmp_path / f"{node}.conf")
            fake.set(scenario)
            # node a puts command lines into Prometheus (off by default: --command-label asks)
            label = ["--command-label"] if node == "prom-node-a" else []
            agents.append(
                AgentProcess(
                    ["--node", node, "--interval", "0.25", "--kernel-log", log, *label],
                    fake.env(subprocess_env),
                    tmp_path,
                )
            )
        ranks = [
            fleet.trainer("rank0", trainer_exposition(0, "prom-node-a", GPU0, 0.6, 0.02, compute=0.30)),
            fleet.trainer("rank1", trainer_exposition(1, "prom-node-a", GPU1, 0.6, 0.09, compute=0.48)),
        ]
        targets = [a.base.split("://")[1] for a in agents] + [r.split("://")[1].split("/")[0] for r in ranks]
        prom = prometheus_local.start(
            tmp_path / "prometheus",
            prometheus_local.config({"fsdp": targets}, [], scrape_interval="250ms"),
            port_block(1),
        )
        url = prom.url

        def scraped_all() -> bool:
            try:
                result = httpx.get(f"{url}/api/v1/query", params={"query": "up"}, timeout=1).json()["data"]["result"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            return len(result) == 4 and all(r["value"][1] == "1" for r in result)

        wait_for(scraped_all, timeout=30, interval=0.25, what="Prometheus to scrape all four targets")
        yield url
    finally:
        if prom is not None:
            prom.stop()
        for agent in agents:
            agent.stop()
        fleet.close()


def test_the_cluster_as_prometheus_sees_it(scraped: str) -> None:
    source = PrometheusSource(scraped)

    async def run():
        return await source.cycle(None, 10.0), await source.cycle("prom-node-a", 10.0)

    summary, focused = asyncio.run(run())
    source.close()
    assert [n.name for n in summary.nodes] == ["prom-node-a", "prom-node-b"]
    a, b = summary.nodes
    assert a.state == b.state == "ok" and a.source == "prometheus"
    assert (a.figures.gpus, a.figures.gpus_lost, b.figures.gpus, b.figures.gpus_lost) == (2, 0, 2, 1)
    assert a.figures.gpu_util_mean == pytest.approx(0.75) and a.figures.cpu_ratio is not None
    assert a.figures.memory_ratio is not None and b.figures.power_watts == pytest.approx(350)  # one readable GPU
    codes = sorted(x.xid for x in a.xid_events)
    assert 79 in codes and 13 in codes and all("last hour" in x.message for x in a.xid_events)
    xid13 = next(x for x in a.xid_events if x.xid == 13)
    assert xid13.gpu == 0 and xid13.name.startswith("Graphics engine exception")
    (run,) = summary.runs
    assert [r.rank for r in run.ranks] == [0, 1] and run.ranks[1].window_compute_seconds == pytest.approx(0.48)
    # the straggler by compute (both ranks take 600 ms per step), its GPU's index from the agent's series
    assert run.verdict is not None and run.verdict.verdict == "straggler" and run.verdict.culprit_ranks == [1]
    assert (run.verdict.culprits[0].node, run.verdict.culprits[0].gpu_index) == ("prom-node-a", 1)
    assert summary.gpu_index("prom-node-a", GPU1) == 1
    full = focused.node("prom-node-a").snapshot
    assert full is not None and full.view == "full" and full.processes  # from fsdp_node_process_info
    assert any("observe.cli agent" in (p.command or "") for p in full.processes)
    assert len(full.host.cpu.core_busy_ratios) == full.host.cpu_count and focused.node("prom-node-b").snapshot is None


def test_an_unreachable_prometheus_is_reported_not_raised(port_block) -> None:
    source = PrometheusSource(f"http://127.0.0.1:{port_block(1)}", timeout=1.0)
    snapshot = asyncio.run(source.cycle(None, 5.0))
    source.close()
    assert snapshot.nodes == () and "cannot reach" in snapshot.errors[0]
