"""The snapshot model's JSON: exact round trip, versioning, forward compatibility."""

from __future__ import annotations

import json

import pytest

from observe.model import (
    SCHEMA_VERSION,
    AgentHealth,
    CpuStats,
    GpuInfo,
    GpuProcess,
    HostStats,
    MemoryStats,
    MigInstance,
    NodeSnapshot,
    ProcessInfo,
    XidCount,
    XidEvent,
)


def full_snapshot() -> NodeSnapshot:
    return NodeSnapshot(
        node="gpu-node-3",
        time_unix=1_700_000_000.5,
        host=HostStats(
            cpu_count=2,
            cpu=CpuStats(0.25, (0.5, 0.0)),
            memory=MemoryStats(100, 40, 60, 1, 2, 0, 0),
            load1=1.0,
            load5=0.5,
            load15=0.25,
            uptime_seconds=99.0,
            processes=3,
            threads=7,
            processes_by_state={"running": 1, "sleeping": 2},
        ),
        processes=(
            ProcessInfo(
                pid=7,
                ppid=1,
                name="python",
                state="running",
                user="alice",
                cpu_cores=1.5,
                memory_ratio=0.1,
                rss_bytes=10,
                cpu_seconds=3.0,
                threads=4,
                command="python train.py",
                pod_uid="0f2c9a44-52a3-4b8e-9c41-3e2d7f1a6b90",
                container_id="a" * 64,
            ),
        ),
        gpus=(
            GpuInfo(
                index=0,
                uuid="GPU-x",
                name="H100",
                pci_bus="0000:3b:00",
                utilization_ratio=None,
                temperature_celsius=40.0,
                throttle_reasons=("sw_power_cap",),
                mig_enabled=True,
                mig_instances=(
                    MigInstance(
                        index=0,
                        uuid="MIG-x",
                        gpu_instance_id=1,
                        compute_instance_id=0,
                        memory_total_bytes=5,
                        memory_used_bytes=1,
                    ),
                ),
            ),
            GpuInfo(index=1, lost=True),
        ),
        gpu_processes=(GpuProcess(gpu=0, gpu_uuid="GPU-x", pid=8, used_memory_bytes=5, in_host_pid_namespace=False),),
        xid_events=(
            XidEvent(
                xid=154,
                name="GPU recovery action changed",
                severity="gpu_reset",
                action="a",
                node="gpu-node-3",
                gpu=0,
                gpu_uuid="GPU-x",
                pci_bus="0000:3b:00",
                time_unix=5.0,
                recovery_action="Drain and Reset",
                fatal=None,
                link=None,
            ),
        ),
        xid_counts=(XidCount(xid=154, severity="gpu_reset", count=1, pci_bus="0000:3b:00", gpu=0, gpu_uuid="GPU-x"),),
        agent=AgentHealth(
            version="0.1.0",
            collection_seconds=0.01,
            collections=4,
            sources={"nvml": "ok"},
            errors={"xid_parse": 1},
            dropped={"temperature": 2},
            notices=("n",),
        ),
    )


def test_json_round_trip_is_exact() -> None:
    snapshot = full_snapshot()
    again = NodeSnapshot.from_json(snapshot.to_json())
    assert again == snapshot
    assert isinstance(again.gpus[0].mig_instances, tuple) and isinstance(again.host.cpu.core_busy_ratios, tuple)


def test_absent_values_are_null_in_json() -> None:
    data = json.loads(full_snapshot().to_json())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["gpus"][0]["utilization_ratio"] is None and data["gpus"][1]["temperature_celsius"] is None


def test_unknown_keys_are_ignored_and_missing_ones_take_defaults() -> None:
    data = json.loads(full_snapshot().to_json())
    data["added_later"] = {"x": 1}
    data["gpus"][0]["nvlink_bandwidth_bytes"] = 5
    del data["gpus"][1]["name"]
    again = NodeSnapshot.from_json(json.dumps(data))
    assert again.gpus[0].uuid == "GPU-x" and again.gpus[1].name is None


@pytest.mark.parametrize("text", ['{"schema_version": 2, "node": "n", "time_unix": 1}', "[]", '{"node": "n"}'])
def test_other_schema_versions_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="schema_version"):
        NodeSnapshot.from_json(text)


def test_snapshots_are_immutable() -> None:
    with pytest.raises(AttributeError):
        full_snapshot().node = "other"  # type: ignore[misc]


def test_integral_floats_written_as_ints_come_back_as_floats() -> None:
    data = json.loads(full_snapshot().to_json())
    data["time_unix"] = 1700000000
    data["gpus"][0]["temperature_celsius"] = 40
    again = NodeSnapshot.from_json(json.dumps(data))
    assert type(again.time_unix) is float and type(again.gpus[0].temperature_celsius) is float


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(gpus={"index": 0}),  # an object where a list belongs
        lambda d: d["gpus"].append("GPU-x"),  # a string where an object belongs
        lambda d: d.pop("node"),  # a required field missing
        lambda d: d.update(host=[1, 2]),
    ],
)
def test_a_wrong_shape_is_a_value_error(change) -> None:
    data = json.loads(full_snapshot().to_json())
    change(data)
    with pytest.raises(ValueError, match="wrong shape"):
        NodeSnapshot.from_json(json.dumps(data))
