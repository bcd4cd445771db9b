"""Node-wide figures like htop's header: CPU busy per core, memory, swap, load and uptime.

Read from the procfs at ``proc_root`` (``/proc``, or the host's mounted elsewhere, e.g.
``/host/proc`` in a DaemonSet): ``stat``, ``meminfo`` and ``loadavg`` (proc(5)). The root is an
argument, as prometheus_client's ``ProcessCollector(proc=...)`` takes it, so two collectors with
different roots can live in one process and nothing global is changed (psutil reads one
module-wide ``psutil.PROCFS_PATH``, which this module used to set). The arithmetic is psutil's,
so the figures are the ones it gave (``tests/agent/test_host.py`` compares them on this machine).

CPU busy share per interval, as htop and node-exporter's ``rate(node_cpu_seconds_total)``:
busy = total - idle - iowait over the difference of two ``stat`` readings.
Memory used as ``free`` (procps-ng 4) and psutil 6 and later count it: total - available
(``MemAvailable``, the kernel's estimate of what can be had without swapping); cached includes
reclaimable slab (``Cached + SReclaimable``, psutil's ``cached``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from observe.model import CpuStats, MemoryStats


@dataclass(frozen=True)
class CpuTimes:
    """One ``cpu`` line of ``/proc/stat``, in clock ticks.

    Attributes:
        total: the sum of every field (user, nice, system, idle, iowait, irq, softirq, steal,
            guest, guest_nice), as psutil sums its ``cpu_times()``.
        idle: idle + iowait.
    """

    total: int
    idle: int


def busy_ratio(before: CpuTimes | None, after: CpuTimes) -> float | None:
    """Share of CPU time not idle or iowait between two readings (0..1).

    Returns ``None`` without a previous reading or when no time passed.
    """
    if before is None:
        return None
    total = after.total - before.total
    if total <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - (after.idle - before.idle) / total))


def parse_stat(text: str) -> tuple[CpuTimes, list[CpuTimes], float]:
    """``/proc/stat`` → (all CPUs, one per CPU in order, boot time in Unix seconds).

    Raises:
        ValueError: no aggregate ``cpu`` line or no ``btime`` (not a Linux procfs).
    """
    total: CpuTimes | None = None
    cores: list[CpuTimes] = []
    boot: float | None = None
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name.startswith("cpu"):
            ticks = [int(v) for v in rest.split()]
            times = CpuTimes(total=sum(ticks), idle=ticks[3] + (ticks[4] if len(ticks) > 4 else 0))
            if name == "cpu":
                total = times
            else:
                cores.append(times)
        elif name == "btime":
            boot = float(rest)
    if total is None or boot is None:
        raise ValueError("no 'cpu' or 'btime' line in the stat file")
    return total, cores, boot


def parse_meminfo(text: str) -> MemoryStats:
    """``/proc/meminfo`` (kB) → ``MemoryStats`` in bytes, psutil's ``virtual_memory()`` arithmetic
    (psutil 7: ``used = total - available``; without ``MemAvailable``, before Linux 3.14,
    available is estimated as free + buffers + cached)."""
    kb = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields = value.split()
        if fields and fields[0].isdigit():
            kb[key] = int(fields[0]) * 1024
    total, free = kb.get("MemTotal", 0), kb.get("MemFree", 0)
    buffers, cached = kb.get("Buffers"), kb.get("Cached", 0) + kb.get("SReclaimable", 0)
    available = kb.get("MemAvailable", free + (buffers or 0) + cached)
    used = max(0, total - available)
    swap_total = kb.get("SwapTotal", 0)
    return MemoryStats(
        total_bytes=total,
        used_bytes=used,
        available_bytes=available,
        buffers_bytes=buffers,
        cached_bytes=cached if "Cached" in kb else None,
        swap_total_bytes=swap_total,
        swap_used_bytes=swap_total - kb.get("SwapFree", 0),
    )


class HostCollector:
    """Reads CPU, memory, swap, load and uptime from the procfs at ``proc_root``.

    Args:
        proc_root: the procfs to read (``/proc``, or the host's, e.g. ``/host/proc``).

    Raises:
        OSError, ValueError: ``proc_root/stat`` cannot be read or is not a procfs ``stat``.
    """

    def __init__(self, proc_root: str = "/proc") -> None:
        self.root = Path(proc_root)
        self._total: CpuTimes | None = None
        self._cores: list[CpuTimes] | None = None
        _, cores, self.boot_time = parse_stat(self._read("stat"))
        self._cpu_count = len(cores)

    def _read(self, name: str) -> str:
        return (self.root / name).read_text()

    def cpu(self) -> CpuStats:
        """Busy shares since the previous call (``None`` on the first call)."""
        total, cores, _ = parse_stat(self._read("stat"))
        before_total, before_cores = self._total, self._cores
        self._total, self._cores = total, cores
        per_core: tuple[float, ...] = ()
        if before_cores is not None and len(before_cores) == len(cores):
            per_core = tuple(busy_ratio(b, a) or 0.0 for b, a in zip(before_cores, cores, strict=True))
        return CpuStats(busy_ratio=busy_ratio(before_total, total), core_busy_ratios=per_core)

    def memory(self) -> MemoryStats:
        """Physical memory and swap, bytes."""
        return parse_meminfo(self._read("meminfo"))

    def load(self) -> tuple[float, float, float]:
        """Load averages over 1, 5 and 15 minutes."""
        one, five, fifteen = (float(v) for v in self._read("loadavg").split()[:3])
        return one, five, fifteen

    def uptime_seconds(self, now: float | None = None) -> float:
        """Seconds since boot (``now`` is Unix time; default the current time)."""
        return (time.time() if now is None else now) - self.boot_time

    def cpu_count(self) -> int:
        """Logical CPUs online at start (``cpuN`` lines of ``stat``; ``os.cpu_count()`` if none)."""
        return self._cpu_count or os.cpu_count() or 0
