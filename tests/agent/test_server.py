"""The agent in this process on a free port, over real HTTP: endpoints, and no collection on requests."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from observe.agent.run import Agent
from observe.agent.sampler import Settings
from observe.model import NodeSnapshot


@pytest.fixture
def agent(fake_nvml, tmp_path: Path) -> Iterator[Agent]:
    """An agent collecting once an hour (so only the start-up collection happens), GPUs from the stand-in."""
    agent = Agent(Settings(node="srv", kmsg=str(tmp_path / "none"), interval_seconds=3600), "127.0.0.1", 0)
    agent.start()
    yield agent
    agent.stop()


def url(agent: Agent, path: str) -> str:
    return f"http://127.0.0.1:{agent.port}{path}"


def test_endpoints(agent: Agent) -> None:
    with httpx.Client() as client:
        metrics = client.get(url(agent, "/metrics"))
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
        names = {f.name for f in text_string_to_metric_families(metrics.text)}
        assert {"fsdp_node_memory_total_bytes", "fsdp_gpu_temperature_celsius", "fsdp_gpu_lost"} <= names
        assert "fsdp_node_cpu_busy_ratio" not in names  # first snapshot: no interval yet, so absent
        snap = NodeSnapshot.from_json(client.get(url(agent, "/snapshot")).content)
        assert snap.node == "srv" and len(snap.gpus) == 4
        assert client.get(url(agent, "/healthz")).text == "ok\n"
        assert client.get(url(agent, "/nope")).status_code == 404


def test_gzip_when_the_scraper_accepts_it(agent: Agent) -> None:
    plain = httpx.get(url(agent, "/metrics"), headers={"Accept-Encoding": "identity"})
    raw = httpx.Client().send(
        httpx.Request("GET", url(agent, "/metrics"), headers={"Accept-Encoding": "gzip"}), stream=True
    )
    body = raw.read()  # httpx decodes gzip; the header says it was compressed
    assert raw.headers["content-encoding"] == "gzip" and body == plain.content
    assert gzip.decompress(agent.latest.current.metrics_gzip()) == plain.content


def test_requests_never_collect(agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    for target, name in (
        (agent.sampler.table, "refresh"),
        (agent.sampler.gpus, "collect"),
        (agent.sampler.host, "cpu"),
        (agent.sampler, "sample"),
    ):
        original = getattr(target, name)
        monkeypatch.setattr(target, name, lambda *a, _o=original, _n=name, **k: calls.append(_n) or _o(*a, **k))
    with httpx.Client() as client:
        for _ in range(20):
            for path in ("/metrics", "/snapshot", "/snapshot?view=summary", "/healthz"):
                assert client.get(url(agent, path)).status_code == 200
    assert calls == []
    assert agent.latest.current.snapshot.agent.collections == 1


def test_collect_once_publishes_a_new_snapshot(agent: Agent) -> None:
    before = agent.latest.current
    agent.collect_once()
    after = agent.latest.current
    assert after is not before and after.snapshot.agent.collections == 2
    assert httpx.get(url(agent, "/snapshot")).json()["agent"]["collections"] == 2


def test_the_summary_view_leaves_out_the_process_lists(agent: Agent) -> None:
    with httpx.Client() as client:
        full = client.get(url(agent, "/snapshot"))
        summary = client.get(url(agent, "/snapshot?view=summary"))
        assert client.get(url(agent, "/snapshot?view=full")).content == full.content
        bad = client.get(url(agent, "/snapshot?view=tiny"))
    assert summary.status_code == 200 and summary.headers["content-type"].startswith("application/json")
    whole, part = NodeSnapshot.from_json(full.content), NodeSnapshot.from_json(summary.content)
    assert whole.processes and whole.view == "full"
    assert part.view == "summary" and part.processes == () and part.gpu_processes == ()
    assert part.host.cpu.core_busy_ratios == ()
    assert part.gpus == whole.gpus and part.host.memory == whole.host.memory and part.agent == whole.agent
    assert len(summary.content) < len(full.content) / 2
    assert bad.status_code == 400 and "view=summary" in bad.text


def test_the_summary_is_rendered_once_per_snapshot(agent: Agent) -> None:
    first = httpx.get(url(agent, "/snapshot?view=summary")).content
    assert agent.latest.current.summary_json() is agent.latest.current.summary_json()
    agent.collect_once()
    assert httpx.get(url(agent, "/snapshot?view=summary")).content != first
