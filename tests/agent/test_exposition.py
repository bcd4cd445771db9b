"""Label-value safety, against tests/cases/exposition.md, and the exposition's rules.

Each value in the case file becomes the command line of a real process; the process table reads
it from the real /proc, and it must come out of /metrics (parsed back with
prometheus_client.parser) and out of the snapshot JSON with the same text.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from observe import catalog as c
from observe.agent.exposition import label_name, render
from observe.agent.procs import ProcessTable
from observe.model import AgentHealth, GpuInfo, NodeSnapshot, XidCount
from tests.support.cases import CASES, EXPOSITION_CASES

LABEL_NAME_CASE = (
    "a label *name* built from outside text (such as a field name `Source: Fan`): sanitise to `[a-zA-Z_][a-zA-Z0-9_]*`"
)


def test_every_value_in_the_case_file_is_covered() -> None:
    bullets = [line[2:] for line in (CASES / "exposition.md").read_text().splitlines() if line.startswith("- ")]
    assert sorted(bullets) == sorted([*EXPOSITION_CASES, LABEL_NAME_CASE])


def test_hostile_command_lines_survive_metrics_and_json(sleepers) -> None:
    pids = {sleepers(argv).pid: expected for argv, expected in EXPOSITION_CASES.values()}
    table = ProcessTable()
    table.refresh(time.monotonic())
    processes = tuple(table.info(pid, None) for pid in pids)
    table.close()
    snapshot = NodeSnapshot(node="n", time_unix=1.0, processes=processes)

    text = render(snapshot, process_series=len(processes), command_label=True).decode()
    info = {
        s.labels["pid"]: s.labels
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == c.NODE_PROCESS_INFO.name
    }
    assert {int(pid): labels["command"] for pid, labels in info.items()} == pids

    decoded = json.loads(snapshot.to_json())
    assert {p["pid"]: p["command"] for p in decoded["processes"]} == pids
    assert NodeSnapshot.from_json(snapshot.to_json()) == snapshot


@pytest.mark.parametrize(
    "text, name",
    [
        ("Source: Fan", "Source_Fan"),
        ("9lives", "_9lives"),
        ("", "_"),
        ("__reserved", "reserved"),
        ("gpu-uuid", "gpu_uuid"),
        ("ünï", "n"),
    ],
)
def test_label_names_from_outside_text_are_sanitised(text: str, name: str) -> None:
    assert label_name(text) == name
    assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name)


def parsed(snapshot: NodeSnapshot) -> list:
    return [s for f in text_string_to_metric_families(render(snapshot).decode()) for s in f.samples]


def test_unreadable_values_are_absent_never_zero() -> None:
    snapshot = NodeSnapshot(node="n", time_unix=1.0, gpus=(GpuInfo(index=0, uuid="GPU-1", temperature_celsius=40),))
    names = {s.name for s in parsed(snapshot) if s.name.startswith("fsdp_gpu_")}
    assert names == {
        "fsdp_gpu_info",
        "fsdp_gpu_lost",
        "fsdp_gpu_reading_stale",
        "fsdp_gpu_unreadable",
        "fsdp_gpu_temperature_celsius",
    }


def test_every_gpu_series_carries_node_gpu_and_uuid() -> None:
    gpu = GpuInfo(
        index=2,
        uuid="GPU-2",
        name="H100",
        pci_bus="0000:3b:00",
        utilization_ratio=0.5,
        ecc_corrected_total=1,
        throttle_reasons=("gpu_idle",),
        mig_enabled=False,
    )
    snapshot = NodeSnapshot(
        node="node-7",
        time_unix=1.0,
        gpus=(gpu,),
        xid_counts=(XidCount(xid=79, severity="node_reboot", count=2, pci_bus="0000:3b:00", gpu=2, gpu_uuid="GPU-2"),),
    )
    samples = [s for s in parsed(snapshot) if s.name.startswith("fsdp_gpu_")]
    assert samples and all(
        s.labels["node"] == "node-7" and s.labels["gpu"] == "2" and s.labels["gpu_uuid"] == "GPU-2" for s in samples
    )
    xid = [s for s in samples if s.name == "fsdp_gpu_xid_errors_total"]
    assert [(s.labels["xid"], s.labels["severity"], s.labels["pci_bus"], s.value) for s in xid] == [
        ("79", "node_reboot", "0000:3b:00", 2)
    ]
    # no time known for these XIDs: no timestamp series (absent, never 0)
    assert not [s for s in samples if s.name == "fsdp_gpu_xid_last_timestamp_seconds"]


def test_the_time_of_the_last_xid_is_exported_where_known() -> None:
    counts = (
        XidCount(
            xid=48, severity="gpu_reset", count=3, pci_bus="0000:3b:00", gpu=0, gpu_uuid="G0", last_time_unix=1.7e9
        ),
        XidCount(xid=13, severity="application", count=1, pci_bus="0000:3b:00", gpu=0, gpu_uuid="G0"),
    )
    samples = [s for s in parsed(NodeSnapshot(node="n", time_unix=1.0, xid_counts=counts))]
    last = [s for s in samples if s.name == "fsdp_gpu_xid_last_timestamp_seconds"]
    assert [
        (s.labels["xid"], s.labels["severity"], s.labels["pci_bus"], s.labels["gpu_uuid"], s.value) for s in last
    ] == [("48", "gpu_reset", "0000:3b:00", "G0", 1.7e9)]


def test_agent_health_is_exported() -> None:
    snapshot = NodeSnapshot(
        node="n",
        time_unix=5.0,
        agent=AgentHealth(
            collection_seconds=0.004,
            collections=3,
            cpu_seconds=1.5,
            sources={"procfs": "ok", "nvml": "no driver", "kernel_log": "ok"},
            errors={"xid_parse": 1},
            dropped={"temperature": 2},
        ),
    )
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parsed(snapshot)}
    assert got[("fsdp_node_agent_errors_total", (("kind", "xid_parse"), ("node", "n")))] == 1
    assert got[("fsdp_node_agent_dropped_readings_total", (("kind", "temperature"), ("node", "n")))] == 2
    assert got[("fsdp_node_agent_source_up", (("node", "n"), ("source", "nvml")))] == 0
    assert got[("fsdp_node_agent_collections_total", (("node", "n"),))] == 3
    assert got[("fsdp_node_agent_cpu_seconds_total", (("node", "n"),))] == 1.5
    assert got[("fsdp_node_agent_last_collection_timestamp_seconds", (("node", "n"),))] == 5.0
    assert ("fsdp_node_agent_resident_memory_bytes", (("node", "n"),)) not in got  # unknown: absent


def test_only_the_requested_number_of_processes_get_series() -> None:
    from observe.model import GpuProcess, ProcessInfo

    procs = tuple(
        ProcessInfo(pid=p, ppid=1, name="w", state="sleeping", cpu_seconds=1.0, rss_bytes=1) for p in range(10, 20)
    )
    snapshot = NodeSnapshot(
        node="n", time_unix=1.0, processes=procs, gpu_processes=(GpuProcess(gpu=0, gpu_uuid="GPU-0", pid=19),)
    )
    text = render(snapshot, process_series=3).decode()
    pids = {
        s.labels["pid"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == c.NODE_PROCESS_INFO.name
    }
    assert pids == {"10", "11", "12", "19"}  # the 3 busiest, plus the GPU process


def test_command_lines_are_not_label_values_unless_asked(sleepers) -> None:
    """By default /metrics names the process but leaves the command label empty (absent to
    Prometheus); ``command_label=True`` (``fsdp-observe agent --command-label``) puts the redacted
    command line there."""
    pid = sleepers(["python", "train.py", "--hf_token", "opensesame", "--lr", "1e-4"]).pid
    table = ProcessTable()
    table.refresh(time.monotonic())
    snapshot = NodeSnapshot(node="n", time_unix=1.0, processes=(table.info(pid, None),))
    table.close()

    def command(**kw) -> str | None:
        text = render(snapshot, process_series=1, **kw).decode()
        (sample,) = [
            s for f in text_string_to_metric_families(text) for s in f.samples if s.name == c.NODE_PROCESS_INFO.name
        ]
        assert sample.labels["pid"] == str(pid) and sample.labels["name"] == "sleeper"
        return sample.labels.get("command")

    assert command() == ""
    assert 'command="' not in render(snapshot, process_series=1).decode().replace('command=""', "")
    assert command(command_label=True) == "python train.py --hf_token <redacted> --lr 1e-4"
    assert snapshot.processes[0].command == "python train.py --hf_token <redacted> --lr 1e-4"  # /snapshot keeps it


def test_the_agent_flag_turns_the_command_label_on() -> None:
    from observe.cli.agent import build_parser

    assert build_parser().parse_args([]).command_label is False
    assert build_parser().parse_args(["--command-label"]).command_label is True
