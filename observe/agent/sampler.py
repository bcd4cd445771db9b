"""One collection: host, processes, GPUs and XIDs put together into an immutable ``NodeSnapshot``.

The sampler owns the collectors and is called on the agent's timer; nothing here runs on a
request. Each section (host, processes, GPUs, XIDs) is guarded on its own: a section that fails
is counted (``collect_<section>``), logged once, and the snapshot carries the others.
GPU processes are joined with the process table by pid. A pid the table does not have keeps its
GPU memory and has no user or command; what that means depends on where the agent runs:

- in the host PID namespace (its ``/proc`` has ``kthreadd`` as pid 2), every process is visible,
  so a pid missing from ``/proc`` has exited (NVML lists a process for a moment while its memory
  is released, at every job's end): the row says ``exited``, and nothing else is said;
- in a PID namespace of its own, the pid may live in another namespace: the row says so and a
  notice says that the agent needs the host PID namespace.

A pid that is in ``/proc`` but not yet in the table (it started during the collection) is
neither.

Starting the collectors is guarded too: one that fails to start is counted
(``collect_start_<section>``) and leaves the others running.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from observe.agent.gpu import DEADLINE_SECONDS, GpuCollector, Nvml
from observe.agent.host import HostCollector
from observe.agent.node_health import KubeNodeApi, NodeHealthReporter
from observe.agent.procs import ProcessTable
from observe.agent.xid_cursor import XidCursor, read_boot_id
from observe.agent.xid_watch import KMSG, KernelLogWatcher, XidStore
from observe.logonce import OnceLog
from observe.model import (
    AgentHealth,
    CpuStats,
    GpuInfo,
    GpuProcess,
    HostStats,
    MemoryStats,
    NodeSnapshot,
    ProcessInfo,
    XidCount,
    XidEvent,
)
from observe.xid import lookup

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Largest pid_max a 64-bit Linux allows (PID_MAX_LIMIT), used when ``pid_max`` cannot be read.
PID_MAX_LIMIT = 4 * 1024 * 1024
HOST_PID_NOTICE = (
    "GPU processes {pids} are not in this agent's /proc: run the agent in the host PID "
    "namespace (Kubernetes: hostPID: true) to see their users and commands"
)
OWN_PID_NAMESPACE_NOTICE = (
    "this agent sees only its own PID namespace (its container): the process list, counts "
    "and per-process series cover that alone; for the node's processes run it in the host "
    "PID namespace (Kubernetes: daemonsets/components/agent-host-processes)"
)


@dataclass(frozen=True)
class Settings:
    """What the sampler reads and how much it keeps.

    Attributes:
        node: node name on every series. proc_root: the procfs to read.
        kernel_log: a file to follow instead of the ring buffer. kmsg: the kernel ring buffer device.
        kernel_log_source: how to read the ring buffer: ``kmsg`` (the device) or ``syslog`` (the
            ``syslog(2)`` call, which needs only CAP_SYSLOG; ``observe.agent.klog``).
        max_processes: processes kept in a snapshot (busiest first; GPU processes are added).
        interval_seconds: the collection period (reported in the snapshot).
        nvml_timeout_seconds: how long a collection waits for each GPU's NVML reading before it
            reports the GPU stale (``observe.agent.gpu``).
        version: the agent's version string.
        state_dir: where the XID cursor and counts are kept across restarts
            (``observe.agent.xid_cursor``); ``None`` keeps nothing.
        node_condition, node_taint: write GPU health on the Kubernetes Node
            (``observe.agent.node_health``); kube_api, kube_token_file, kube_ca_file: where the API
            server is and the credentials for it (``None``: the pod's service account).
    """

    node: str
    proc_root: str = "/proc"
    kernel_log: str | None = None
    kmsg: str = KMSG
    kernel_log_source: str = "kmsg"
    max_processes: int = 100
    interval_seconds: float = 1.0
    nvml_timeout_seconds: float = DEADLINE_SECONDS
    version: str = ""
    state_dir: str | None = None
    node_condition: bool = False
    node_taint: bool = False
    kube_api: str | None = None
    kube_token_file: str | None = None
    kube_ca_file: str | None = None


def own_usage() -> tuple[float | None, int | None]:
    """This process's CPU seconds (user + system) and resident bytes, from ``/proc/self/stat``."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (
            (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            int(fields[21]) * os.sysconf("SC_PAGE_SIZE"),
        )
    except (OSError, ValueError, IndexError):
        return None, None


def in_host_pid_namespace(proc_root: str) -> bool:
    """Whether ``proc_root`` shows the node's first PID namespace: only there is pid 2 ``kthreadd``,
    the parent of the kernel's threads (a container's own namespace has no kernel threads)."""
    try:
        with open(f"{proc_root}/2/stat", "rb") as f:
            return f.read().split(b" ", 2)[1] == b"(kthreadd)"
    except (OSError, IndexError):
        return False


def read_pid_max(proc_root: str) -> int:
    """The kernel's ``pid_max`` (``PID_MAX_LIMIT`` when it cannot be read)."""
    try:
        with open(f"{proc_root}/sys/kernel/pid_max", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return PID_MAX_LIMIT


class Sampler:
    """Collects one ``NodeSnapshot`` per ``sample()`` call.

    Args:
        settings: see ``Settings``.
        extra_errors: more error counts for ``AgentHealth.errors`` (the HTTP server's).
    """

    def __init__(self, settings: Settings, extra_errors: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.settings = settings
        self.extra_errors = extra_errors
        self.host = HostCollector(settings.proc_root)
        self.table = ProcessTable(settings.proc_root)
        self.nvml = Nvml()
        self.gpus = GpuCollector(
            self.nvml,
            read_pid_max(settings.proc_root),
            deadline_seconds=settings.nvml_timeout_seconds,
            proc_root=settings.proc_root,
        )
        self.xids = XidStore()
        self.cursor: XidCursor | None = None
        syslog = settings.kernel_log_source == "syslog"
        if settings.state_dir:
            self.cursor = XidCursor(
                settings.state_dir,
                settings.kernel_log or ("syslog(2)" if syslog else settings.kmsg),
                follow_file=settings.kernel_log is not None,
                boot_id=read_boot_id(settings.proc_root),
                snapshot=self._xid_state,
            )
        self.watcher = KernelLogWatcher(
            self.xids,
            settings.node,
            path=settings.kernel_log,
            kmsg=settings.kmsg,
            boot_time=self.host.boot_time,
            syslog=syslog,
            cursor=self.cursor,
        )
        self._by_bus: dict[str, GpuInfo] = {}
        self.health: NodeHealthReporter | None = None
        if settings.node_condition or settings.node_taint:
            api = KubeNodeApi(settings.kube_api, settings.kube_token_file, settings.kube_ca_file)
            self.health = NodeHealthReporter(
                settings.node, api, settings.node_condition, settings.node_taint, gpu_of=self._gpu_of
            )
            self.xids.listeners.append(self.health.offer)
        self.errors: Counter[str] = Counter()
        self._once = OnceLog(log, self.errors)
        self.collections = 0
        self._procfs = "ok"
        self._own_pid_namespace = not in_host_pid_namespace(settings.proc_root)
        if self._own_pid_namespace:
            log.warning("%s (reported once)", OWN_PID_NAMESPACE_NOTICE)

    def _xid_state(self) -> tuple[dict[tuple[str | None, int, str], int], dict[str | None, str]]:
        """What the cursor saves: the counts, and every PCI bus -> UUID learnt (events and driver lines)."""
        _, counts, uuids = self.xids.view()
        learnt: dict[str | None, str] = {bus: uuid for bus, uuid in self.watcher.parser.bus_uuids.items()}
        return counts, {**learnt, **uuids}

    def start(self) -> None:
        """Take over the saved XID counts (with ``state_dir``), open the kernel log, then NVML (XID
        events from NVML only when the kernel log is unreadable)."""
        if self.cursor is not None:
            restored = self.cursor.load()
            self.xids.restore(restored.counts, restored.uuids)
            self.watcher.parser.bus_uuids.update({bus: uuid for bus, uuid in restored.uuids.items() if bus})
            log.info("XID state: %s (%d counts taken over)", restored.why, sum(restored.counts.values()))
        if self.health is not None:
            self.health.start()
        self._guard("start_kernel_log", self.watcher.start, False)
        self._guard("start_gpu", lambda: self.gpus.start(xid_events=not self.watcher.up), False)

    def stop(self, release_nvml: bool = True) -> None:
        """Stop the watcher and the GPU workers, shut NVML down (not when ``release_nvml`` is False:
        a collection is still inside an NVML call, which ``nvmlShutdown`` would wait for), close
        the process table."""
        self.watcher.stop()
        if self.cursor is not None:
            self.cursor.close()
        if self.health is not None:
            self.health.stop()
        self.gpus.stop(release_nvml)
        self.table.close()

    def _guard(self, section: str, fn: Callable[[], T], default: T) -> T:
        try:
            return fn()
        except Exception:  # noqa: BLE001 - a failing section must not cost the others
            self._once.report(
                f"collect_{section}",
                "collecting %s failed; the snapshot carries the other sections (reported once)",
                section,
                level=logging.ERROR,
                exc_info=True,
            )
            return default

    def sample(self) -> NodeSnapshot:
        """Collect everything once and return the new snapshot."""
        started = time.perf_counter()
        now = time.time()
        host = self._guard("host", lambda: self._host(now), HostStats())
        no_gpus: tuple[list[GpuInfo], list[GpuProcess]] = ([], [])
        gpus, gpu_procs = self._guard("gpu", self.gpus.collect, no_gpus)
        self._guard("nvml_xid", self._nvml_xids, None)
        no_processes: tuple[tuple[ProcessInfo, ...], tuple[GpuProcess, ...], list[str]] = ((), tuple(gpu_procs), [])
        processes, gpu_processes, notices = self._guard(
            "processes", lambda: self._processes(host.memory.total_bytes, gpu_procs), no_processes
        )
        no_xids: tuple[tuple[XidEvent, ...], tuple[XidCount, ...]] = ((), ())
        events, counts = self._guard("xid", lambda: self._xids(gpus), no_xids)
        if self.cursor is not None:
            self.cursor.flush()
        self.collections += 1
        return NodeSnapshot(
            node=self.settings.node,
            time_unix=now,
            host=host,
            processes=processes,
            gpus=tuple(gpus),
            gpu_processes=gpu_processes,
            xid_events=events,
            xid_counts=counts,
            agent=self._health(time.perf_counter() - started, notices),
            node_health=self.health.state() if self.health is not None else None,
        )

    # -- sections -----------------------------------------------------------------------------

    def _host(self, now: float) -> HostStats:
        try:
            self.table.refresh(time.monotonic())
            self._procfs = "ok"
        except OSError as exc:
            self._procfs = f"cannot list {self.settings.proc_root}: {exc.strerror}"
            raise
        load = self.host.load()
        return HostStats(
            cpu_count=self.host.cpu_count(),
            cpu=self._guard("cpu", self.host.cpu, CpuStats()),
            memory=self._guard("memory", self.host.memory, MemoryStats()),
            load1=load[0],
            load5=load[1],
            load15=load[2],
            uptime_seconds=self.host.uptime_seconds(now),
            processes=self.table.count,
            threads=self.table.threads,
            processes_by_state=self.table.by_state,
        )

    def _processes(
        self, memory_total: int | None, gpu_procs: list[GpuProcess]
    ) -> tuple[tuple[ProcessInfo, ...], tuple[GpuProcess, ...], list[str]]:
        pids = dict.fromkeys(self.table.busiest(self.settings.max_processes))
        pids.update((p.pid, None) for p in gpu_procs if p.pid in self.table)  # GPU processes always shown
        rows = {pid: info for pid in pids if (info := self.table.info(pid, memory_total)) is not None}
        joined, outside = [], []
        for p in gpu_procs:
            row = rows.get(p.pid)
            if row is not None:
                joined.append(replace(p, name=row.name, user=row.user, command=row.command))
            elif os.path.exists(f"{self.settings.proc_root}/{p.pid}"):
                joined.append(p)  # started after this collection's process table was read
            elif self._own_pid_namespace:
                outside.append(p.pid)
                joined.append(replace(p, in_host_pid_namespace=False))
            else:
                joined.append(replace(p, exited=True))
        notices = [HOST_PID_NOTICE.format(pids=", ".join(map(str, sorted(set(outside)))))] if outside else []
        return tuple(rows.values()), tuple(joined), notices

    def _nvml_xids(self) -> None:
        """NVML XID events into the store (only registered when the kernel log cannot be read)."""
        for index, code in self.gpus.xid_events():
            gpu = self.gpus.by_index(index)
            info = lookup(code)
            self._count(
                XidEvent(
                    xid=code,
                    name=info.name,
                    severity=info.severity,
                    action=info.action,
                    node=self.settings.node,
                    gpu=index,
                    gpu_uuid=gpu.uuid if gpu else None,
                    pci_bus=gpu.pci_bus if gpu else None,
                    time_unix=time.time(),
                    source="nvml",
                )
            )

    def _gpu_of(self, bus: str | None) -> tuple[int | None, str | None]:
        """NVML index and UUID of the GPU at PCI ``bus`` in the latest collection (node health's messages)."""
        gpu = self._by_bus.get(bus or "")
        return (gpu.index, gpu.uuid) if gpu is not None else (None, None)

    def _count(self, event: XidEvent) -> None:
        """Count an XID (through the cursor when there is one, so its count is saved)."""
        if self.cursor is None:
            self.xids.add(event)
        else:
            self.cursor.record(self.xids.add, event)

    def _xids(self, gpus: list[GpuInfo]) -> tuple[tuple[XidEvent, ...], tuple[XidCount, ...]]:
        """Recent events and counts, with GPU index and UUID matched by PCI bus."""
        events, counts, uuids = self.xids.view()
        last = self.xids.last_times()
        by_bus = {g.pci_bus: g for g in gpus if g.pci_bus}
        self._by_bus = by_bus

        def where(bus: str | None) -> tuple[int | None, str | None]:
            if bus is None:
                return None, None
            gpu = by_bus.get(bus)
            return (gpu.index, gpu.uuid or uuids.get(bus)) if gpu else (None, uuids.get(bus))

        matched = []
        for e in events:
            index, uuid = where(e.pci_bus)
            matched.append(replace(e, gpu=index if index is not None else e.gpu, gpu_uuid=uuid or e.gpu_uuid))
        totals = []
        for (bus, code, severity), n in sorted(counts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1], kv[0][2])):
            index, uuid = where(bus)
            when = last.get((bus, code, severity))
            totals.append(
                XidCount(
                    xid=code, severity=severity, count=n, pci_bus=bus, gpu=index, gpu_uuid=uuid, last_time_unix=when
                )
            )
        return tuple(matched), tuple(totals)

    def _health(self, seconds: float, notices: list[str]) -> AgentHealth:
        errors = Counter(self.errors) + self.table.errors + self.nvml.errors + self.gpus.errors
        if self.extra_errors is not None:
            errors.update(self.extra_errors())
        if self.watcher.parse_errors:
            errors["xid_parse"] = self.watcher.parse_errors
        if self.watcher.overruns:
            errors["kmsg_overrun"] = self.watcher.overruns
        if self.watcher.long_lines:
            errors["kernel_log_long_line"] = self.watcher.long_lines
        if self.cursor is not None and self.cursor.errors:
            errors["xid_state_write"] = self.cursor.errors
        if self.health is not None:
            errors.update(self.health.error_counts())
        kernel_log = self.watcher.status
        if not self.watcher.up and self.nvml.available:
            kernel_log += "; XIDs from NVML events"
        all_notices = [n for n in (self.nvml.reason, None if self.watcher.up else kernel_log) if n] + notices
        if self._own_pid_namespace:
            all_notices.append(OWN_PID_NAMESPACE_NOTICE)
        cpu_seconds, rss = own_usage()
        return AgentHealth(
            version=self.settings.version,
            interval_seconds=self.settings.interval_seconds,
            collection_seconds=seconds,
            collections=self.collections,
            cpu_seconds=cpu_seconds,
            resident_memory_bytes=rss,
            sources={
                "procfs": self._procfs,
                "nvml": "ok" if self.nvml.available else (self.nvml.reason or ""),
                "kernel_log": kernel_log,
                **(
                    {"xid_state": "ok" if self.cursor.enabled else "not kept (see the agent's log)"}
                    if self.cursor is not None
                    else {}
                ),
            },
            errors=dict(sorted(errors.items())),
            dropped=dict(sorted(self.gpus.dropped.items())),
            notices=tuple(all_notices),
        )
