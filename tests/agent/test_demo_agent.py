"""The demo's node agent: started as a real process, and its part of the summary table."""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.demo import agent_rows, agent_snapshot, start_agent
from observe.errors import PortInUseError
from observe.model import AgentHealth, CpuStats, GpuInfo, HostStats, MemoryStats, NodeSnapshot, XidCount


@pytest.mark.e2e  # starts the real agent process
def test_start_agent_returns_a_serving_agent(tmp_path: Path) -> None:
    proc, url = start_agent(0, tmp_path / "agent.log")
    try:
        snapshot = agent_snapshot(url)
        assert snapshot is not None and snapshot.host.processes > 0
        labels = [label for label, _ in agent_rows(snapshot, url)]
        assert labels[:2] == ["node agent", "agent: CPU"] and "agent: XID errors" in labels
    finally:
        proc.terminate()
        proc.wait()


@pytest.mark.e2e  # starts the real agent process
def test_start_agent_reports_the_agents_own_error(tmp_path: Path, taken_port: int) -> None:
    with pytest.raises(RuntimeError, match=rf"^error: --port: port {taken_port} on 127.0.0.1 is already in use"):
        start_agent(taken_port, tmp_path / "agent.log")


def snapshot(**kw) -> NodeSnapshot:
    host = HostStats(
        cpu_count=2,
        cpu=CpuStats(0.25),
        memory=MemoryStats(total_bytes=8 << 30, used_bytes=2 << 30),
        load1=0.5,
        processes=80,
    )
    return NodeSnapshot(
        node="n", time_unix=1, host=host, agent=AgentHealth(collections=3, sources={"kernel_log": "ok"}), **kw
    )


def test_summary_rows_without_gpus() -> None:
    rows = dict(agent_rows(snapshot(), "http://127.0.0.1:9401"))
    assert rows == {
        "node agent": "http://127.0.0.1:9401/metrics, 3 collections",
        "agent: CPU": "25% busy of 2 CPUs, load 0.50, 80 processes",
        "agent: memory": "2.0 of 8.0 GiB used",
        "agent: GPUs": "no GPUs",
        "agent: XID errors": "0",
    }


def test_summary_rows_with_gpus_and_xids() -> None:
    gpus = (GpuInfo(index=0, name="H100"), GpuInfo(index=1, name="H100", lost=True))
    xids = (XidCount(xid=79, severity="node_reboot", count=1), XidCount(xid=13, severity="application", count=2))
    rows = dict(agent_rows(snapshot(gpus=gpus, xid_counts=xids), "u"))
    assert rows["agent: GPUs"] == "2 x H100, 1 lost" and rows["agent: XID errors"] == "3"


def test_summary_when_the_agent_cannot_be_read() -> None:
    assert agent_rows(None, "u") == [("node agent", "u (no snapshot could be read)")]


@pytest.mark.e2e  # starts the real agent process
def test_the_default_port_falls_back_to_a_free_one(tmp_path: Path, monkeypatch, taken_port: int) -> None:
    import observe.demo as demo

    monkeypatch.setattr(demo, "AGENT_PORT", taken_port)
    proc, url = demo.start_local_agent(None, tmp_path / "agent.log")
    try:
        assert not url.endswith(f":{taken_port}") and agent_snapshot(url) is not None
    finally:
        proc.terminate()
        proc.wait()
    with pytest.raises(PortInUseError, match="^--agent-port: port .* already in use"):  # the user's port stays
        demo.start_local_agent(taken_port, tmp_path / "agent.log")
