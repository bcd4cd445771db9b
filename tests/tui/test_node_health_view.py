"""The Cluster and Node views show what the agent's node health put on the Kubernetes Node, and stale GPUs."""

from __future__ import annotations

from dataclasses import replace

from observe.model import GpuInfo, NodeHealth, NodeSnapshot
from observe.sources.view import k8s_health, node_figures, node_status
from observe.tui.screens import cluster
from observe.tui.screens.gpus import GpuRow, _note, _util

TAINT = "fsdp-observe.io/gpu-fault=NodeReboot:NoSchedule"
NOW = 1_800_000_000.0


def test_what_the_node_carries_in_one_line() -> None:
    assert k8s_health(None) == {}
    assert k8s_health(NodeHealth(condition_type="FsdpObserveGPUFault", taint_key="fsdp-observe.io/gpu-fault")) == {}
    assert k8s_health(
        NodeHealth(condition_type="FsdpObserveGPUFault", status="True", reason="NodeReboot", taint=TAINT)
    ) == {
        "k8s": "taint",
        "k8s_note": "tainted NodeReboot (fsdp-observe.io/gpu-fault:NoSchedule); condition "
        "FsdpObserveGPUFault=NodeReboot",
    }
    assert k8s_health(NodeHealth(condition_type="FsdpObserveGPUFault", status="True", reason="GPUReset")) == {
        "k8s": "fault",
        "k8s_note": "condition GPUReset (FsdpObserveGPUFault)",
    }
    assert k8s_health(NodeHealth(error="PATCH nodes/n/status failed: 403 Forbidden")) == {
        "k8s": "error",
        "k8s_note": "node health: PATCH nodes/n/status failed: 403 Forbidden",
    }


def snapshot(**changes) -> NodeSnapshot:
    gpus = tuple(GpuInfo(index=i, uuid=f"GPU-{i}", utilization_ratio=0.9) for i in range(4))
    return replace(NodeSnapshot(node="gpu-node-1", time_unix=NOW, gpus=gpus), **changes)


def test_the_cluster_note_says_the_most_urgent_first() -> None:
    base = snapshot()
    stale = replace(
        base, gpus=tuple(replace(g, stale=True, utilization_ratio=None) if g.index in (1, 3) else g for g in base.gpus)
    )
    figures = node_figures(stale, NOW)
    assert (figures.gpus_stale, figures.stale_gpus, figures.util_gpus) == (2, (1, 3), 2)
    node = node_status("gpu-node-1", "http://a:9401", stale, NOW, keep=False)
    assert cluster._note(node) == "GPUs 1, 3: NVML reading stale (a driver call hangs)"
    assert cluster._note_style(node) == "warn"
    tainted = replace(
        stale,
        node_health=NodeHealth(status="True", reason="NodeReboot", taint=TAINT, condition_type="FsdpObserveGPUFault"),
    )
    node = node_status("gpu-node-1", "http://a:9401", tainted, NOW, keep=False)
    assert cluster._note(node).startswith("tainted NodeReboot") and cluster._note_style(node) == "bad"
    (k8s,) = [c for c in cluster.COLUMNS if c.key == "k8s"]
    assert k8s.value(node) == "taint" and k8s.style(node) == "bad"
    assert replace(node, error="connection refused").error == cluster._note(replace(node, error="connection refused"))


def test_a_stale_gpu_in_the_gpu_table() -> None:
    row = GpuRow(gpu=GpuInfo(index=3, stale=True, reading_age_seconds=14.0), uuid_text="", xid_severity=None)
    assert _util(row) == "STALE"
    assert _note(row) == "stale for 14s: a driver call hangs"


def test_an_unreadable_gpu_is_marked_in_the_gpu_table_and_the_cluster_note() -> None:
    """A GPU whose NVML calls all fail (not lost): ERROR with its reason, in the bad style; the
    node's one line says it before stale GPUs."""
    row = GpuRow(
        gpu=GpuInfo(index=1, unreadable="nvml_unknown", reading_age_seconds=30.0), uuid_text="", xid_severity=None
    )
    assert _util(row) == "ERROR"
    assert _note(row) == "no NVML reading (nvml_unknown): a failing board; drain and reset it"
    base = snapshot()
    gpus = tuple(
        replace(g, unreadable="nvml_unknown", utilization_ratio=None)
        if g.index == 2
        else replace(g, stale=True)
        if g.index == 3
        else g
        for g in base.gpus
    )
    node = node_status("gpu-node-1", "http://a:9401", replace(base, gpus=gpus), NOW, keep=False)
    assert cluster._note(node) == "GPU 2: no NVML reading (nvml_unknown): a failing board"
    assert cluster._note_style(node) == "bad"


def test_an_unreadable_gpus_detail_block_says_why() -> None:
    from observe.tui.screens.gpus import gpu_block

    lines = gpu_block(GpuInfo(index=1, unreadable="nvml_unknown"), ((), ()), 80)
    text = "".join(t for t, *_ in lines[1])
    assert text.startswith(" ERROR ") and "every NVML reading fails (nvml_unknown)" in text
