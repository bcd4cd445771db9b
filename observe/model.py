"""Snapshot dataclasses shared by the node agent's ``/snapshot`` JSON and the TUI.

A ``NodeSnapshot`` is everything the agent knows about one node at one instant: the host (CPU per
core, memory, swap, load, tasks), its busiest processes, the GPUs and the processes on them, MIG
instances, recent XID events with their catalogue meaning, and the agent's own health. Every
class is frozen: the agent builds a new snapshot each collection and never changes a published
one. ``to_json``/``from_json`` round-trip exactly, so the TUI rebuilds the objects from
``GET /snapshot`` without importing the agent.

Units are SI base units as in the metric names (bytes, seconds, celsius, watts, hertz); ``*_ratio``
is a share in 0..1; ``cpu_cores`` is CPU time per wall time (1.5 = one and a half cores busy).
``None`` (JSON ``null``) means the value could not be read: show N/A, never 0. The schema is
versioned by ``SCHEMA_VERSION``; fields are only ever added within a version, so a reader ignores
keys it does not know. The full schema is documented in ``docs/agent.md``. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Version of the ``/snapshot`` JSON layout; a reader refuses other versions.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CpuStats:
    """CPU busy shares over the last collection interval (``None`` before the second collection).

    Attributes:
        busy_ratio: all logical CPUs together, 0..1.
        core_busy_ratios: one share per logical CPU, in CPU order.
    """

    busy_ratio: float | None = None
    core_busy_ratios: tuple[float, ...] = ()


@dataclass(frozen=True)
class MemoryStats:
    """Physical memory and swap in bytes, as ``free`` and htop count them (``/proc/meminfo``)."""

    total_bytes: int | None = None
    used_bytes: int | None = None
    available_bytes: int | None = None
    buffers_bytes: int | None = None
    cached_bytes: int | None = None
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None


@dataclass(frozen=True)
class HostStats:
    """Node-wide figures, like htop's header.

    Attributes:
        cpu_count: logical CPUs.
        load1, load5, load15: load averages.
        uptime_seconds: seconds since boot.
        processes: every process on the node (the process list may be capped; this is not).
        threads: threads of all processes.
        processes_by_state: running, sleeping, disk_sleep, stopped, zombie, idle, other -> count.
    """

    cpu_count: int = 0
    cpu: CpuStats = field(default_factory=CpuStats)
    memory: MemoryStats = field(default_factory=MemoryStats)
    load1: float | None = None
    load5: float | None = None
    load15: float | None = None
    uptime_seconds: float | None = None
    processes: int = 0
    threads: int = 0
    processes_by_state: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessInfo:
    """One process, like a row of htop.

    Attributes:
        state: running, sleeping, disk_sleep, stopped, zombie, idle or other.
        cpu_cores: CPU time per wall time over the last interval (htop's CPU% / 100).
        memory_ratio: resident memory / physical memory, 0..1.
        cpu_seconds: user + system CPU time since the process started.
        command: the command line, redacted and cut (``docs/agent.md``); ``[name]`` for kernel
            threads.
        user: the owner's user name (or numeric uid when it has no name here).
        pod_uid, container_id: from the process's cgroup when it runs in a Kubernetes pod or a
            container.
    """

    pid: int
    ppid: int
    name: str
    state: str
    user: str | None = None
    cpu_cores: float | None = None
    memory_ratio: float | None = None
    rss_bytes: int | None = None
    cpu_seconds: float | None = None
    threads: int | None = None
    command: str | None = None
    pod_uid: str | None = None
    container_id: str | None = None


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a GPU (bytes)."""

    index: int
    uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it, like a row of nvtop.

    Attributes:
        index: NVML index. uuid: ``GPU-…``. pci_bus: ``dddd:bb:dd`` (``observe.xid.normalise_bus``).
        driver_version: the NVIDIA driver's version.
        lost: NVML said GPU_IS_LOST; every figure below is ``None`` (the agent tries it again
            every few seconds and reads it as before once it answers, e.g. after a reset).
        stale: its NVML reading did not finish within the agent's deadline (a call that hangs);
            every figure below is ``None`` rather than the previous reading served as fresh.
        unreadable: why its reading, finished, gave no figure (``None`` when it read): the NVML
            error its calls answered (``nvml_unknown``: NVIDIA's "Unknown Error" of a failing
            board), ``not in NVML's device count (N GPUs now)``, or ``agent error: ...``; every
            figure below is ``None`` and ``reading_age_seconds`` grows.
        reading_age_seconds: seconds from the end of its last complete reading to this snapshot
            (``None`` before the first).
        utilization_ratio: ``None`` under MIG (NVML does not report it); see ``mig_enabled``.
        throttle_reasons: NVML clock event reasons active now (e.g. ``sw_power_cap``).
        ecc_corrected_total, ecc_uncorrected_total: volatile ECC counts since the driver loaded.
    """

    index: int
    uuid: str | None = None
    name: str | None = None
    pci_bus: str | None = None
    driver_version: str | None = None
    lost: bool = False
    stale: bool = False
    unreadable: str | None = None
    reading_age_seconds: float | None = None
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    fan_speed_ratio: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    encoder_utilization_ratio: float | None = None
    decoder_utilization_ratio: float | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    mig_enabled: bool | None = None
    mig_instances: tuple[MigInstance, ...] = ()


@dataclass(frozen=True)
class GpuProcess:
    """A process with memory on a GPU.

    Attributes:
        gpu: NVML index of the GPU. used_memory_bytes: ``None`` when NVML cannot tell.
        sm_utilization_ratio: from NVML's process samples of the last interval, 0..1.
        in_host_pid_namespace: ``False`` when the pid is not in the agent's ``/proc`` and the agent
            runs in a PID namespace of its own (it then needs the host PID namespace to name the
            process; user and command are ``None``).
        exited: the process has exited while NVML still lists it (its memory is being released;
            the agent sees the host's PID namespace, so a pid missing from it is gone, not hidden).
    """

    gpu: int
    gpu_uuid: str | None
    pid: int
    used_memory_bytes: int | None = None
    sm_utilization_ratio: float | None = None
    name: str | None = None
    user: str | None = None
    command: str | None = None
    in_host_pid_namespace: bool = True
    exited: bool = False


@dataclass(frozen=True)
class XidEvent:
    """One XID error, with the catalogue's meaning (``observe.xid``).

    Attributes:
        severity: application, gpu_reset, node_reboot, nvlink_fabric, informational or unknown.
        gpu: NVML index when the agent matched the PCI bus to a GPU, else ``None``.
        gpu_uuid: from NVML, or from the driver's ``GPU at PCI:…: GPU-…`` line.
        pci_bus: ``dddd:bb:dd``. pid, process: the process the driver names, when it does.
        time_unix: when it happened (``/dev/kmsg`` timestamp) or when the agent read it.
        source: ``kernel_log`` or ``nvml``. message: the text after the code. raw: the whole line.
        fatal, link: NVLink5 XIDs (144-150): whether the driver called it fatal, and the link.
        recovery_action: XID 154: the action the driver now requires (e.g. ``Drain and Reset``).
        caused_by: XID 45: the XID it names as its cause.
        continues: a further line of a report already counted (same bus, code and pid within
            ``observe.xid.REPORT_WINDOW_SECONDS`` of its first line): kept as read, never counted.
    """

    xid: int
    name: str
    severity: str
    action: str
    node: str = ""
    gpu: int | None = None
    gpu_uuid: str | None = None
    pci_bus: str | None = None
    pid: int | None = None
    process: str | None = None
    time_unix: float = 0.0
    source: str = "kernel_log"
    message: str = ""
    raw: str = ""
    fatal: bool | None = None
    link: int | None = None
    recovery_action: str | None = None
    caused_by: int | None = None
    continues: bool = False


@dataclass(frozen=True)
class XidCount:
    """How many times one XID code was reported for one GPU (a Prometheus counter).

    ``last_time_unix``: when the latest of them happened, from the kernel log record's own
    timestamp (or when the agent received it: an NVML event, a line appended to a followed file);
    ``None`` when that time is not known (lines already in a followed file when the agent opened
    it, counts taken over from a saved state).
    """

    xid: int
    severity: str
    count: int
    pci_bus: str | None = None
    gpu: int | None = None
    gpu_uuid: str | None = None
    last_time_unix: float | None = None


@dataclass(frozen=True)
class AgentHealth:
    """The agent's view of itself.

    Attributes:
        version: package version. interval_seconds: collection period.
        collection_seconds: wall time of the collection that produced this snapshot.
        collections: collections completed since start.
        cpu_seconds, resident_memory_bytes: what the agent itself has used.
        sources: procfs / nvml / kernel_log -> ``ok`` or why it cannot be read.
        errors: error kind -> count (each kind is logged once).
        dropped: implausible-reading kind -> count.
        notices: one-line messages for the user (no GPUs, needs the host PID namespace, ...).
    """

    version: str = ""
    interval_seconds: float = 1.0
    collection_seconds: float | None = None
    collections: int = 0
    cpu_seconds: float | None = None
    resident_memory_bytes: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    notices: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeHealth:
    """What the agent wrote about its node's GPUs on the Kubernetes Node (``--node-condition``,
    ``--node-taint``; ``observe.agent.node_health``).

    Attributes:
        condition_type: the condition it writes (``FsdpObserveGPUFault``); empty when not asked to.
        status: ``True`` once it set the condition (a critical XID); empty before.
        reason: the worst XID class seen (``NodeReboot``, ``GPUReset``, ``NVLinkFabric``).
        message: the condition's message (GPUs, codes, the action).
        taint_key: the taint it adds (``fsdp-observe.io/gpu-fault``); empty when not asked to.
        taint: ``key=value:NoSchedule`` once added; empty before.
        error: the latest failed call, one line (empty after a success).
        updated_unix: when any of the above last changed (``None``: never).
    """

    condition_type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    taint_key: str = ""
    taint: str = ""
    error: str = ""
    updated_unix: float | None = None


@dataclass(frozen=True)
class NodeSnapshot:
    """Everything the agent knows about one node at ``time_unix``.

    Attributes:
        processes: the busiest processes (by CPU, then memory), at most the agent's
            ``--max-processes``; ``host.processes`` is the full count.
        xid_events: the most recent XID events, oldest first. xid_counts: totals per GPU and code
            since the agent started.
        view: ``full``, or ``summary`` when ``processes``, ``gpu_processes`` and the per-core CPU
            shares were left out on purpose (``GET /snapshot?view=summary``).
        node_health: what the agent wrote on the Kubernetes Node (``None`` when it writes nothing).
    """

    node: str
    time_unix: float
    host: HostStats = field(default_factory=HostStats)
    processes: tuple[ProcessInfo, ...] = ()
    gpus: tuple[GpuInfo, ...] = ()
    gpu_processes: tuple[GpuProcess, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()
    xid_counts: tuple[XidCount, ...] = ()
    agent: AgentHealth = field(default_factory=AgentHealth)
    node_health: NodeHealth | None = None
    view: str = "full"
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        """This snapshot as JSON text (UTF-8 safe, keys in field order)."""
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> NodeSnapshot:
        """Rebuild a snapshot from ``to_json`` output (or ``GET /snapshot``).

        Keys this version does not know are ignored; missing optional keys take their defaults.

        Raises:
            ValueError: the text is not JSON, its ``schema_version`` is not ``SCHEMA_VERSION``, or
                a value has the wrong shape (an object where a list belongs, a missing ``node``).
        """
        data = json.loads(text)
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"snapshot schema_version {version!r} is not {SCHEMA_VERSION}; upgrade fsdp-observe on the reading side"
            )
        try:
            return _build(cls, data)
        except (TypeError, AttributeError) as exc:
            raise ValueError(f"snapshot JSON has the wrong shape: {exc}") from None


def _build(tp: Any, value: Any) -> Any:
    """``value`` (decoded JSON) as type ``tp``: dataclasses, tuples, dicts, optionals, scalars."""
    convert = _converter(tp)
    return value if convert is None or value is None else convert(value)


_Convert = Callable[[Any], Any]
_CONVERTERS: dict[Any, _Convert | None] = {}


def _converter(tp: Any) -> _Convert | None:
    """A function turning decoded JSON into ``tp`` (``None`` when the JSON value is already right).

    Built once per type from its hints and kept, so decoding a snapshot costs one dict lookup and
    one call per field rather than a walk over ``typing`` each time (about 10x faster; the TUI
    decodes a thousand snapshots per refresh).
    """
    if tp not in _CONVERTERS:
        _CONVERTERS[tp] = _make_converter(tp)
    return _CONVERTERS[tp]


def _make_converter(tp: Any) -> _Convert | None:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        inner = _converter(next(a for a in typing.get_args(tp) if a is not type(None)))
        return None if inner is None else _optional_of(inner)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_converter(tp)
    if origin is tuple:
        item = _converter(typing.get_args(tp)[0])
        return tuple if item is None else _tuple_of(item)
    if origin is dict:
        item = _converter(typing.get_args(tp)[1])
        return dict if item is None else _dict_of(item)
    if tp is float:
        return lambda v: float(v) if type(v) is int else v
    return None


def _optional_of(inner: _Convert) -> _Convert:
    return lambda v: None if v is None else inner(v)


def _tuple_of(item: _Convert) -> _Convert:
    return lambda v: tuple([item(x) for x in v])


def _dict_of(item: _Convert) -> _Convert:
    return lambda v: {k: item(x) for k, x in v.items()}


def _non_optional(tp: Any) -> Any:
    """``X`` for ``X | None``; ``tp`` otherwise."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def _dataclass_converter(tp: type) -> _Convert:
    """Builds ``tp`` from a decoded JSON object (which it may change in place)."""
    hints = typing.get_type_hints(tp)
    known = frozenset(f.name for f in dataclasses.fields(tp))
    nested: list[tuple[str, _Convert]] = []
    floats: list[str] = []

    def build(value: dict) -> Any:
        kwargs = value if value.keys() <= known else {k: v for k, v in value.items() if k in known}
        for key in floats:  # JSON writes 45.0 as 45 only when a producer gave an int; keep the type
            if type(kwargs.get(key)) is int:
                kwargs[key] = float(kwargs[key])
        for key, convert in nested:
            item = kwargs.get(key)
            if item is not None:
                kwargs[key] = convert(item)
        return tp(**kwargs)

    _CONVERTERS[tp] = build  # before the fields: a dataclass may (indirectly) contain itself
    for f in dataclasses.fields(tp):
        inner = _non_optional(hints[f.name])  # None is passed through above
        if inner is float:
            floats.append(f.name)
        elif (convert := _converter(inner)) is not None:
            nested.append((f.name, convert))
    return build
