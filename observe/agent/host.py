"""Node-wide figures like htop's header: CPU busy per core, memory, swap, load and uptime (psutil).

psutil parses ``/proc/stat``, ``/proc/meminfo``, ``/proc/loadavg`` and ``/proc/vmstat`` and knows
their quirks across kernels; it reads the procfs at ``psutil.PROCFS_PATH`` (psutil's documented way
to read a host's ``/proc`` mounted elsewhere, e.g. ``/host/proc`` in a DaemonSet), which
``HostCollector`` sets from its ``proc_root``.

CPU busy share per interval, as htop and node-exporter's ``rate(node_cpu_seconds_total)``:
busy = total - idle - iowait over the difference of two ``/proc/stat`` readings.
Memory used as htop and ``free`` count it: total - free - buffers - cached (psutil's ``used``);
cached includes reclaimable slab (psutil's ``cached``).
"""

from __future__ import annotations

import time

import psutil

from observe.model import CpuStats, MemoryStats


def busy_ratio(before: psutil._common.scputimes | None, after: psutil._common.scputimes) -> float | None:
    """Share of CPU time not idle or iowait between two ``psutil.cpu_times()`` readings (0..1).

    Returns ``None`` without a previous reading or when no time passed.
    """
    if before is None:
        return None
    total = sum(after) - sum(before)
    if total <= 0:
        return None
    idle = (after.idle - before.idle) + (getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0))
    return min(1.0, max(0.0, 1.0 - idle / total))


class HostCollector:
    """Reads CPU, memory, swap, load and uptime from the procfs at ``proc_root``.

    Args:
        proc_root: the procfs to read; sets ``psutil.PROCFS_PATH`` (one procfs per process).
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        psutil.PROCFS_PATH = proc_root
        self._total: psutil._common.scputimes | None = None
        self._cores: list[psutil._common.scputimes] | None = None
        self.boot_time = psutil.boot_time()

    def cpu(self) -> CpuStats:
        """Busy shares since the previous call (``None`` on the first call)."""
        cores = psutil.cpu_times(percpu=True)
        total = psutil.cpu_times()
        before_total, before_cores = self._total, self._cores
        self._total, self._cores = total, cores
        per_core: tuple[float, ...] = ()
        if before_cores is not None and len(before_cores) == len(cores):
            per_core = tuple(busy_ratio(b, a) or 0.0 for b, a in zip(before_cores, cores, strict=False))
        return CpuStats(busy_ratio=busy_ratio(before_total, total), core_busy_ratios=per_core)

    @staticmethod
    def memory() -> MemoryStats:
        """Physical memory and swap, bytes."""
        vm = psutil.virtual_memory()
        swap = psutil.swap_memory()
        return MemoryStats(total_bytes=vm.total, used_bytes=vm.used, available_bytes=vm.available,
                           buffers_bytes=getattr(vm, "buffers", None), cached_bytes=getattr(vm, "cached", None),
                           swap_total_bytes=swap.total, swap_used_bytes=swap.used)

    @staticmethod
    def load() -> tuple[float, float, float]:
        """Load averages over 1, 5 and 15 minutes."""
        return psutil.getloadavg()

    def uptime_seconds(self, now: float | None = None) -> float:
        """Seconds since boot (``now`` is Unix time; default the current time)."""
        return (time.time() if now is None else now) - self.boot_time

    @staticmethod
    def cpu_count() -> int:
        """Logical CPUs."""
        return psutil.cpu_count() or 0
