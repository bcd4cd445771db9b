"""A ``NodeSnapshot`` as Prometheus text: a custom collector over the snapshot, rendered once.

Names, kinds, help texts and label names come from ``observe.catalog`` (``AGENT_METRICS``). Host
series carry ``node``; GPU series (``fsdp_gpu_*``) carry ``node``, ``gpu`` and ``gpu_uuid``. A
value the snapshot does not have is left out, never written as 0, and a family with no samples
is not written at all (a CPU-only node has no ``fsdp_gpu_*`` lines).

``render`` builds a fresh ``CollectorRegistry`` (never the global one) holding the snapshot
collector and returns the exposition as bytes; the server renders each snapshot once and serves
the bytes. The agent's own CPU and memory are ``fsdp_node_agent_*`` series from the snapshot
(prometheus_client's ``ProcessCollector`` would list the agent's ~1,000 open descriptors on
every render).
Label values are escaped by prometheus_client; label names pass through ``label_name``.

Command lines are not label values by default: ``fsdp_node_process_info`` carries an empty
``command`` label (Prometheus drops empty labels) unless ``command_label`` is set. A command line
changes with every new pid and would sit in the TSDB for its whole retention; the redacted
command lines stay in ``/snapshot``, which is served from memory and never stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.core import Metric as Family
from prometheus_client.registry import Collector

from observe import catalog as c
from observe.agent.gpu import THROTTLE_REASONS
from observe.model import GpuInfo, NodeSnapshot

_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]+")


def label_name(text: str) -> str:
    """``text`` as a valid Prometheus label name ``[a-zA-Z_][a-zA-Z0-9_]*``.

    Runs of other characters become one ``_`` (``"Source: Fan"`` -> ``"Source_Fan"``); leading and
    trailing underscores are removed (Prometheus reserves names starting with ``__``); a leading
    digit then gets a ``_`` in front; an empty result is ``"_"``.
    """
    name = _INVALID_LABEL_CHARS.sub("_", text).strip("_") or "_"
    return f"_{name}" if name[0].isdigit() else name


def _base_labels(metric: c.Metric) -> tuple[str, ...]:
    return c.AGENT_GPU_LABELS if metric.name.startswith("fsdp_gpu_") else c.AGENT_LABELS


class _Families:
    """Metric families built up sample by sample, in catalogue order."""

    def __init__(self) -> None:
        self._families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(self, metric: c.Metric, base: tuple[str, ...], value: float | None, *extra: str) -> None:
        """One sample of ``metric`` with label values ``base + extra``; ``None`` adds nothing."""
        if value is None:
            return
        family = self._families.get(metric.name)
        if family is None:
            names = [label_name(n) for n in (*_base_labels(metric), *metric.labels)]
            kind: type[CounterMetricFamily | GaugeMetricFamily] = (
                CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
            )
            family = self._families[metric.name] = kind(metric.family, metric.help, labels=names)
        family.add_metric([*base, *extra], value)

    def __iter__(self) -> Iterator[Family]:
        order = {m.family: i for i, m in enumerate(c.AGENT_METRICS)}
        return iter(sorted(self._families.values(), key=lambda family: order[family.name]))


class SnapshotCollector(Collector):
    """Yields the metric families of one immutable snapshot.

    Args:
        snapshot: what to expose.
        process_series: how many of the snapshot's processes (busiest first) get per-process
            series; processes using a GPU always do.
        command_label: put each process's (redacted) command line in the ``command`` label of
            ``fsdp_node_process_info``; otherwise the label is empty.
    """

    def __init__(self, snapshot: NodeSnapshot, process_series: int, command_label: bool = False) -> None:
        self.snapshot = snapshot
        self.process_series = process_series
        self.command_label = command_label

    def collect(self) -> Iterable[Family]:
        """The families, in catalogue order."""
        f = _Families()
        self._host(f)
        self._processes(f)
        for gpu in self.snapshot.gpus:
            self._gpu(f, gpu)
        self._gpu_processes_and_xids(f)
        self._agent(f)
        return f

    def _host(self, f: _Families) -> None:
        s, node = self.snapshot, (self.snapshot.node,)
        host, mem = s.host, s.host.memory
        f.add(c.NODE_CPU_BUSY, node, host.cpu.busy_ratio)
        for cpu, ratio in enumerate(host.cpu.core_busy_ratios):
            f.add(c.NODE_CPU_CORE_BUSY, node, ratio, str(cpu))
        for metric, value in (
            (c.NODE_MEMORY_TOTAL, mem.total_bytes),
            (c.NODE_MEMORY_USED, mem.used_bytes),
            (c.NODE_MEMORY_AVAILABLE, mem.available_bytes),
            (c.NODE_MEMORY_BUFFERS, mem.buffers_bytes),
            (c.NODE_MEMORY_CACHED, mem.cached_bytes),
            (c.NODE_SWAP_TOTAL, mem.swap_total_bytes),
            (c.NODE_SWAP_USED, mem.swap_used_bytes),
            (c.NODE_LOAD1, host.load1),
            (c.NODE_LOAD5, host.load5),
            (c.NODE_LOAD15, host.load15),
            (c.NODE_UPTIME, host.uptime_seconds),
            (c.NODE_THREADS, host.threads),
        ):
            f.add(metric, node, value)
        for state, count in host.processes_by_state.items():
            f.add(c.NODE_PROCESSES, node, count, state)
        if s.agent.sources.get("nvml") == "ok":
            f.add(c.NODE_GPUS, node, len(s.gpus))

    def _processes(self, f: _Families) -> None:
        s, node = self.snapshot, (self.snapshot.node,)
        on_gpu = {p.pid for p in s.gpu_processes}
        for rank, p in enumerate(s.processes):
            if rank >= self.process_series and p.pid not in on_gpu:
                continue
            pid = str(p.pid)
            command = (p.command or "") if self.command_label else ""
            f.add(
                c.NODE_PROCESS_INFO,
                node,
                1,
                pid,
                str(p.ppid),
                p.user or "",
                p.name,
                command,
                p.pod_uid or "",
                p.container_id or "",
            )
            f.add(c.NODE_PROCESS_CPU_SECONDS, node, p.cpu_seconds, pid)
            f.add(c.NODE_PROCESS_RESIDENT_MEMORY, node, p.rss_bytes, pid)

    def _gpu(self, f: _Families, g: GpuInfo) -> None:
        base = (self.snapshot.node, str(g.index), g.uuid or "")
        f.add(c.GPU_INFO, base, 1, g.name or "", g.pci_bus or "", g.driver_version or "")
        f.add(c.GPU_LOST, base, 1 if g.lost else 0)
        f.add(c.GPU_READING_STALE, base, 1 if g.stale else 0)
        f.add(c.GPU_UNREADABLE, base, 1 if g.unreadable else 0)
        f.add(c.GPU_READING_AGE, base, g.reading_age_seconds)
        for metric, value in (
            (c.GPU_UTILIZATION, g.utilization_ratio),
            (c.GPU_MEMORY_UTILIZATION, g.memory_utilization_ratio),
            (c.GPU_MEMORY_TOTAL, g.memory_total_bytes),
            (c.GPU_MEMORY_USED, g.memory_used_bytes),
            (c.GPU_MEMORY_RESERVED, g.memory_reserved_bytes),
            (c.GPU_TEMPERATURE, g.temperature_celsius),
            (c.GPU_POWER, g.power_watts),
            (c.GPU_POWER_LIMIT, g.power_limit_watts),
            (c.GPU_SM_CLOCK, g.sm_clock_hertz),
            (c.GPU_MEMORY_CLOCK, g.memory_clock_hertz),
            (c.GPU_FAN_SPEED, g.fan_speed_ratio),
            (c.GPU_PCIE_RX, g.pcie_rx_bytes_per_second),
            (c.GPU_PCIE_TX, g.pcie_tx_bytes_per_second),
            (c.GPU_ENCODER_UTILIZATION, g.encoder_utilization_ratio),
            (c.GPU_DECODER_UTILIZATION, g.decoder_utilization_ratio),
        ):
            f.add(metric, base, value)
        f.add(c.GPU_ECC_ERRORS, base, g.ecc_corrected_total, "corrected")
        f.add(c.GPU_ECC_ERRORS, base, g.ecc_uncorrected_total, "uncorrected")
        if g.throttle_reasons is not None:
            for reason in THROTTLE_REASONS.values():
                f.add(c.GPU_CLOCK_THROTTLE, base, 1 if reason in g.throttle_reasons else 0, reason)
        if g.mig_enabled is not None:
            f.add(c.GPU_MIG_MODE, base, 1 if g.mig_enabled else 0)
        for m in g.mig_instances:
            extra = (
                m.uuid or "",
                "" if m.gpu_instance_id is None else str(m.gpu_instance_id),
                "" if m.compute_instance_id is None else str(m.compute_instance_id),
            )
            f.add(c.GPU_MIG_MEMORY_TOTAL, base, m.memory_total_bytes, *extra)
            f.add(c.GPU_MIG_MEMORY_USED, base, m.memory_used_bytes, *extra)

    def _gpu_processes_and_xids(self, f: _Families) -> None:
        node = self.snapshot.node
        for p in self.snapshot.gpu_processes:
            base = (node, str(p.gpu), p.gpu_uuid or "")
            f.add(c.GPU_PROCESS_MEMORY, base, p.used_memory_bytes, str(p.pid))
            f.add(c.GPU_PROCESS_SM_UTILIZATION, base, p.sm_utilization_ratio, str(p.pid))
        for x in self.snapshot.xid_counts:
            base = (node, "" if x.gpu is None else str(x.gpu), x.gpu_uuid or "")
            f.add(c.GPU_XID_ERRORS, base, x.count, x.pci_bus or "", str(x.xid), x.severity)
            f.add(c.GPU_XID_LAST_TIME, base, x.last_time_unix, x.pci_bus or "", str(x.xid), x.severity)

    def _agent(self, f: _Families) -> None:
        a, node = self.snapshot.agent, (self.snapshot.node,)
        for source in ("procfs", "nvml", "kernel_log"):
            if source in a.sources:
                f.add(c.AGENT_UP, node, 1 if a.sources[source] == "ok" else 0, source)
        f.add(c.AGENT_COLLECTION_SECONDS, node, a.collection_seconds)
        f.add(c.AGENT_COLLECTIONS, node, a.collections)
        f.add(c.AGENT_CPU_SECONDS, node, a.cpu_seconds)
        f.add(c.AGENT_RESIDENT_MEMORY, node, a.resident_memory_bytes)
        f.add(c.AGENT_LAST_COLLECTION, node, self.snapshot.time_unix)
        for kind, count in sorted(a.errors.items()):
            f.add(c.AGENT_ERRORS, node, count, kind)
        for kind, count in sorted(a.dropped.items()):
            f.add(c.AGENT_DROPPED, node, count, kind)


def render(snapshot: NodeSnapshot, process_series: int = 20, command_label: bool = False) -> bytes:
    """The Prometheus text exposition (format 0.0.4) of ``snapshot`` (arguments as ``SnapshotCollector``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot, process_series, command_label))
    return generate_latest(registry)
