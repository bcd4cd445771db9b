"""The agent as a user runs it: a real ``python -m observe.cli agent`` process, scraped over real HTTP.

GPUs come from the fake ``libnvidia-ml.so.1`` built by the test suite (a stand-in for a GPU
driver, put on the agent's library path); processes, /proc and the HTTP server are real.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cases import CASES, EXPOSITION_CASES, redaction_extra_rows, redaction_rows
from tests.support.fake_nvml import FakeNvml
from tests.support.processes import REPO, AgentProcess, wait_for

SECRETS = (
    "hf_QmW3rT7yU1iO5pA9sD2fG6hJ0kL4zX8c",
    "Sup3rS3cret",
    "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    "opensesame",
    "hunter2",
    "plainvalue",
    "plaintokenvalue",
    "9fQz3LkP7xWm2RtY8vBn4HsJ6cDe",
    "MIIEpAIBAAKCAQEA",
    "abcdefghijklmnopqrstuvwx",
    "0123456789abcdef0123456789abcdef01234567",
    "changeit",
    "p@ss",
)


@pytest.fixture
def scenario(native, tmp_path: Path) -> FakeNvml:
    return FakeNvml(native.fake_nvml, tmp_path / "scenario.conf")


@pytest.fixture
def run_agent(tmp_path: Path) -> Iterator:
    started: list[AgentProcess] = []

    def run(*args: str, env: dict[str, str] | None = None) -> AgentProcess:
        agent = AgentProcess(list(args), env, tmp_path)
        started.append(agent)
        return agent

    yield run
    for agent in started:
        agent.stop()


def samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def sample(text: str, name: str, **labels: str) -> float | None:
    hits = [s.value for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]
    assert len(hits) <= 1
    return hits[0] if hits else None


def collections(agent: AgentProcess) -> int:
    return agent.snapshot()["agent"]["collections"]


def test_gpus_and_kernel_log_xids_end_to_end(run_agent, scenario: FakeNvml) -> None:
    scenario.set("bus@0 0x3b")  # GPU 0 sits at the PCI address of the case file's XIDs
    agent = run_agent(
        "--interval",
        "0.2",
        "--node",
        "gpu-node-1",
        "--kernel-log",
        str(CASES / "xid" / "kernel-log.txt"),
        env=scenario.env(),
    )

    def with_all_xids() -> str | None:
        text = agent.metrics()
        return text if sample(text, "fsdp_gpu_xid_errors_total", xid="63") else None

    text = wait_for(with_all_xids, what="the XIDs of the case file in /metrics")
    uuid0 = "GPU-fa4e0000-0000-4000-8000-000000000000"
    assert (
        sample(
            text,
            "fsdp_gpu_xid_errors_total",
            xid="13",
            gpu="0",
            gpu_uuid=uuid0,
            pci_bus="0000:3b:00",
            severity="application",
            node="gpu-node-1",
        )
        == 1  # the warp exception and its ESR line: one out-of-range access, one count
    )
    assert sample(text, "fsdp_gpu_xid_errors_total", xid="79", pci_bus="0000:86:00") == 1
    assert sample(text, "fsdp_gpu_xid_errors_total", xid="99999", severity="unknown") == 1
    assert sample(text, "fsdp_node_agent_errors_total", kind="xid_parse") == 1
    gpu_samples = [s for s in samples(text) if s.name.startswith("fsdp_gpu_") and s.name != "fsdp_gpu_xid_errors_total"]
    assert gpu_samples and all({"node", "gpu", "gpu_uuid"} <= s.labels.keys() for s in gpu_samples)
    assert not [s for s in samples(text) if "job" in s.labels]

    snap = agent.snapshot()
    assert len(snap["gpus"]) == 4 and snap["agent"]["sources"]["kernel_log"] == "ok"
    by_xid = {e["xid"]: e for e in snap["xid_events"]}
    assert (by_xid[63]["gpu"], by_xid[63]["gpu_uuid"], by_xid[63]["severity"]) == (0, uuid0, "gpu_reset")
    assert by_xid[154]["recovery_action"] == "Drain and Reset" and "Reset" in by_xid[154]["action"]
    assert agent.get("/healthz").text == "ok\n"
    assert agent.stop() == 0


def test_3_a_gpu_lost_from_the_second_collection(run_agent, scenario: FakeNvml) -> None:
    agent = run_agent("--interval", "0.2", env=scenario.env())
    wait_for(lambda: collections(agent) >= 2, what="two collections")
    scenario.set("lost@3 1")
    wait_for(lambda: sample(agent.metrics(), "fsdp_gpu_lost", gpu="3") == 1, what="GPU 3 lost")
    seen = collections(agent)
    wait_for(lambda: collections(agent) >= seen + 10, what="ten more collections")
    text = agent.metrics()
    assert [sample(text, "fsdp_gpu_temperature_celsius", gpu=str(i)) for i in range(4)] == [45, 45, 45, None]
    assert sample(text, "fsdp_gpu_lost", gpu="0") == 0
    assert [g["lost"] for g in agent.snapshot()["gpus"]] == [False, False, False, True]
    assert agent.get("/healthz").status_code == 200
    assert agent.stderr.count("is lost") == 1


def test_9_a_cpu_only_node_serves_host_data_only(run_agent, scenario: FakeNvml) -> None:
    scenario.set("init library_not_found")
    agent = run_agent("--interval", "0.2", env=scenario.env())
    wait_for(lambda: collections(agent) >= 5, what="five collections")
    text = agent.metrics()
    assert not [s for s in samples(text) if s.name.startswith("fsdp_gpu_")]
    assert sample(text, "fsdp_node_memory_total_bytes") > 0
    snap = agent.snapshot()
    assert snap["gpus"] == [] and any("no GPUs" in n for n in snap["agent"]["notices"])
    assert agent.stderr.count("no GPUs") == 1


def test_10_functions_missing_from_an_old_driver(run_agent, native, tmp_path: Path) -> None:
    old = FakeNvml(native.fake_nvml_old_driver, tmp_path / "old.conf")
    agent = run_agent("--interval", "0.2", env=old.env())
    wait_for(lambda: collections(agent) >= 5, what="five collections")
    text = agent.metrics()
    assert sample(text, "fsdp_gpu_encoder_utilization_ratio", gpu="0") is None
    assert sample(text, "fsdp_gpu_decoder_utilization_ratio", gpu="0") is None
    assert sample(text, "fsdp_gpu_temperature_celsius", gpu="0") == 45
    # clock event reasons fall back to the older throttle-reasons call
    assert sample(text, "fsdp_gpu_clock_throttle_reason", gpu="0", reason="sw_power_cap") == 1
    log = agent.stderr
    for function in (
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
        "nvmlDeviceGetCurrentClocksEventReasons",
    ):
        assert log.count(f"has no {function}") == 1, log


def test_command_lines_leave_the_node_redacted_and_intact(run_agent, sleepers, scenario: FakeNvml) -> None:
    """Every case as a real process, read by the agent process, in /snapshot and (asked for with
    --command-label) in /metrics labels; no secret in either body."""
    expected = {sleepers(command.split(" ")).pid: want for command, want in redaction_rows()}
    expected.update({sleepers(argv).pid: want for argv, want, _ in redaction_extra_rows()})
    expected.update({sleepers(argv).pid: want for argv, want in EXPOSITION_CASES.values()})
    agent = run_agent("--max-processes", "100000", "--process-series", "100000", "--command-label", env=scenario.env())
    metrics_text, snapshot_text = agent.metrics(), agent.get("/snapshot").text

    info = {
        int(s.labels["pid"]): s.labels["command"] for s in samples(metrics_text) if s.name == "fsdp_node_process_info"
    }
    snap = {p["pid"]: p["command"] for p in agent.snapshot()["processes"]}
    assert {pid: info.get(pid) for pid in expected} == expected
    assert {pid: snap.get(pid) for pid in expected} == expected
    for secret in SECRETS:
        assert secret not in metrics_text and secret not in snapshot_text


@pytest.mark.parametrize(
    "args, flag",
    [
        (["--port", "TAKEN"], "--port"),
        (["--interval", "-1"], "--interval"),
        (["--kernel-log", "/nonexistent/kern.log"], "--kernel-log"),
    ],
)
def test_bad_input_from_the_command_line(taken_port: int, args: list[str], flag: str) -> None:
    argv = [a.replace("TAKEN", str(taken_port)) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "observe.cli", "agent", "--address", "127.0.0.1", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(f"error: {flag}: ")


def test_without_the_flag_metrics_carry_no_command_lines(run_agent, sleepers, scenario: FakeNvml) -> None:
    pid = sleepers(["python", "train.py", "--lr", "1e-4"]).pid
    agent = run_agent("--max-processes", "100000", "--process-series", "100000", env=scenario.env())
    info = {int(s.labels["pid"]): s.labels for s in samples(agent.metrics()) if s.name == "fsdp_node_process_info"}
    assert info[pid]["name"] == "sleeper" and info[pid].get("command", "") == ""
    assert all(labels.get("command", "") == "" for labels in info.values())
    assert {p["pid"]: p["command"] for p in agent.snapshot()["processes"]}[pid] == "python train.py --lr 1e-4"
