"""GPUs through NVML: the agent's GPU collector (NVML's own rules are in ``observe.agent.nvml``).

Each GPU is read on its own worker thread (``observe.agent.deadline``) and every collection waits
for all of them at most ``deadline_seconds``. One GPU's trouble never costs the others, the host
data or the collection itself; a GPU is shown in one of these states:

- **read**: its figures, fresh (``reading_age_seconds`` 0);
- **stale**: its reading did not finish by the deadline (a driver call that hangs): no figures
  (its old values are never served again as fresh), the age of its last complete reading, and it
  is not asked again until the hung call returns;
- **lost**: NVML answered GPU_IS_LOST (fallen off the bus): logged once, tried again every
  ``REPROBE_SECONDS`` by PCI bus, and read as before once it answers (after a reset, ``nvidia-smi
  -r``, or the driver's own recovery), without an agent restart;
- **unreadable**: its reading finished but gave no figure, because its calls failed with errors
  other than "lost" (``nvidia-smi``'s "Unknown Error" on a failing board, a handle NVML refuses,
  a GPU gone from NVML's device count), or the agent itself failed reading it. ``unreadable``
  says why (the NVML error kind, e.g. ``nvml_unknown``); the age grows as for a stale GPU; it is
  asked again every collection.

Identity (PCI bus, then UUID and name, then the device's limits, ``observe.agent.plausible``) is
read at start with a longer deadline, each part on its own, so a GPU lost before its first
reading still shows its PCI bus; when NVML cannot say even that, the bus comes from the
driver's ``/proc/driver/nvidia/gpus/<bus>`` entries that no readable GPU claims. It is read again
when NVML's own signals say the board behind an index may have changed: a lost GPU that answers
again (after a reset), an unreadable one that reads again, a change in NVML's device count
(which is read each collection, so GPUs that appear are read and GPUs that disappear show as
unreadable), and in any case every ``IDENTITY_SECONDS`` (one UUID call per GPU: a swapped board
is seen within that time). A new UUID is logged and the series follow it.

Readings a healthy GPU cannot produce are dropped for that collection and counted by kind
(``dropped``), never replaced by the previous value: a temperature above ``MAX_TEMPERATURE_CELSIUS``
(e.g. 4278190080, an unset sensor word), a share above 100 %, power, clocks, memory, ECC counts,
PCIe throughput and clock event reasons outside the device's own limits
(``observe.agent.plausible``), a process pid above the kernel's ``pid_max``, process memory above
the GPU's memory, and process-utilisation samples with SM/memory above 100 % or a timestamp at or
before the last one read (NVML returns samples newer than the timestamp it is given; some
drivers return older ones again).

Units follow the NVML API reference (https://docs.nvidia.com/deploy/nvml-api/): power in mW,
clocks in MHz, PCIe throughput in KB/s (1024 bytes), utilisation and fan speed in percent.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import pynvml

from observe.agent.deadline import Job, Worker
from observe.agent.nvml import GpuLost, Nvml, device_text, snake_case
from observe.agent.plausible import Checks, Limits, read_limits
from observe.logonce import OnceLog
from observe.model import GpuInfo, GpuProcess, MigInstance
from observe.xid import normalise_bus

__all__ = ["GpuCollector", "GpuLost", "Nvml", "driver_buses"]

log = logging.getLogger(__name__)

#: Hottest plausible GPU reading. GPUs throttle near 90 C and shut down near 100 C; 150 is out of range.
MAX_TEMPERATURE_CELSIUS = 150
#: Bytes in NVML's "KB" (PCIe throughput).
KIB = 1024
#: Seconds a collection waits for each GPU's reading (the agent's ``--nvml-timeout``).
DEADLINE_SECONDS = 0.5
#: Seconds start-up waits for the GPUs' identities (UUID, name, PCI bus) and event registration.
START_DEADLINE_SECONDS = 5.0
#: Seconds between two tries to read a lost GPU again.
REPROBE_SECONDS = 10.0
#: Seconds after which a GPU's identity (UUID, name, PCI bus, limits) is read again in any case.
IDENTITY_SECONDS = 60.0
#: ``unreadable`` of a GPU that NVML's device count no longer includes.
NOT_COUNTED = "not in NVML's device count"

#: NVML clock event (throttle) reason bits (nvml.h ``nvmlClocksEventReason*``) -> label value.
THROTTLE_REASONS: dict[int, str] = {
    pynvml.nvmlClocksThrottleReasonGpuIdle: "gpu_idle",
    pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting: "applications_clocks_setting",
    pynvml.nvmlClocksThrottleReasonSwPowerCap: "sw_power_cap",
    pynvml.nvmlClocksThrottleReasonHwSlowdown: "hw_slowdown",
    pynvml.nvmlClocksThrottleReasonSyncBoost: "sync_boost",
    pynvml.nvmlClocksThrottleReasonSwThermalSlowdown: "sw_thermal_slowdown",
    pynvml.nvmlClocksThrottleReasonHwThermalSlowdown: "hw_thermal_slowdown",
    pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown: "hw_power_brake_slowdown",
    pynvml.nvmlClocksThrottleReasonDisplayClockSetting: "display_clock_setting",
}

#: The ``GpuInfo`` fields that are figures: a reading with none of them read nothing.
FIGURES = (
    "utilization_ratio",
    "memory_utilization_ratio",
    "memory_total_bytes",
    "memory_used_bytes",
    "temperature_celsius",
    "power_watts",
    "power_limit_watts",
    "sm_clock_hertz",
    "memory_clock_hertz",
    "fan_speed_ratio",
    "pcie_rx_bytes_per_second",
    "pcie_tx_bytes_per_second",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "throttle_reasons",
)


class Unreadable(Exception):
    """A GPU's reading gave no figure; ``args[0]`` says why (an NVML error kind)."""


@dataclass
class _Gpu:
    index: int
    worker: Worker
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    pci_bus: str | None = None
    limits: Limits = field(default_factory=Limits)
    identified: bool = False  # its identity was read with a handle (a hung or failed read is tried again)
    identity_due: float = 0.0  # monotonic time at which its identity is read again
    lost: bool = False
    unreadable: str | None = None  # why its last reading gave no figure; None once it reads
    counted: bool = True  # NVML's device count includes its index
    last_sample_us: int = 0
    read_at: float | None = None  # Unix time its last complete reading ended
    next_probe: float = 0.0  # monotonic time of the next try to read it again while lost
    stale_logged: bool = False


#: What one GPU's reading job returns: the GPU, its processes, the implausible readings it dropped.
_Reading = tuple[GpuInfo, list[GpuProcess], Counter[str]]


def driver_buses(proc_root: str) -> list[str]:
    """PCI buses (``dddd:bb:dd``) of the GPUs the NVIDIA driver lists in ``/proc/driver/nvidia/gpus``."""
    try:
        names = os.listdir(os.path.join(proc_root, "driver", "nvidia", "gpus"))
    except OSError:
        return []
    return sorted(
        {
            normalise_bus(n)
            for n in names
            if re.fullmatch(
                r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
                r"(\.[0-7])?",
                n,
            )
        }
    )


def _ratio(percent: float | None, dropped: Counter[str], kind: str) -> float | None:
    """A 0..100 percentage as 0..1; above 100 is dropped and counted as ``kind``."""
    if percent is None:
        return None
    if not 0 <= percent <= 100:
        dropped[kind] += 1
        return None
    return percent / 100


def _first(pair: list[int] | None) -> int | None:
    """The value of an NVML ``[value, sampling period]`` pair."""
    return None if pair is None else pair[0]


class GpuCollector:
    """Reads every GPU NVML sees, each collection, each GPU on its own worker thread.

    Args:
        nvml: the wrapper (started by ``start``).
        pid_max: the kernel's ``/proc/sys/kernel/pid_max`` (larger GPU-process pids are dropped).
        deadline_seconds: how long a collection waits for the GPUs' readings.
        proc_root: the procfs holding ``driver/nvidia/gpus`` (PCI buses of GPUs NVML cannot read).

    Attributes:
        gpus: every GPU seen since start, by NVML index.
        dropped: implausible-reading kind -> count.
        errors: faults of the agent's own (``gpu_read_<exception>``), each logged once with its traceback.
        driver_version: the NVIDIA driver's version, or ``None``.
    """

    def __init__(
        self, nvml: Nvml, pid_max: int, deadline_seconds: float = DEADLINE_SECONDS, proc_root: str = "/proc"
    ) -> None:
        self.nvml = nvml
        self.pid_max = pid_max
        self.deadline_seconds = deadline_seconds
        self.proc_root = proc_root
        self.gpus: list[_Gpu] = []
        self.dropped: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.driver_version: str | None = None
        self._once = OnceLog(log, self.errors)
        self._events: Any = None
        self._system: Worker | None = None  # the device count and XID events: calls for no one GPU
        self._count: int | None = None

    def start(self, xid_events: bool = True) -> bool:
        """Start NVML and find the GPUs; return whether NVML is available.

        Args:
            xid_events: register for NVML XidCriticalError events (read by ``xid_events``).
        """
        if not self.nvml.start():
            return False
        self._system = Worker("nvml-system")
        self.driver_version = device_text(self.nvml.call("nvmlSystemGetDriverVersion"))
        self._count = self.nvml.call("nvmlDeviceGetCount")
        self._grow(self._count or 0)
        jobs = [(gpu, gpu.worker.submit(partial(self._identify, gpu))) for gpu in self.gpus]
        self._settle(jobs, START_DEADLINE_SECONDS)
        self._buses_from_driver()
        if xid_events:
            job = self._system.submit(self._register_xid_events)
            if job is not None and not job.wait(START_DEADLINE_SECONDS):
                log.warning(
                    "registering for NVML XID events took over %g s; going on without waiting", START_DEADLINE_SECONDS
                )
        return True

    def stop(self, release_nvml: bool = True) -> None:
        """End the worker threads and shut NVML down (skipped while a call still hangs, or when
        ``release_nvml`` is False: ``nvmlShutdown`` could block behind it)."""
        workers = [g.worker for g in self.gpus] + ([self._system] if self._system else [])
        stuck = [w.name for w in workers if w.busy]
        for worker in workers:
            worker.close()
        if stuck:
            log.warning("not calling nvmlShutdown: NVML calls on %s never returned", ", ".join(stuck))
            self.nvml.available = False
        elif release_nvml:
            self.nvml.shutdown()
        else:
            self.nvml.available = False

    def _grow(self, count: int) -> None:
        """Add the GPUs up to index ``count - 1`` that are not known yet."""
        for index in range(len(self.gpus), count):
            self.gpus.append(_Gpu(index, Worker(f"nvml-gpu{index}")))

    def _settle(self, jobs: list[tuple[_Gpu, Job[None] | None]], seconds: float) -> None:
        """Wait for start-up identity jobs; a lost GPU is marked, a slow or failed one is tried again later."""
        end = time.monotonic() + seconds
        for gpu, job in jobs:
            if job is None or not job.wait(end - time.monotonic()):
                log.warning(
                    "GPU %d did not tell its identity within %g s; trying again at the next collections",
                    gpu.index,
                    seconds,
                )
                continue
            try:
                job.result()
            except GpuLost:
                self._lose(gpu)
            except Unreadable as exc:
                gpu.unreadable = str(exc)
            except Exception as exc:  # noqa: BLE001 - one GPU's fault must not cost the node its collection
                gpu.unreadable = self._own_fault(gpu, exc)

    def _identify(self, gpu: _Gpu, handle: Any = None) -> None:
        """Handle (by index unless given), then PCI bus, UUID, name and limits, each on its own.

        Raises:
            GpuLost: after every part was tried, when one of them answered lost.
            Unreadable: NVML gave no handle for the GPU (the error kind).
        """
        call = self.nvml.call
        lost = False
        if handle is None:
            with self.nvml.tally() as failed:
                try:
                    handle = call("nvmlDeviceGetHandleByIndex", gpu.index)
                except GpuLost:
                    gpu.identified = True
                    raise
            if handle is None:
                raise Unreadable(failed.most_common(1)[0][0] if failed else "no handle")
        gpu.handle = handle
        try:
            pci = call("nvmlDeviceGetPciInfo", handle)
            bus = device_text(self.nvml.field(pci, "busId")) if pci is not None else None
            gpu.pci_bus = normalise_bus(bus) if bus else gpu.pci_bus
        except GpuLost:
            lost = True
        identity: dict[str, str | None] = {}
        for name, function in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName")):
            try:
                identity[name] = device_text(call(function, handle))
            except GpuLost:
                lost = True
        uuid = identity.get("uuid")
        if uuid and gpu.uuid and uuid != gpu.uuid:
            log.warning(
                "GPU %d (PCI %s) now answers with UUID %s, not %s (a board swapped, or reset with a new "
                "identity); its series carry the new UUID",
                gpu.index,
                gpu.pci_bus or "bus unknown",
                uuid,
                gpu.uuid,
            )
        gpu.uuid = uuid or gpu.uuid
        gpu.name = identity.get("name") or gpu.name
        if not lost:
            try:
                gpu.limits = read_limits(call, handle)
            except GpuLost:
                lost = True
        gpu.identified = True
        gpu.identity_due = time.monotonic() + IDENTITY_SECONDS
        if lost:
            raise GpuLost("identity")

    def _buses_from_driver(self) -> None:
        """Give GPUs without a PCI bus (lost before NVML said it) the driver's unclaimed buses, in order."""
        unknown = [g for g in self.gpus if g.pci_bus is None]
        if not unknown:
            return
        claimed = {g.pci_bus for g in self.gpus}
        spare = [bus for bus in driver_buses(self.proc_root) if bus not in claimed]
        for gpu, bus in zip(unknown, spare, strict=False):
            gpu.pci_bus = bus
            log.warning(
                "GPU %d: PCI bus %s from the driver's /proc/driver/nvidia/gpus (NVML could not say)", gpu.index, bus
            )

    def _register_xid_events(self) -> None:
        self._events = self.nvml.call("nvmlEventSetCreate")
        if self._events is None:
            return
        for gpu in self.gpus:
            if not gpu.lost and gpu.handle is not None:
                self._register(gpu)

    def _register(self, gpu: _Gpu) -> None:
        if self._events is None:
            return
        try:
            self.nvml.call("nvmlDeviceRegisterEvents", gpu.handle, pynvml.nvmlEventTypeXidCriticalError, self._events)
        except GpuLost:
            self._lose(gpu)

    def _lose(self, gpu: _Gpu) -> None:
        if not gpu.lost:
            gpu.lost = True
            gpu.next_probe = time.monotonic() + REPROBE_SECONDS
            log.error(
                "GPU %d (%s, PCI %s) is lost (NVML GPU_IS_LOST): it has fallen off the bus or "
                "stopped answering and needs a reset or a reboot; the other GPUs are still read, and "
                "this one is tried again every %g s",
                gpu.index,
                gpu.uuid or "uuid unknown",
                gpu.pci_bus or "bus unknown",
                REPROBE_SECONDS,
            )

    def _own_fault(self, gpu: _Gpu, exc: Exception) -> str:
        """An exception of the agent's own while reading ``gpu``: counted, logged once with its
        traceback; the GPU's ``unreadable`` reason."""
        kind = "gpu_read_" + snake_case(type(exc).__name__)
        self._once.report(
            kind,
            "reading GPU %d failed in the agent (%s: %s); it is shown unreadable, the other GPUs go on (reported once)",
            gpu.index,
            type(exc).__name__,
            exc,
            level=logging.ERROR,
            exc_info=True,
        )
        return f"agent error: {type(exc).__name__}"

    # -- per collection -----------------------------------------------------------------------

    def collect(self) -> tuple[list[GpuInfo], list[GpuProcess]]:
        """One reading of every GPU and the processes on them (user and command not filled in),
        waiting at most ``deadline_seconds`` for them all. Never raises for one GPU's fault."""
        started = time.monotonic()
        count_job = self._system.submit(partial(self.nvml.call, "nvmlDeviceGetCount")) if self._system else None
        jobs: dict[int, Job[_Reading] | None] = {}
        for gpu in self.gpus:
            task = self._task(gpu, started)
            jobs[gpu.index] = gpu.worker.submit(task) if task is not None else None
        end = started + self.deadline_seconds
        infos: list[GpuInfo] = []
        procs: list[GpuProcess] = []
        now = time.time()
        for gpu in self.gpus:
            job = jobs[gpu.index]
            answered = job is not None and job.wait(end - time.monotonic())
            if answered:
                assert job is not None
                try:
                    info, on_gpu, dropped = job.result()
                except GpuLost:
                    self._lose(gpu)
                except Unreadable as exc:
                    self._unreadable(gpu, str(exc))
                except Exception as exc:  # noqa: BLE001 - one GPU's fault must not cost the node its collection
                    self._unreadable(gpu, self._own_fault(gpu, exc))
                else:
                    self._found(gpu)
                    gpu.read_at = time.time()
                    self.dropped.update(dropped)
                    infos.append(replace(info, reading_age_seconds=0.0))
                    procs.extend(on_gpu)
                    continue
            infos.append(self._unread(gpu, answered, still_busy=job is None, now=now))
        if count_job is not None and count_job.wait(end - time.monotonic()):
            try:
                self._recount(count_job.result())
            except GpuLost:
                pass  # a device count cannot be lost; the GPUs say so on their own
        return infos, procs

    def _recount(self, count: int | None) -> None:
        """NVML's device count now: GPUs beyond it are unreadable, new ones are added; a change
        means an index may name another board, so every identity is read again."""
        if count is None or count == self._count:
            return
        log.warning(
            "NVML's device count changed from %s to %d: %s; reading every GPU's identity again",
            self._count,
            count,
            "GPUs are gone (fallen off the bus, or unbound from the driver)"
            if count < len(self.gpus)
            else "new GPUs are read from the next collection",
        )
        self._count = count
        self._grow(count)
        for gpu in self.gpus:
            gpu.counted = gpu.index < count
            gpu.identified = False

    def _task(self, gpu: _Gpu, now: float) -> Callable[[], _Reading] | None:
        """What to run for ``gpu`` this collection (``None``: nothing, it is lost and not due, or not counted)."""
        if not gpu.counted:
            return None
        if gpu.lost:
            if now < gpu.next_probe:
                return None
            gpu.next_probe = now + REPROBE_SECONDS
            return partial(self._revive, gpu)
        if not gpu.identified or now >= gpu.identity_due:
            return partial(self._identify_and_read, gpu)
        return partial(self._read, gpu)

    def _identify_and_read(self, gpu: _Gpu) -> _Reading:
        """For a GPU whose identity is not known or is due to be read again (one that had no
        handle before is registered for XID events once it has one)."""
        had_handle = gpu.handle is not None
        self._identify(gpu)
        reading = self._read(gpu)
        if not had_handle:
            self._register(gpu)
        return reading

    def _revive(self, gpu: _Gpu) -> _Reading:
        """Ask for a lost GPU again (by PCI bus; by index when no bus is known or that lookup fails),
        read its identity again (a reset may bring a new one) and read it; ``GpuLost`` if it still is."""
        handle = self.nvml.call("nvmlDeviceGetHandleByPciBusId", f"{gpu.pci_bus}.0") if gpu.pci_bus else None
        if handle is None:  # no bus known, or NVML could not look it up (lost would have raised)
            handle = self.nvml.call("nvmlDeviceGetHandleByIndex", gpu.index)
        if handle is None:
            raise GpuLost("no handle")
        self._identify(gpu, handle)
        reading = self._read(gpu)
        self._register(gpu)
        return reading

    def _found(self, gpu: _Gpu) -> None:
        """A reading finished with figures: a lost, stale or unreadable GPU answers again."""
        if gpu.lost or gpu.unreadable:
            log.warning(
                "GPU %d (%s, PCI %s) answers NVML again; reading it as before",
                gpu.index,
                gpu.uuid or "uuid unknown",
                gpu.pci_bus or "bus unknown",
            )
        gpu.lost = False
        gpu.unreadable = None
        gpu.stale_logged = False

    def _unreadable(self, gpu: _Gpu, why: str) -> None:
        """A reading gave no figure: say so once until the GPU reads again; read its identity again then."""
        if gpu.unreadable is None:
            log.error(
                "GPU %d (%s, PCI %s) answers no NVML reading (%s): a failing board or driver; the other "
                "GPUs are still read, and this one is asked again every collection (reported once until it reads)",
                gpu.index,
                gpu.uuid or "uuid unknown",
                gpu.pci_bus or "bus unknown",
                why,
            )
        gpu.unreadable = why
        gpu.identified = False
        gpu.lost = False  # it answered, if with nothing usable

    def _unread(self, gpu: _Gpu, answered: bool, still_busy: bool, now: float) -> GpuInfo:
        """A GPU without figures this collection: lost, not counted, unreadable (its reading
        ``answered`` with none), or stale (its reading is late; ``still_busy``: the previous one is)."""
        age = None if gpu.read_at is None else max(0.0, now - gpu.read_at)
        info = GpuInfo(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus=gpu.pci_bus,
            driver_version=self.driver_version,
            reading_age_seconds=age,
        )
        if gpu.lost:
            return replace(info, lost=True)
        if not gpu.counted:
            return replace(info, unreadable=f"{NOT_COUNTED} ({self._count} GPUs now)")
        if answered:
            return replace(info, unreadable=gpu.unreadable)
        if not gpu.stale_logged:
            gpu.stale_logged = True
            log.warning(
                "GPU %d (%s): its NVML reading did not finish within %g s%s; it is shown stale, the "
                "other GPUs go on (reported once until it answers again)",
                gpu.index,
                gpu.uuid or "uuid unknown",
                self.deadline_seconds,
                " (the previous call still has not returned)" if still_busy else "",
            )
        return replace(info, stale=True)

    def _read(self, gpu: _Gpu) -> _Reading:
        """One GPU's figures and processes, on its worker thread (drops counted in its own Counter).

        Raises:
            GpuLost: NVML answered lost.
            Unreadable: no figure could be read and some call failed with an error.
        """
        with self.nvml.tally() as failed:
            reading = self._figures(gpu)
        info = reading[0]
        if failed and all(getattr(info, name) is None for name in FIGURES):
            raise Unreadable(failed.most_common(1)[0][0])
        return reading

    def _figures(self, gpu: _Gpu) -> _Reading:
        call, h = self.nvml.call, gpu.handle
        dropped: Counter[str] = Counter()
        util = call("nvmlDeviceGetUtilizationRates", h)
        memory = call("nvmlDeviceGetMemoryInfo", h, pynvml.nvmlMemory_v2)
        reserved = getattr(memory, "reserved", None)
        if memory is None:  # drivers before r510 have only the v1 call (used includes reserved)
            memory = call("nvmlDeviceGetMemoryInfo", h)
        temperature = call("nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU)
        if temperature is not None and temperature > MAX_TEMPERATURE_CELSIUS:
            dropped["temperature"] += 1
            temperature = None
        power = call("nvmlDeviceGetPowerUsage", h)
        limit = call("nvmlDeviceGetEnforcedPowerLimit", h)
        limit_watts = None if limit is None else limit / 1000
        check = Checks(gpu.limits, limit_watts, dropped)
        sm_clock = call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM)
        mem_clock = call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM)
        rx = call("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        tx = call("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        encoder = call("nvmlDeviceGetEncoderUtilization", h)
        decoder = call("nvmlDeviceGetDecoderUtilization", h)
        mig = call("nvmlDeviceGetMigMode", h)
        mig_enabled = None if mig is None else mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        total = getattr(memory, "total", None)
        ecc = {
            kind: check.ecc(call("nvmlDeviceGetTotalEccErrors", h, error_type, pynvml.NVML_VOLATILE_ECC), f"ecc_{kind}")
            for kind, error_type in (
                ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            )
        }
        info = GpuInfo(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus=gpu.pci_bus,
            driver_version=self.driver_version,
            utilization_ratio=_ratio(getattr(util, "gpu", None), dropped, "utilization"),
            memory_utilization_ratio=_ratio(getattr(util, "memory", None), dropped, "memory_utilization"),
            memory_total_bytes=total,
            memory_used_bytes=check.memory(getattr(memory, "used", None), total, "memory_used"),
            memory_reserved_bytes=check.memory(reserved, total, "memory_reserved"),
            temperature_celsius=temperature,
            power_watts=check.power(None if power is None else power / 1000),
            power_limit_watts=limit_watts,
            sm_clock_hertz=check.clock(
                None if sm_clock is None else sm_clock * 1e6, gpu.limits.sm_clock_hertz, "sm_clock"
            ),
            memory_clock_hertz=check.clock(
                None if mem_clock is None else mem_clock * 1e6, gpu.limits.memory_clock_hertz, "memory_clock"
            ),
            fan_speed_ratio=_ratio(call("nvmlDeviceGetFanSpeed", h), dropped, "fan_speed"),
            pcie_rx_bytes_per_second=check.pcie(None if rx is None else rx * KIB, "pcie_rx"),
            pcie_tx_bytes_per_second=check.pcie(None if tx is None else tx * KIB, "pcie_tx"),
            encoder_utilization_ratio=_ratio(_first(encoder), dropped, "encoder_utilization"),
            decoder_utilization_ratio=_ratio(_first(decoder), dropped, "decoder_utilization"),
            ecc_corrected_total=ecc["corrected"],
            ecc_uncorrected_total=ecc["uncorrected"],
            throttle_reasons=self._throttle_reasons(h, check),
            mig_enabled=mig_enabled,
            mig_instances=self._mig_instances(h) if mig_enabled else (),
        )
        return info, self._processes(gpu, total, dropped), dropped

    def _throttle_reasons(self, handle: Any, check: Checks) -> tuple[str, ...] | None:
        bits = self.nvml.call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if bits is None and "nvmlDeviceGetCurrentClocksEventReasons" in self.nvml.missing:
            bits = self.nvml.call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)  # before r535
        bits = check.reasons(bits)
        if bits is None:
            return None
        return tuple(name for bit, name in THROTTLE_REASONS.items() if bits & bit)

    def _mig_instances(self, handle: Any) -> tuple[MigInstance, ...]:
        call, out = self.nvml.call, []
        for slot in range(call("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, expected=(pynvml.NVMLError_NotFound,))
            if mig is None:
                continue
            memory = call("nvmlDeviceGetMemoryInfo", mig)
            out.append(
                MigInstance(
                    index=slot,
                    uuid=device_text(call("nvmlDeviceGetUUID", mig)),
                    gpu_instance_id=call("nvmlDeviceGetGpuInstanceId", mig),
                    compute_instance_id=call("nvmlDeviceGetComputeInstanceId", mig),
                    memory_total_bytes=getattr(memory, "total", None),
                    memory_used_bytes=getattr(memory, "used", None),
                )
            )
        return tuple(out)

    def _processes(self, gpu: _Gpu, total: int | None, dropped: Counter[str]) -> list[GpuProcess]:
        call = self.nvml.call
        rows: dict[int, int | None] = {}
        for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            for proc in call(function, gpu.handle) or ():
                if not 0 < proc.pid <= self.pid_max:
                    dropped["process_pid"] += 1
                elif total is not None and proc.usedGpuMemory is not None and proc.usedGpuMemory > total:
                    dropped["process_memory"] += 1
                elif proc.pid not in rows or rows[proc.pid] is None:
                    rows[proc.pid] = proc.usedGpuMemory
        sm = self._sm_utilization(gpu, dropped)
        return [
            GpuProcess(
                gpu=gpu.index, gpu_uuid=gpu.uuid, pid=pid, used_memory_bytes=used, sm_utilization_ratio=sm.get(pid)
            )
            for pid, used in rows.items()
        ]

    def _sm_utilization(self, gpu: _Gpu, dropped: Counter[str]) -> dict[int, float]:
        """pid -> SM share from the samples newer than the last read (implausible ones dropped)."""
        samples = self.nvml.call(
            "nvmlDeviceGetProcessUtilization", gpu.handle, gpu.last_sample_us, expected=(pynvml.NVMLError_NotFound,)
        )
        out: dict[int, float] = {}
        newest = gpu.last_sample_us
        for s in samples or ():
            if s.timeStamp <= gpu.last_sample_us:
                dropped["process_sample_stale"] += 1
            elif s.smUtil > 100 or s.memUtil > 100:
                dropped["process_sm_utilization"] += 1
            else:
                out[s.pid] = max(out.get(s.pid, 0.0), s.smUtil / 100)
                newest = max(newest, s.timeStamp)
        gpu.last_sample_us = newest
        return out

    def xid_events(self) -> list[tuple[int | None, int]]:
        """``(gpu index or None, xid)`` for every NVML XidCriticalError event waiting, read on the
        system worker within ``deadline_seconds`` (none this time when the call hangs)."""
        if self._events is None or self._system is None:
            return []
        job = self._system.submit(self._drain_events)
        if job is None or not job.wait(self.deadline_seconds):
            return []
        return job.result()

    def _drain_events(self) -> list[tuple[int | None, int]]:
        by_address = {ctypes.addressof(g.handle.contents): g.index for g in self.gpus if g.handle is not None}
        out: list[tuple[int | None, int]] = []
        try:
            while (
                data := self.nvml.call("nvmlEventSetWait", self._events, 0, expected=(pynvml.NVMLError_Timeout,))
            ) is not None:
                if data.eventType == pynvml.nvmlEventTypeXidCriticalError:
                    device = ctypes.addressof(data.device.contents) if data.device else None
                    out.append((by_address.get(device) if device is not None else None, int(data.eventData)))
        except GpuLost:
            pass  # the GPU shows up lost on its own next read
        return out

    def by_index(self, index: int | None) -> _Gpu | None:
        """The GPU with NVML index ``index``, if any."""
        return next((g for g in self.gpus if g.index == index), None)
