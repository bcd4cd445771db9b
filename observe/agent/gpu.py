"""GPUs through NVML (``pynvml`` from nvidia-ml-py): the agent's one NVML wrapper and its GPU collector.

Every NVML call goes through ``Nvml.call``:

- NOT_SUPPORTED becomes ``None`` (absent; the TUI shows N/A, never 0);
- a function the driver's library lacks (FUNCTION_NOT_FOUND, or pynvml's library-mismatch error)
  is logged once and never called again, so that field is absent from then on;
- GPU_IS_LOST raises ``GpuLost``: the collector marks that GPU lost and logs it once, while the
  other GPUs go on; every ``REPROBE_SECONDS`` it asks for the GPU again (by PCI bus) and, once
  it answers (after a reset, ``nvidia-smi -r``, or the driver's own recovery), reads it as before
  without an agent restart (a GPU that fell off the bus, NVIDIA XID 79, needs that reset);
- any other NVML error is counted by kind (``nvml_<error>``), logged once per kind, and the field
  is absent.

Each GPU is read on its own worker thread (``observe.agent.deadline``) and every collection waits
for all of them at most ``deadline_seconds``: a GPU whose reading is not finished by then (a
driver call that hangs) is reported ``stale`` with the age of its last complete reading and no
figures (its old values are never served again as fresh), and it is not asked again until the
hung call returns; the other GPUs keep updating. Identity (PCI bus first, then UUID and name)
is read at start with a longer deadline, each part on its own, so a GPU lost before its first
reading still shows its PCI bus; when NVML cannot say even that, the bus comes from the
driver's ``/proc/driver/nvidia/gpus/<bus>`` entries that no readable GPU claims.

Readings a healthy GPU cannot produce are dropped for that collection and counted by kind
(``dropped``), never replaced by the previous value: a temperature above ``MAX_TEMPERATURE_CELSIUS``
(e.g. 4278190080, an unset sensor word), a share above 100 %, a process pid above the kernel's
``pid_max``, process memory above the GPU's memory, and process-utilisation samples with SM/memory
above 100 % or a timestamp at or before the last one read (NVML returns samples newer than the
timestamp it is given; some drivers return older ones again).

Units follow the NVML API reference (https://docs.nvidia.com/deploy/nvml-api/): power in mW,
clocks in MHz, PCIe throughput in KB/s (1024 bytes), utilisation and fan speed in percent.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import pynvml

from observe.agent.deadline import Job, Worker
from observe.logonce import OnceLog
from observe.model import GpuInfo, GpuProcess, MigInstance
from observe.xid import normalise_bus

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


class GpuLost(Exception):
    """NVML answered GPU_IS_LOST for a GPU."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Nvml:
    """The agent's one door to NVML (rules in the module docstring).

    Attributes:
        available: ``nvmlInit`` succeeded.
        reason: why NVML is unavailable (``None`` when it is available).
        errors: ``nvml_<error>`` -> count.
        missing: functions the library lacks (logged once each).
    """

    def __init__(self) -> None:
        self.available = False
        self.reason: str | None = "not started"
        self.errors: Counter[str] = Counter()
        self.missing: set[str] = set()
        self._once = OnceLog(log, self.errors)
        self._lock = threading.Lock()  # calls come from one worker thread per GPU

    def start(self) -> bool:
        """``nvmlInit``; on failure (no library, no driver: a CPU-only node) say so once and return False."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.available, self.reason = False, f"NVML unavailable ({exc}): no GPUs on this node"
            log.warning("%s; serving host data only (reported once)", self.reason)
            return False
        self.available, self.reason = True, None
        return True

    def shutdown(self) -> None:
        """``nvmlShutdown`` if started."""
        if self.available:
            self.available = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    def call(self, function: str, *args: Any, expected: tuple[type[Exception], ...] = ()) -> Any:
        """``pynvml.<function>(*args)``, or ``None`` when the value cannot be read.

        Args:
            function: a pynvml function name, e.g. ``nvmlDeviceGetFanSpeed``.
            expected: NVML errors that mean "nothing here" for this call (returned as ``None``
                without counting, e.g. NOT_FOUND for an empty MIG slot).

        Raises:
            GpuLost: NVML answered GPU_IS_LOST.
        """
        if function in self.missing:
            return None
        try:
            return getattr(pynvml, function)(*args)
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLost(function) from None
        except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError):
            with self._lock:
                first = function not in self.missing
                self.missing.add(function)
            if first:
                log.warning(
                    "the NVIDIA driver's NVML has no %s; that field is absent from now on (reported once)", function
                )
            return None
        except expected:
            return None
        except pynvml.NVMLError as exc:
            kind = "nvml_" + _snake(type(exc).__name__.partition("_")[2] or "unknown")
            with self._lock:  # OnceLog is not locked; several GPU threads report here
                self._once.report(kind, "NVML %s failed: %s (reported once per kind)", function, exc)
            return None


@dataclass
class _Gpu:
    index: int
    worker: Worker
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    pci_bus: str | None = None
    identified: bool = False  # its identity read finished (a hung one is tried again)
    lost: bool = False
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


def _text(value: Any) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


class GpuCollector:
    """Reads every GPU NVML sees, each collection, each GPU on its own worker thread.

    Args:
        nvml: the wrapper (started by ``start``).
        pid_max: the kernel's ``/proc/sys/kernel/pid_max`` (larger GPU-process pids are dropped).
        deadline_seconds: how long a collection waits for the GPUs' readings.
        proc_root: the procfs holding ``driver/nvidia/gpus`` (PCI buses of GPUs NVML cannot read).

    Attributes:
        gpus: GPUs found at start, by NVML index.
        dropped: implausible-reading kind -> count.
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
        self.driver_version: str | None = None
        self._events: Any = None
        self._event_worker: Worker | None = None

    def start(self, xid_events: bool = True) -> bool:
        """Start NVML and find the GPUs; return whether NVML is available.

        Args:
            xid_events: register for NVML XidCriticalError events (read by ``xid_events``).
        """
        if not self.nvml.start():
            return False
        self.driver_version = _text(self.nvml.call("nvmlSystemGetDriverVersion"))
        self.gpus = [_Gpu(i, Worker(f"nvml-gpu{i}")) for i in range(self.nvml.call("nvmlDeviceGetCount") or 0)]
        jobs = [(gpu, gpu.worker.submit(partial(self._identify, gpu))) for gpu in self.gpus]
        self._settle(jobs, START_DEADLINE_SECONDS)
        self._buses_from_driver()
        self.gpus = [g for g in self.gpus if g.handle is not None or g.lost or not g.identified]
        if xid_events:
            self._event_worker = Worker("nvml-events")
            job = self._event_worker.submit(self._register_xid_events)
            if job is not None and not job.wait(START_DEADLINE_SECONDS):
                log.warning(
                    "registering for NVML XID events took over %g s; going on without waiting", START_DEADLINE_SECONDS
                )
        return True

    def stop(self, release_nvml: bool = True) -> None:
        """End the worker threads and shut NVML down (skipped while a call still hangs, or when
        ``release_nvml`` is False: ``nvmlShutdown`` could block behind it)."""
        stuck = [g.index for g in self.gpus if g.worker.busy]
        for worker in [g.worker for g in self.gpus] + ([self._event_worker] if self._event_worker else []):
            worker.close()
        if stuck:
            log.warning("not calling nvmlShutdown: NVML calls for GPU(s) %s never returned", stuck)
            self.nvml.available = False
        elif release_nvml:
            self.nvml.shutdown()
        else:
            self.nvml.available = False

    def _settle(self, jobs: list[tuple[_Gpu, Job[None] | None]], seconds: float) -> None:
        """Wait for start-up identity jobs; a lost GPU is marked, a slow one is tried again later."""
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

    def _identify(self, gpu: _Gpu) -> None:
        """Handle, then PCI bus, UUID and name, each on its own (GpuLost raised after all were tried)."""
        call = self.nvml.call
        lost = False
        try:
            gpu.handle = call("nvmlDeviceGetHandleByIndex", gpu.index)
        except GpuLost:
            gpu.identified = True
            raise
        if gpu.handle is not None:
            try:
                pci = call("nvmlDeviceGetPciInfo", gpu.handle)
                bus = _text(pci.busId) if pci is not None else None
                gpu.pci_bus = normalise_bus(bus) if bus else None
            except GpuLost:
                lost = True
            for field, function in (("uuid", "nvmlDeviceGetUUID"), ("name", "nvmlDeviceGetName")):
                try:
                    setattr(gpu, field, _text(call(function, gpu.handle)))
                except GpuLost:
                    lost = True
        gpu.identified = True
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

    # -- per collection -----------------------------------------------------------------------

    def collect(self) -> tuple[list[GpuInfo], list[GpuProcess]]:
        """One reading of every GPU and the processes on them (user and command not filled in),
        waiting at most ``deadline_seconds`` for them all."""
        started = time.monotonic()
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
            if job is not None and job.wait(end - time.monotonic()):
                try:
                    info, on_gpu, dropped = job.result()
                except GpuLost:
                    self._lose(gpu)
                else:
                    self._found(gpu)
                    gpu.read_at = time.time()
                    self.dropped.update(dropped)
                    infos.append(replace(info, reading_age_seconds=0.0))
                    procs.extend(on_gpu)
                    continue
            infos.append(self._unread(gpu, job is None and not gpu.lost, now))
        return infos, procs

    def _task(self, gpu: _Gpu, now: float) -> Callable[[], _Reading] | None:
        """What to run for ``gpu`` this collection (``None``: nothing, it is lost and not due)."""
        if gpu.lost:
            if now < gpu.next_probe:
                return None
            gpu.next_probe = now + REPROBE_SECONDS
            return partial(self._revive, gpu)
        if not gpu.identified:
            return partial(self._identify_and_read, gpu)
        return partial(self._read, gpu)

    def _identify_and_read(self, gpu: _Gpu) -> _Reading:
        """For a GPU whose identity read timed out at start."""
        self._identify(gpu)
        return self._read(gpu)

    def _revive(self, gpu: _Gpu) -> _Reading:
        """Ask for a lost GPU again (by PCI bus, else by index) and read it; ``GpuLost`` if it still is."""
        if gpu.pci_bus:
            handle = self.nvml.call("nvmlDeviceGetHandleByPciBusId", f"{gpu.pci_bus}.0")
        else:
            handle = self.nvml.call("nvmlDeviceGetHandleByIndex", gpu.index)
        if handle is None:
            raise GpuLost("no handle")
        uuid = _text(self.nvml.call("nvmlDeviceGetUUID", handle))
        gpu.handle, gpu.uuid = handle, gpu.uuid or uuid
        reading = self._read(gpu)
        self._register(gpu)
        return reading

    def _found(self, gpu: _Gpu) -> None:
        """A reading finished: a lost or stale GPU answers again."""
        if gpu.lost:
            gpu.lost = False
            log.warning(
                "GPU %d (%s, PCI %s) answers NVML again; reading it as before",
                gpu.index,
                gpu.uuid or "uuid unknown",
                gpu.pci_bus or "bus unknown",
            )
        gpu.stale_logged = False

    def _unread(self, gpu: _Gpu, still_busy: bool, now: float) -> GpuInfo:
        """A GPU without a reading this collection: lost, or stale (its reading is late)."""
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
        """One GPU's figures and processes, on its worker thread (drops counted in its own Counter)."""
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
        sm_clock = call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_SM)
        mem_clock = call("nvmlDeviceGetClockInfo", h, pynvml.NVML_CLOCK_MEM)
        rx = call("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        tx = call("nvmlDeviceGetPcieThroughput", h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        encoder = call("nvmlDeviceGetEncoderUtilization", h)
        decoder = call("nvmlDeviceGetDecoderUtilization", h)
        mig = call("nvmlDeviceGetMigMode", h)
        mig_enabled = None if mig is None else mig[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        total = getattr(memory, "total", None)
        info = GpuInfo(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus=gpu.pci_bus,
            driver_version=self.driver_version,
            utilization_ratio=_ratio(getattr(util, "gpu", None), dropped, "utilization"),
            memory_utilization_ratio=_ratio(getattr(util, "memory", None), dropped, "memory_utilization"),
            memory_total_bytes=total,
            memory_used_bytes=getattr(memory, "used", None),
            memory_reserved_bytes=reserved,
            temperature_celsius=temperature,
            power_watts=None if power is None else power / 1000,
            power_limit_watts=None if limit is None else limit / 1000,
            sm_clock_hertz=None if sm_clock is None else sm_clock * 1e6,
            memory_clock_hertz=None if mem_clock is None else mem_clock * 1e6,
            fan_speed_ratio=_ratio(call("nvmlDeviceGetFanSpeed", h), dropped, "fan_speed"),
            pcie_rx_bytes_per_second=None if rx is None else rx * KIB,
            pcie_tx_bytes_per_second=None if tx is None else tx * KIB,
            encoder_utilization_ratio=_ratio(_first(encoder), dropped, "encoder_utilization"),
            decoder_utilization_ratio=_ratio(_first(decoder), dropped, "decoder_utilization"),
            ecc_corrected_total=call(
                "nvmlDeviceGetTotalEccErrors", h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
            ),
            ecc_uncorrected_total=call(
                "nvmlDeviceGetTotalEccErrors", h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
            ),
            throttle_reasons=self._throttle_reasons(h),
            mig_enabled=mig_enabled,
            mig_instances=self._mig_instances(h) if mig_enabled else (),
        )
        return info, self._processes(gpu, total, dropped), dropped

    def _throttle_reasons(self, handle: Any) -> tuple[str, ...] | None:
        bits = self.nvml.call("nvmlDeviceGetCurrentClocksEventReasons", handle)
        if bits is None and "nvmlDeviceGetCurrentClocksEventReasons" in self.nvml.missing:
            bits = self.nvml.call("nvmlDeviceGetCurrentClocksThrottleReasons", handle)  # before r535
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
                    uuid=_text(call("nvmlDeviceGetUUID", mig)),
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
        events worker within ``deadline_seconds`` (none this time when the call hangs)."""
        if self._events is None or self._event_worker is None:
            return []
        job = self._event_worker.submit(self._drain_events)
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
