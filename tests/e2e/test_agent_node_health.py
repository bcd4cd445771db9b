"""A real agent process sets the node condition and taint through the recorded-API test server, once.

``python -m observe.cli agent --node-condition --node-taint --state-dir ... --kube-api ...`` on
the stand-in NVML follows a kernel-log file; the API server is ``tests/support/fake_apiserver.py``
(recorded Node bodies over real HTTP; no API server runs here). A GPU falls off the bus: one
condition write and one taint; the same XID again and an agent restart write nothing more (the
restart re-reads no old XID), and ``/snapshot`` shows what was written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from observe.agent.node_health import CONDITION_TYPE, TAINT_KEY
from tests.support.fake_apiserver import TOKEN, RecordedAPIServer, Reply
from tests.support.fake_nvml import FakeNvml
from tests.support.processes import AgentProcess, wait_for

NODE = "gpu-node-1"
STATUS, OBJECT = f"/api/v1/nodes/{NODE}/status", f"/api/v1/nodes/{NODE}"


def line(code: int, bus: str) -> str:
    return f"NVRM: Xid (PCI:0000:{bus}:00): {code}, pid='<unknown>', name=<unknown>, made up\n"


@pytest.fixture
def server() -> Iterator[RecordedAPIServer]:
    node = Reply.recorded("node-gpu-node-1.json")
    srv = RecordedAPIServer(
        {("GET", STATUS): node, ("PATCH", STATUS): node, ("GET", OBJECT): node, ("PATCH", OBJECT): node}
    )
    yield srv
    srv.close()


def test_an_xid_79_sets_the_condition_and_the_taint_once_across_a_restart(
    native, tmp_path: Path, server: RecordedAPIServer
) -> None:
    nvml = FakeNvml(native.fake_nvml, tmp_path / "scenario.conf")
    nvml.set("gpus 2")
    log = tmp_path / "kern.log"
    log.write_text("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06\n")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    flags = [
        "--interval",
        "0.2",
        "--node",
        NODE,
        "--kernel-log",
        str(log),
        "--state-dir",
        str(tmp_path / "state"),
        "--node-condition",
        "--node-taint",
        "--kube-api",
        server.url,
        "--kube-token-file",
        str(token),
    ]
    agent = AgentProcess(flags, nvml.env(), tmp_path)
    try:
        wait_for(lambda: len(agent.snapshot()["gpus"]) == 2, what="the GPUs")
        with log.open("a") as f:
            f.write(line(79, "20"))
        wait_for(lambda: len(server.calls("PATCH")) == 2, what="the condition and the taint")
        status, taint = (json.loads(c.body) for c in server.calls("PATCH"))
        (condition,) = status["status"]["conditions"]
        assert condition["type"] == CONDITION_TYPE and condition["reason"] == "NodeReboot"
        assert condition["message"].startswith(
            "Faults: XID 79 (GPU has fallen off the bus) on GPU 1 "
            "(GPU-fa4e0000-0000-4000-8000-000000000001, PCI 0000:20:00)."
        )
        assert taint[1]["value"][-1]["key"] == TAINT_KEY
        health = wait_for(lambda: (h := agent.snapshot()["node_health"]) and h["taint"] and h, what="node_health")
        assert (health["status"], health["reason"], health["error"]) == ("True", "NodeReboot", "")
        assert health["taint"] == f"{TAINT_KEY}=NodeReboot:NoSchedule"
        # What the API server holds now (the recorded server does not apply patches itself).
        node = json.loads(Reply.recorded("node-gpu-node-1.json").body)
        node["status"]["conditions"].append(condition)
        server.routes[("GET", STATUS)] = Reply(200, json.dumps(node).encode())
        server.routes[("GET", OBJECT)] = Reply.recorded("node-gpu-node-1-tainted.json")
        with log.open("a") as f:
            f.write(line(79, "20"))  # the same fault again
        wait_for(lambda: agent.snapshot()["xid_counts"][0]["count"] == 2, what="the second XID 79 counted")
        assert agent.stop() == 0
        assert len(server.calls("PATCH")) == 2  # the same fault again wrote nothing

        agent = AgentProcess(flags, nvml.env(), tmp_path)  # a restart: the old XIDs are not read again
        with log.open("a") as f:
            f.write(line(13, "10"))  # an application XID: nothing for the node
        wait_for(lambda: any(x["xid"] == 13 for x in agent.snapshot()["xid_counts"]), what="the XID 13")
        health = wait_for(lambda: (h := agent.snapshot()["node_health"]) and h["taint"] and h, what="what it read")
        assert (health["status"], health["reason"], health["message"]) == ("True", "NodeReboot", condition["message"])
        assert len(server.calls("PATCH")) == 2  # nothing written by the restarted agent
        assert "node_condition_failed" not in agent.snapshot()["agent"]["errors"]
    finally:
        agent.stop()


def test_node_health_without_a_state_dir_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "observe.cli", "agent", "--node-condition", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr == (
        "error: --node-condition: needs --state-dir (without it a restarted agent re-reads old XIDs and sets again "
        "what a person cleared after the repair); pass --state-dir DIR\n"
    )


def test_node_health_outside_a_pod_is_one_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "observe.cli",
            "agent",
            "--node-taint",
            "--port",
            "0",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2 and done.stderr.startswith(
        "error: --kube-api: not in a pod (no KUBERNETES_SERVICE_HOST) and no --kube-api; run the agent in a pod"
    )
