"""What ``fsdp-observe top`` renders: a ``ClusterSnapshot`` (nodes -> GPUs, processes; runs -> ranks).

Every source (agents and trainers pulled directly, pods found through Kubernetes, or Prometheus'
HTTP API) becomes this one in-memory shape; the screens render only it. A node keeps its latest
good ``NodeSnapshot`` (``observe.model``) together with the state of the latest pull, so a node
that stopped answering still shows its last data, with its age and the reason. The figures the
Cluster screen sorts on (``NodeFigures``) and the run's aggregates (step, ETA) are computed here,
once per refresh and off the UI's event loop; so is each run's verdict (``observe.diagnosis``:
which rank is stuck or slow), which the sources put on ``RunStatus.verdict``.

Units as in ``observe.model``: seconds, bytes, watts, celsius; ``*_ratio`` in 0..1; ``None``
means "could not be read" (shown as N/A, never 0). Standard library only (and the pure
``observe.diagnosis``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from observe.diagnosis import Verdict
from observe.model import GpuInfo, NodeHealth, NodeSnapshot, XidEvent
from observe.xid import SEVERITIES

#: The state of a node's (or a rank's) latest pull:
#: ``ok`` fresh data; ``stale`` it answered, but with a snapshot older than ``STALE_AFTER_SECONDS``
#: (its collector is stuck); ``slow`` no answer within the per-request timeout or the cycle's
#: deadline; ``unreachable`` connection refused, reset or name not found; ``malformed`` an answer
#: that is not a snapshot (HTTP error status, bad JSON, another schema version); ``waiting`` not
#: pulled yet.
State = Literal["ok", "stale", "slow", "unreachable", "malformed", "waiting"]
STATES: tuple[str, ...] = ("ok", "stale", "slow", "unreachable", "malformed", "waiting")
#: The ``error`` of an endpoint the refresh ran out of time for before it answered: ``slow``, but
#: no sign of its own (its answer may simply have been queued behind the others').
DEADLINE_MISSED = "no answer before the refresh deadline"
#: A snapshot older than this many seconds when it arrives is ``stale`` (the agent's healthz rule
#: is 3 intervals + 5 s; with the default 1 s interval that is 8 s; 15 s leaves room for clocks).
STALE_AFTER_SECONDS = 15.0
#: Window of the Cluster screen's XID column.
XID_WINDOW_SECONDS = 3600.0
#: Severity classes from worst to mildest (``observe.xid.SEVERITIES`` minus ``unknown``, which is
#: ranked with ``gpu_reset``: an unknown code deserves a look).
SEVERITY_RANK: dict[str, int] = {
    "node_reboot": 0,
    "gpu_reset": 1,
    "unknown": 1,
    "nvlink_fabric": 2,
    "application": 3,
    "informational": 4,
}
assert set(SEVERITY_RANK) == set(SEVERITIES)


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """One row of the Cluster screen, computed from a snapshot.

    Attributes:
        cpu_ratio: all CPUs busy, 0..1. memory_ratio: used / total physical memory.
        gpus: GPUs the agent reports (lost ones included). gpus_lost: of those, lost.
        mig: some GPU runs in MIG mode (its utilisation is N/A).
        gpu_util_mean, gpu_util_max: over GPUs whose utilisation could be read, 0..1.
        gpu_memory_ratio: used / total device memory over GPUs that report both.
        hottest_celsius, hottest_gpu: the highest GPU temperature and that GPU's index.
        power_watts: board power summed over GPUs that report it.
        xids_recent: XID events of the last ``XID_WINDOW_SECONDS``; xid_severity: the worst of
            their severity classes (``None`` when there were none).
        util_gpus, memory_gpus, temperature_gpus, power_gpus: how many GPUs each of the sums and
            means above is over. Fewer than ``gpus`` (a lost GPU, a MIG GPU's utilisation, a
            reading NVML refused) makes that figure partial (``partial``): the screens mark it.
        gpu_indexes, gpu_util_ratios, gpu_memory_ratios, gpu_temperatures: per GPU, in NVML
            order, for history sparklines and the GPU grid (``None`` where unreadable).
        gpu_lost: per GPU, whether it is lost. gpu_xid_severities: per GPU, the worst severity
            class of its XID events of the last ``XID_WINDOW_SECONDS`` (``None``: none), an event
            tied to a GPU by its index or PCI bus. xid_unattributed_severity: the worst of the
            recent events that name none of the node's GPUs (the grid colours every GPU of the
            node with it).
        gpu_uuids: GPU UUID -> NVML index (ties a trainer rank's ``gpu_uuid`` to a GPU).
        gpus_stale: GPUs whose NVML reading did not finish within the agent's deadline;
            stale_gpus: their indexes.
        k8s: what the agent's node health (``NodeSnapshot.node_health``) put on the Kubernetes
            Node: ``taint`` (the NoSchedule taint, with or without the condition), ``fault`` (the
            condition only), ``error`` (a call failed and nothing is set), else empty.
            k8s_note: one line saying it (the condition's reason, the taint, or the failure).
    """

    cpu_ratio: float | None = None
    memory_ratio: float | None = None
    gpus: int = 0
    gpus_lost: int = 0
    mig: bool = False
    gpu_util_mean: float | None = None
    gpu_util_max: float | None = None
    gpu_memory_ratio: float | None = None
    hottest_celsius: float | None = None
    hottest_gpu: int | None = None
    power_watts: float | None = None
    xids_recent: int = 0
    xid_severity: str | None = None
    util_gpus: int = 0
    memory_gpus: int = 0
    temperature_gpus: int = 0
    power_gpus: int = 0
    gpu_indexes: tuple[int, ...] = ()
    gpu_util_ratios: tuple[float | None, ...] = ()
    gpu_memory_ratios: tuple[float | None, ...] = ()
    gpu_temperatures: tuple[float | None, ...] = ()
    gpu_lost: tuple[bool, ...] = ()
    gpu_xid_severities: tuple[str | None, ...] = ()
    xid_unattributed_severity: str | None = None
    gpu_uuids: dict[str, int] = field(default_factory=dict)
    gpus_stale: int = 0
    stale_gpus: tuple[int, ...] = ()
    unreadable_gpus: tuple[int, ...] = ()
    unreadable_why: str = ""
    k8s: str = ""
    k8s_note: str = ""

    def partial(self, over: int) -> bool:
        """Whether a figure taken over ``over`` of the node's GPUs lacks some (and has some):
        ``partial(f.power_gpus)`` is true when some GPU's power could not be read."""
        return 0 < over < self.gpus


def ratio(part: float | None, whole: float | None) -> float | None:
    """``part / whole``, or ``None`` when either is unknown or ``whole`` is not positive."""
    if part is None or not whole or whole <= 0:
        return None
    return part / whole


def node_figures(snapshot: NodeSnapshot, now: float) -> NodeFigures:
    """The Cluster screen's figures of one node at Unix time ``now`` (for the XID window)."""
    return NodeFigures(**figure_fields(snapshot, now))


def figure_fields(snapshot: NodeSnapshot, now: float) -> dict[str, Any]:
    """``NodeFigures``' fields of one node at Unix time ``now``, by name (``node_status`` builds
    its one object per node from them)."""
    gpus = snapshot.gpus
    readable = [g for g in gpus if not g.lost]
    utils = [g.utilization_ratio for g in readable if g.utilization_ratio is not None]
    mem = [
        (g.memory_used_bytes, g.memory_total_bytes)
        for g in readable
        if g.memory_used_bytes is not None and g.memory_total_bytes
    ]
    temps = [(g.temperature_celsius, g.index) for g in readable if g.temperature_celsius is not None]
    power = [g.power_watts for g in readable if g.power_watts is not None]
    hottest = max(temps) if temps else (None, None)
    recent = [x for x in snapshot.xid_events if now - x.time_unix <= XID_WINDOW_SECONDS]
    memory = snapshot.host.memory
    per_gpu, unattributed = gpu_severities(gpus, recent)
    memory_ratios = tuple(None if g.lost else ratio(g.memory_used_bytes, g.memory_total_bytes) for g in gpus)
    return dict(
        cpu_ratio=snapshot.host.cpu.busy_ratio,
        memory_ratio=ratio(memory.used_bytes, memory.total_bytes),
        gpus=len(gpus),
        gpus_lost=len(gpus) - len(readable),
        mig=any(g.mig_enabled for g in readable),
        gpu_util_mean=sum(utils) / len(utils) if utils else None,
        gpu_util_max=max(utils) if utils else None,
        gpu_memory_ratio=ratio(sum(u for u, _ in mem), sum(t for _, t in mem)) if mem else None,
        hottest_celsius=hottest[0],
        hottest_gpu=hottest[1],
        power_watts=sum(power) if power else None,
        xids_recent=len(recent),
        xid_severity=worst_severity(x.severity for x in recent),
        util_gpus=len(utils),
        memory_gpus=len(mem),
        temperature_gpus=len(temps),
        power_gpus=len(power),
        gpu_indexes=tuple(g.index for g in gpus),
        gpu_util_ratios=tuple(None if g.lost else g.utilization_ratio for g in gpus),
        gpu_memory_ratios=memory_ratios,
        gpu_temperatures=tuple(None if g.lost else g.temperature_celsius for g in gpus),
        gpu_lost=tuple(g.lost for g in gpus),
        gpu_xid_severities=per_gpu,
        xid_unattributed_severity=unattributed,
        gpu_uuids={g.uuid: g.index for g in gpus if g.uuid},
        gpus_stale=sum(1 for g in gpus if g.stale and not g.lost),
        stale_gpus=tuple(g.index for g in gpus if g.stale and not g.lost),
        unreadable_gpus=tuple(g.index for g in gpus if g.unreadable and not g.lost),
        unreadable_why=next((g.unreadable for g in gpus if g.unreadable and not g.lost), None) or "",
        **k8s_health(snapshot.node_health),
    )


def k8s_health(health: NodeHealth | None) -> dict[str, str]:
    """``k8s`` and ``k8s_note`` of ``NodeFigures`` from the agent's node health."""
    if health is None:
        return {}
    if health.taint:
        key, _, rest = health.taint.partition("=")
        value, _, effect = rest.partition(":")
        condition = f"; condition {health.condition_type}={health.reason}" if health.status == "True" else ""
        return {"k8s": "taint", "k8s_note": f"tainted {value} ({key}:{effect}){condition}"}
    if health.status == "True":
        return {"k8s": "fault", "k8s_note": f"condition {health.reason} ({health.condition_type})"}
    if health.error:
        return {"k8s": "error", "k8s_note": f"node health: {health.error}"}
    return {}


def gpu_severities(gpus: tuple[GpuInfo, ...], events: Iterable[XidEvent]) -> tuple[tuple[str | None, ...], str | None]:
    """``(per GPU in gpus order, unattributed)``: the worst severity class of ``events`` on each
    GPU (an event is tied to a GPU by its index, else by its PCI bus), and the worst of the events
    tied to none of them."""
    events = tuple(events)
    worst: list[str | None] = [None] * len(gpus)
    if not events:  # most nodes, most refreshes: nothing to tie (and no PCI bus ids to normalise)
        return tuple(worst), None
    position = {g.index: i for i, g in enumerate(gpus)}
    by_bus = {_bus(g.pci_bus): i for i, g in enumerate(gpus) if g.pci_bus}
    unattributed: list[str] = []
    for event in events:
        if event.gpu is not None and event.gpu in position:
            i = position[event.gpu]
        elif event.pci_bus and _bus(event.pci_bus) in by_bus:
            i = by_bus[_bus(event.pci_bus)]
        else:
            unattributed.append(event.severity)
            continue
        known = worst[i]
        worst[i] = event.severity if known is None else worst_severity((event.severity, known))
    return tuple(worst), worst_severity(unattributed)


def events_of_gpu(gpu: GpuInfo, events: Iterable[XidEvent]) -> list[XidEvent]:
    """The events of ``events`` tied to ``gpu``: by its NVML index, or by its PCI bus for an event
    that names no index (as ``gpu_severities`` ties them)."""
    bus = _bus(gpu.pci_bus) if gpu.pci_bus else None
    return [
        e
        for e in events
        if e.gpu == gpu.index or (e.gpu is None and bus is not None and e.pci_bus and _bus(e.pci_bus) == bus)
    ]


def _bus(pci_bus: str) -> str:
    """A PCI bus id as the agent's GPUs carry it: ``0000:3b:00`` (the kernel's ``0000:3b:00.0``
    and NVML's 8-digit domain ``00000000:3B:00.0`` compare equal)."""
    text = pci_bus.lower()
    domain, _, rest = text.partition(":")
    text = f"{int(domain, 16):04x}:{rest}" if rest and all(c in "0123456789abcdef" for c in domain) else text
    return text.rsplit(".", 1)[0] if text.count(":") == 2 and "." in text else text


def worst_severity(severities: Iterable[str]) -> str | None:
    """The worst of some severity classes (``SEVERITY_RANK``), or ``None`` for none."""
    return min(severities, key=lambda s: SEVERITY_RANK.get(s, 1), default=None)


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeStatus(NodeFigures):
    """One node: what is kept of its latest good snapshot, and how the latest pull went.

    A node is one object: its figures are its own fields (it extends ``NodeFigures``), not a
    second object, and in slots: with its forty-odd fields an instance ``__dict__`` would no
    longer share its keys (CPython shares at most 30) and be a second object after all. Each full
    garbage collection walks every object alive, holding the GIL, and a refresh keeps two
    generations of every node alive (the source's latest and the one on screen): at 4,096 nodes a
    second object per node was 8,192 more for every collection to walk
    (``benchmarks/tui_fanin.py``). For the same reason only the node in focus (the one the Node
    screen shows) keeps its whole ``NodeSnapshot`` (some fifty objects); the others keep their
    figures, XID events and notices.

    Attributes:
        name: the node name (the agent's ``node``; the source address until it first answers).
        source: where it is pulled from (a URL, or ``prometheus``).
        state: the latest pull's outcome (``STATES``).
        error: why the latest pull failed, one line (``None`` when it did not).
        time_unix: when the latest good snapshot was taken (``None`` before the first one); kept
            with the figures when a later pull fails. Until then the ``NodeFigures`` fields are
            their defaults (no data yet) and ``figures`` is ``None``; after, it is the node itself.
        xid_events: its XID events, oldest first. notices: the agent's notices.
        snapshot: the whole snapshot, for the node in focus only (``None`` otherwise).
        checked_unix: when the latest pull ended.
    """

    name: str
    source: str
    state: str = "waiting"
    error: str | None = None
    time_unix: float | None = None
    xid_events: tuple[XidEvent, ...] = ()
    notices: tuple[str, ...] = ()
    snapshot: NodeSnapshot | None = None
    checked_unix: float | None = None

    @property
    def figures(self) -> NodeFigures | None:
        """The figures of the latest good snapshot (this node, read as ``NodeFigures``), or
        ``None`` before the first one."""
        return None if self.time_unix is None else self

    def age(self, now: float) -> float | None:
        """Seconds since the shown data was taken, or ``None`` without any."""
        return None if self.time_unix is None else max(0.0, now - self.time_unix)


def node_status(name: str, source: str, snapshot: NodeSnapshot, now: float, keep: bool) -> NodeStatus:
    """The status of a node whose agent answered ``snapshot`` at ``now``: ``ok``, or ``stale`` when the
    snapshot is older than ``STALE_AFTER_SECONDS``; the whole snapshot is kept only when ``keep``."""
    age = now - snapshot.time_unix
    stale = age > STALE_AFTER_SECONDS
    return NodeStatus(
        name=snapshot.node or name,
        source=source,
        state="stale" if stale else "ok",
        error=f"the agent's snapshot is {age:.0f} s old (collector stuck?)" if stale else None,
        time_unix=snapshot.time_unix,
        xid_events=snapshot.xid_events,
        notices=snapshot.agent.notices,
        snapshot=snapshot if keep else None,
        checked_unix=now,
        **figure_fields(snapshot, now),
    )


@dataclass(frozen=True)
class RankStatus:
    """One trainer rank, from its ``fsdp_train_*`` series (``observe.catalog``).

    Attributes:
        rank, local_rank, node, gpu_uuid, run_id: the series' labels (``gpu_uuid`` on CUDA only).
        source: where it is read from. state, error: as ``NodeStatus``.
        step: last completed step. planned_steps: the run's target.
        loss: token-weighted mean loss of the last log window (all ranks agree).
        tokens_per_second: this rank's labelled tokens/s; global_tokens_per_second: rank 0's sum.
        mfu_ratio: absent on CPU and unknown GPUs.
        window_step_seconds: mean step time of the last window. data_wait_ratio: share of it
            waiting for data. last_step_unix: when the last step ended.
        world_size, model, device_type: from ``fsdp_train_info``.
        phase: the phase whose ``fsdp_train_phase`` series is 1 (``observe.catalog.TRAIN_PHASES``;
            ``None`` when the exporter has no phase series).
        updated_unix: when this was read.

    The hang and straggler series (``observe.catalog.TRAINER_FORENSICS_METRICS``; all ``None`` or
    empty when the rank's collective tracking is off):

        train_state: what its training thread does (``observe.catalog.TRAIN_STATES``: computing,
            collective, data, phase); not to be confused with ``state``, the pull's outcome.
        collectives: ``(process group, enqueued, completed)`` per process group, by group name.
        blocked_seconds: how long its training thread has been blocked in its current collective
            (0 when not). waiting: ``(process group, op, sequence number)`` of that collective.
        stalled: its stall watchdog sees no progress. stall_threshold_seconds: the watchdog's limit.
        window_compute_seconds, window_collective_wait_seconds: per step, means over the last log
            window (compute = step time - data wait - collective wait: the straggler signal).

    A rank that stops answering after it said ``finished`` is in state ``finished`` (the run is
    over and the exporter's linger ended), keeping its last figures, not ``unreachable``.
    """

    rank: int
    run_id: str
    node: str = ""
    local_rank: int | None = None
    gpu_uuid: str | None = None
    source: str = ""
    state: str = "ok"
    error: str | None = None
    step: float | None = None
    planned_steps: float | None = None
    loss: float | None = None
    tokens_per_second: float | None = None
    global_tokens_per_second: float | None = None
    mfu_ratio: float | None = None
    window_step_seconds: float | None = None
    data_wait_ratio: float | None = None
    last_step_unix: float | None = None
    world_size: int | None = None
    model: str | None = None
    device_type: str | None = None
    phase: str | None = None
    updated_unix: float | None = None
    train_state: str | None = None
    collectives: tuple[tuple[str, int, int], ...] = ()
    blocked_seconds: float | None = None
    waiting: tuple[str, str, int] | None = None
    stalled: bool | None = None
    stall_threshold_seconds: float | None = None
    window_compute_seconds: float | None = None
    window_collective_wait_seconds: float | None = None

    @property
    def finished(self) -> bool:
        """The rank said its run is over (``fsdp_train_phase{phase="finished"} 1``)."""
        return self.phase == "finished"

    @property
    def shown_state(self) -> str:
        """``finished`` for a finished rank that answers (or answered last); else ``state``."""
        return "finished" if self.finished and self.state in ("ok", "finished") else self.state

    @property
    def data_wait_seconds(self) -> float | None:
        """Mean seconds per step spent waiting for data over the last window."""
        if self.window_step_seconds is None or self.data_wait_ratio is None:
            return None
        return self.window_step_seconds * self.data_wait_ratio

    @property
    def window_key(self) -> tuple[float | None, ...]:
        """What changes when a new log window closes (loss, step time, data wait, tokens/s): a
        new value means a new window, whatever the refresh rate."""
        return (self.loss, self.window_step_seconds, self.data_wait_ratio, self.tokens_per_second)


@dataclass(frozen=True)
class RunStatus:
    """One training run and its ranks.

    Attributes:
        run_id: the ``run_id`` label. ranks: sorted by rank.
        loss_history: ``(step, loss)`` points, oldest first (as many as the source kept).
        seconds_per_step: the pace the source saw the run make over its recent refreshes, the
            warm-up of a process's first step left out (``observe.sources.direct.StepRate``);
            ``None`` until it saw two different steps.
        verdict: which rank is stuck or slow, judged from the ranks' hang and straggler series
            (``observe.sources.verdicts``); ``None`` when no rank exports them.
    """

    run_id: str
    ranks: tuple[RankStatus, ...] = ()
    loss_history: tuple[tuple[float, float], ...] = ()
    seconds_per_step: float | None = None
    verdict: Verdict | None = None

    def _first(self, attr: str) -> float | None:
        return next((v for r in self.ranks if (v := getattr(r, attr)) is not None), None)

    @property
    def step(self) -> float | None:
        """The lowest step any answering rank reports (the run is as far as its slowest rank)."""
        steps = [r.step for r in self.ranks if r.step is not None]
        return min(steps) if steps else None

    @property
    def planned_steps(self) -> float | None:
        """The configured number of steps."""
        return self._first("planned_steps")

    @property
    def loss(self) -> float | None:
        """Loss of the last log window."""
        return self._first("loss")

    @property
    def world_size(self) -> int | None:
        """Ranks in the run (from ``fsdp_train_info``), else the ranks seen."""
        size = self._first("world_size")
        return int(size) if size else (len(self.ranks) or None)

    @property
    def finished(self) -> bool:
        """Every rank said the run is over (a rank that stopped answering afterwards included)."""
        return bool(self.ranks) and all(r.finished for r in self.ranks)

    @property
    def phase(self) -> str | None:
        """The ranks' phase when they agree; ``finished`` only when all are; else the phase of the
        most ranks (``None`` without phase series)."""
        phases = [r.phase for r in self.ranks if r.phase]
        if not phases:
            return None
        if self.finished:
            return "finished"
        unfinished = [p for p in phases if p != "finished"]
        return max(set(unfinished), key=unfinished.count)

    @property
    def global_tokens_per_second(self) -> float | None:
        """Rank 0's global tokens/s, else the sum of every rank's own."""
        value = self._first("global_tokens_per_second")
        if value is not None:
            return value
        own = [r.tokens_per_second for r in self.ranks if r.tokens_per_second is not None]
        return sum(own) if own else None

    @property
    def mfu_ratio(self) -> float | None:
        """Mean MFU over the ranks that report it (absent on CPU)."""
        values = [r.mfu_ratio for r in self.ranks if r.mfu_ratio is not None]
        return sum(values) / len(values) if values else None

    @property
    def step_seconds(self) -> float | None:
        """The slowest rank's mean step time over the last window (the run moves at its pace)."""
        values = [r.window_step_seconds for r in self.ranks if r.window_step_seconds is not None]
        return max(values) if values else None

    @property
    def eta_seconds(self) -> float | None:
        """Seconds to ``planned_steps`` at ``seconds_per_step`` (0 once finished; ``None`` until the
        source saw the run make progress). Never from the last log window's step time: the first
        window holds step 1 alone, warm-up and all, and would predict many times the real time."""
        if self.finished:
            return 0.0
        step, planned, seconds = self.step, self.planned_steps, self.seconds_per_step
        if step is None or planned is None or seconds is None:
            return None
        return max(0.0, planned - step) * seconds


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one refresh produced.

    Attributes:
        time_unix: when the refresh ended.
        source: what was read, for the title bar (``3 agents, 2 trainers``, ``prometheus URL``).
        nodes: every node known, in discovery order. runs: training runs seen.
        focus: the node whose full snapshot (with processes) was fetched this refresh.
        cycle_seconds: wall time of the refresh. errors: problems of the source itself
            (Kubernetes discovery or Prometheus unreachable), one line each.
        trainers: trainer endpoints the source was given or discovered (``None``: the source
            reads runs from Prometheus, not from endpoints). With ``0`` and no run the Run screen
            asks for endpoints; with some and no run it says they do not answer.
        trainer_hint: what to do when there are no trainer endpoints (the source's words; the
            Run screen has its own for the direct source).
    """

    time_unix: float
    source: str = ""
    nodes: tuple[NodeStatus, ...] = ()
    runs: tuple[RunStatus, ...] = ()
    focus: str | None = None
    cycle_seconds: float | None = None
    errors: tuple[str, ...] = ()
    trainers: int | None = None
    trainer_hint: str = ""

    @cached_property
    def _by_name(self) -> dict[str, NodeStatus]:
        by_name: dict[str, NodeStatus] = {}
        for n in self.nodes:
            by_name.setdefault(n.name, n)
        return by_name

    def node(self, name: str) -> NodeStatus | None:
        """The node called ``name`` (the first, if several are), or ``None``."""
        return self._by_name.get(name)

    def xid_events(self) -> list[XidEvent]:
        """XID events of every node, newest first."""
        events = [x for n in self.nodes for x in n.xid_events]
        return sorted(events, key=lambda x: x.time_unix, reverse=True)

    def gpu_index(self, node: str, uuid: str | None) -> int | None:
        """The NVML index of the GPU with ``uuid`` on ``node`` (``None`` when unknown)."""
        status = self.node(node)
        if uuid is None or status is None or status.figures is None:
            return None
        return status.figures.gpu_uuids.get(uuid)
