"""Fixed cluster snapshots for the screen tests, built from the recorded agent answers
(tests/tui/recorded) and the trainer's real exporter at a pinned time.

- ``fleet_snapshot``: the three recorded nodes, an unreachable and a malformed endpoint, an 8-GPU
  node (GPU UUIDs that differ only in their last characters, GPU 7 the hottest; the agent tainted
  it after GPU 2 fell off the bus, and GPU 3's NVML reading is stale), a 16-GPU node, a
  node whose GPU 5 power NVML cannot read (its power sum is partial), and a two-rank run with a
  straggler.
- ``finished_snapshot``: the same run after its last step (``phase="finished"``); rank 1 stopped
  answering after it said so.
- ``big_snapshot``: ``n`` nodes of 8 GPUs for the GPU grid, with an idle GPU, a hot one, a lost
  one, an XID and an unreachable node among them.
- ``forensics_snapshot``: the fleet with a run as two real gloo ranks served it while healthy,
  straggling, hung, or with rank 1 holding the GIL (tests/tui/recorded/forensics); ``hang_snapshot``:
  a simulated 8,192-rank hang built from that recording's format.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from observe.diagnosis import Unreached, from_state
from observe.model import GpuInfo, NodeHealth, NodeSnapshot, XidEvent
from observe.sources.direct import LossHistory, StepRate, build_runs, gpu_indexes
from observe.sources.trainer import parse_exposition, ranks_from_samples
from observe.sources.view import ClusterSnapshot, NodeStatus, RankStatus, node_status
from observe.tui.screens.rank import Fetched
from tests.support.fleet import NODES, recorded, trainer_exposition
from tests.support.forensics import RECORDED, hang_fleet, meta, recorded_ranks, state_doc
from tests.support.tui import GPU0, GPU1

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
SOURCE = "3 agents, 2 trainer endpoints"


def many_gpus(base: NodeSnapshot, name: str, count: int, seed: int = 1) -> NodeSnapshot:
    """``base`` renamed ``name`` with ``count`` GPUs (readings varied; UUIDs differ at the tail)."""
    template = base.gpus[0]
    r = random.Random(seed)
    gpus = tuple(
        replace(
            template,
            index=i,
            uuid=f"GPU-abc00000-1111-2222-3333-00dea{i:07x}",
            pci_bus=base.gpus[i].pci_bus if i < len(base.gpus) else f"0000:{0x80 + 0x08 * i:02x}:00",
            utilization_ratio=round(r.uniform(0.85, 1.0), 2),
            memory_used_bytes=(60 + i) << 30,
            temperature_celsius=float(55 + i * (26 // max(1, count - 1))),
            power_watts=float(600 + 10 * i),
        )
        for i in range(count)
    )
    return replace(base, node=name, gpus=gpus)


#: What the agent's node health wrote on p5-node-8gpu (components/node-condition and node-taint).
TAINTED = NodeHealth(
    condition_type="FsdpObserveGPUFault",
    status="True",
    reason="NodeReboot",
    message="Faults: XID 79 (GPU has fallen off the bus) on GPU 2 (PCI 0000:90:00). Action: ...",
    taint_key="fsdp-observe.io/gpu-fault",
    taint="fsdp-observe.io/gpu-fault=NodeReboot:NoSchedule",
    updated_unix=NOW - 120,
)


def faulted(base: NodeSnapshot, name: str) -> NodeSnapshot:
    """``many_gpus`` with 8 GPUs, tainted by the agent (``TAINTED``), GPU 3's NVML reading stale."""
    snap = many_gpus(base, name, 8)
    # a stale GPU as the agent sends it (observe/agent/gpu.py): who it is and how old its reading
    # is, no figures
    gpus = tuple(
        GpuInfo(
            index=g.index,
            uuid=g.uuid,
            name=g.name,
            pci_bus=g.pci_bus,
            driver_version=g.driver_version,
            reading_age_seconds=14.0,
            stale=True,
        )
        if g.index == 3
        else g
        for g in snap.gpus
    )
    return replace(snap, gpus=gpus, node_health=TAINTED)


def no_power_reading(base: NodeSnapshot, name: str, gpu: int) -> NodeSnapshot:
    """``base`` with 8 GPUs, one of which NVML reports no power for (``None``)."""
    snap = many_gpus(base, name, 8, seed=3)
    gpus = tuple(replace(g, power_watts=None) if g.index == gpu else g for g in snap.gpus)
    return replace(snap, gpus=gpus)


def _ranks(phase: str | None = None, step: int = 120) -> list[RankStatus]:
    ranks = []
    for rank, (uuid, compute, wait) in enumerate(((GPU0, 0.30, 0.02), (GPU1, 0.48, 0.09))):
        text = trainer_exposition(rank, "gpu-node-1", uuid, 0.60, wait, step=step, compute=compute)().decode()
        ranks += ranks_from_samples(parse_exposition(text), f"http://10.0.0.1:{9500 + rank}/metrics", NOW)
    if phase is not None:
        ranks = [replace(r, phase=phase) for r in ranks]
    return ranks


def _history() -> LossHistory:
    history = LossHistory()
    for step, loss in ((20, 7.1), (40, 5.2), (60, 4.1), (80, 3.4), (100, 3.1)):
        history.add("llama-ft-7", step, loss)
    return history


def fleet_nodes(focus: str | None) -> list[NodeStatus]:
    """The fleet's nodes (``focus`` keeps its whole snapshot)."""
    snaps = [recorded(n, NOW, age=0.4) for n in NODES]
    base = snaps[0]
    snaps += [
        faulted(base, "p5-node-8gpu"),
        many_gpus(base, "gb200-node-16gpu", 16, seed=2),
        no_power_reading(base, "p5-node-nopower", 5),
    ]
    nodes = [
        node_status(s.node, f"http://10.0.0.{i + 1}:9401", s, NOW, keep=s.node == focus) for i, s in enumerate(snaps)
    ]
    nodes.append(
        NodeStatus(
            name="10.0.0.9:9401",
            source="http://10.0.0.9:9401",
            state="unreachable",
            error="connection refused",
            checked_unix=NOW,
        )
    )
    nodes.append(
        NodeStatus(
            name="10.0.0.8:9401",
            source="http://10.0.0.8:9401",
            state="malformed",
            error="not a snapshot: snapshot schema_version 2 is not 1; upgrade fsdp-observe on the reading side",
            checked_unix=NOW,
        )
    )
    return nodes


def _rates(ranks: list[RankStatus], seconds_per_step: float = 0.60, steps_ago: int = 20) -> StepRate:
    """A ``StepRate`` that saw the run ``steps_ago`` steps back, ``seconds_per_step`` a step ago each
    (the slowest rank's pace): the next ``build_runs`` gives the run that pace."""
    rates = StepRate()
    slowest = min(ranks, key=lambda r: r.step or 0.0)
    assert slowest.step is not None and slowest.last_step_unix is not None
    rates.add(slowest.run_id, slowest.step - steps_ago, slowest.last_step_unix - steps_ago * seconds_per_step)
    return rates


def fleet_snapshot(focus: str | None = None) -> ClusterSnapshot:
    """The fleet with a two-rank run of our trainer in progress, seen for 20 steps at 0.60 s per step:
    rank 1 on GPU 1 is the straggler (it computes 480 ms per step, rank 0 300 ms and waits for it)."""
    ranks = _ranks()
    nodes = fleet_nodes(focus)
    return ClusterSnapshot(
        time_unix=NOW - 0.3,
        source=SOURCE,
        nodes=tuple(nodes),
        runs=build_runs(ranks, _history(), _rates(ranks), NOW, gpu_index=gpu_indexes(nodes)),
        focus=focus,
        cycle_seconds=0.042,
        trainers=2,
    )


def cpu_only_snapshot() -> ClusterSnapshot:
    """A cluster of one node without GPUs (as the demo on a laptop), its agent recorded, no run."""
    nodes = tuple(n for n in fleet_nodes(None) if n.name == "cpu-node-3")
    return ClusterSnapshot(time_unix=NOW - 0.3, source=SOURCE, nodes=nodes, cycle_seconds=0.042)


def finished_snapshot() -> ClusterSnapshot:
    """The run after its last step: both ranks said ``finished``; rank 1 has stopped answering since."""
    ranks = _ranks("finished", step=200)
    ranks[1] = replace(ranks[1], state="finished")
    return ClusterSnapshot(
        time_unix=NOW - 0.3,
        source=SOURCE,
        nodes=tuple(fleet_nodes(None)),
        runs=build_runs(ranks, _history(), now=NOW),
        cycle_seconds=0.042,
        trainers=2,
    )


def big_snapshot(n: int) -> ClusterSnapshot:
    """``n`` nodes of 8 GPUs (H100-like readings) with the odd ones out the grid must show."""
    r = random.Random(7)
    template = recorded("gpu-node-1", NOW, age=0.4)
    gpu = template.gpus[0]
    nodes = []
    for i in range(n):
        gpus = tuple(
            replace(
                gpu,
                index=g,
                uuid=f"GPU-{i:08x}-{g:04x}",
                pci_bus=f"0000:{0x18 + 0x10 * g:02x}:00",
                utilization_ratio=round(r.uniform(0.88, 1.0), 2),
                memory_used_bytes=r.randrange(55 << 30, 70 << 30),
                temperature_celsius=float(r.randrange(50, 70)),
            )
            for g in range(8)
        )
        if i == 37:
            gpus = tuple(replace(x, utilization_ratio=0.02) if x.index == 3 else x for x in gpus)  # idle
        if i == 200:
            gpus = tuple(replace(x, temperature_celsius=91.0) if x.index == 6 else x for x in gpus)  # hot
        if i == 451:
            gpus = tuple(GpuInfo(index=x.index, uuid=x.uuid, lost=True) if x.index == 1 else x for x in gpus)
        xids: tuple[XidEvent, ...] = ()
        if i == 612:
            xids = (
                XidEvent(
                    xid=79,
                    name="GPU has fallen off the bus",
                    severity="node_reboot",
                    action="RESTART_BM",
                    node=f"gpu-node-{i:04d}",
                    gpu=5,
                    time_unix=NOW - 300,
                ),
            )
        snap = replace(template, node=f"gpu-node-{i:04d}", gpus=gpus, xid_events=xids)
        status = node_status(snap.node, f"http://10.1.{i // 250}.{i % 250}:9401", snap, NOW, keep=False)
        if i == 800:
            status = replace(status, state="unreachable", error="connection refused")
        nodes.append(status)
    return ClusterSnapshot(
        time_unix=NOW - 0.3,
        source=f"{n} agents, 0 trainer endpoints",
        nodes=tuple(nodes),
        cycle_seconds=0.31,
        trainers=0,
    )


def _rank_url(mode: str) -> Callable[[int], str]:
    base = meta(mode)["port_base"]
    return lambda rank: f"http://127.0.0.1:{base + rank}/metrics"


def forensics_snapshot(mode: str) -> ClusterSnapshot:
    """The fleet with the run two real gloo ranks served in ``mode`` (``healthy``, ``straggle``,
    ``hang``, ``gil``), as the direct source reads it at ``NOW`` (the recording moved to then); in
    ``gil``, rank 1's endpoint has not answered since the TUI started (its training thread holds
    the GIL), so it is an endpoint that times out."""
    url = _rank_url(mode)
    ranks = recorded_ranks(mode, NOW, url)
    nodes = fleet_nodes(None)
    unreached, errors = [], []
    for rank in (0, 1):
        if not any(r.rank == rank for r in ranks):
            unreached.append(Unreached(url(rank), "timeout", "no answer within 1.5 s"))
            errors.append(f"trainer {url(rank)}: slow: no answer within 1.5 s")
    return ClusterSnapshot(
        time_unix=NOW - 0.3,
        source=SOURCE,
        nodes=tuple(nodes),
        runs=build_runs(ranks, LossHistory(), _rates(ranks, 0.2, 5), NOW, unreached, gpu_indexes(nodes)),
        cycle_seconds=0.042,
        errors=tuple(errors),
        trainers=2,
    )


def hang_snapshot(world: int = 8192, culprit: int = 5121) -> ClusterSnapshot:
    """``world`` simulated ranks (``tests.support.forensics.hang_fleet``: the recorded hang's format)
    where ``culprit`` never entered the collective all the others wait in."""
    ranks = hang_fleet(world, culprit, NOW)
    return ClusterSnapshot(
        time_unix=NOW - 0.3,
        source=f"0 agents, {world:,} trainer endpoints",
        runs=build_runs(ranks, LossHistory(), None, NOW),
        cycle_seconds=1.9,
        trainers=world,
    )


def fetched_page(mode: str, rank: int) -> Fetched:
    """What the rank view gets for ``rank`` of ``mode``'s recording at ``NOW``: its recorded
    ``/debug/state``, or, for a rank that did not answer (rank 1 holding the GIL), a timeout and
    what rank 0's page reports of it."""
    if rank in (r for r in (0, 1) if (RECORDED / mode / f"rank{r}.state.json").exists()):
        return Fetched(from_state(state_doc(mode, rank)), NOW)
    url = _rank_url(mode)(rank).removesuffix("/metrics") + "/debug/state"
    peer = next(r for r in (0, 1) if r != rank)
    report = from_state(state_doc(mode, peer)).peers.get(rank)
    return Fetched(Unreached(url, "timeout", "no answer within 5.0 s"), NOW, peer, report)
