"""Which GPU readings a device can produce: its own limits as NVML reports them, and the checks.

A reading outside what the device can do (4,294,967,295 mW of power: an unset 32-bit word; a
clock above the board's maximum; more memory used than installed; an ECC count at the 64-bit
all-ones sentinel) is a driver or firmware fault, not a figure: it is dropped for that
collection and counted by kind (``fsdp_node_agent_dropped_readings_total``), never exported as
measured and never replaced by the previous value.

Bounds, per GPU, read with its identity (``Limits``) and checked each reading:

- power: at most ``POWER_LIMIT_FACTOR`` x the highest limit the board accepts
  (``nvmlDeviceGetPowerManagementLimitConstraints``; else its enforced limit; else
  ``MAX_POWER_WATTS``). The averaged power NVML reports stays near the limit; twice it is not a
  reading;
- SM and memory clocks: at most ``CLOCK_FACTOR`` x the board's maximum
  (``nvmlDeviceGetMaxClockInfo``; else ``MAX_CLOCK_HERTZ``);
- PCIe throughput: at most ``PCIE_FACTOR`` x what the link can carry one way at its maximum
  generation and width (``nvmlDeviceGetMaxPcieLinkGeneration`` / ``...Width``, ``PCIE_LANE_BYTES``;
  else a Gen6 x16 link);
- memory used and reserved: at most the memory installed;
- ECC counts: below 2^63 (the all-ones sentinel and counts that read negative as signed 64-bit
  are wrap-arounds, not errors);
- clock event reasons: only the bits NVML defines (``nvmlClocksEventReasonAll``); an all-ones
  word is not nine reasons at once.

Temperature and the 0..100 % shares keep their rules in ``observe.agent.gpu``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

#: A board's averaged power stays near its limit; this many times the highest limit is not a reading.
POWER_LIMIT_FACTOR = 2.0
#: When NVML gives no limit: no GPU board draws 5 kW (a GB200 superchip's limit is about 2.7 kW).
MAX_POWER_WATTS = 5000.0
#: A clock above this many times the board's own maximum is not a reading (rounding and boost headroom).
CLOCK_FACTOR = 1.1
#: When NVML gives no maximum clock: no GPU clock reaches 10 GHz.
MAX_CLOCK_HERTZ = 10e9
#: A PCIe throughput above this many times the link's one-way maximum is not a reading.
PCIE_FACTOR = 1.5
#: Bytes per second one PCIe lane carries one way, by generation: the raw rate after line coding
#: (8b/10b for Gen1-2, 128b/130b for Gen3-5, 1b/1b FLIT for Gen6), PCI Express Base Specification.
PCIE_LANE_BYTES: dict[int, float] = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969e6, 5: 3938e6, 6: 7877e6}
#: A link NVML cannot describe is bounded as a Gen6 x16 one.
DEFAULT_PCIE_BYTES = PCIE_LANE_BYTES[6] * 16
#: ECC counters are 64-bit: values from 2^63 up are the all-ones sentinel or a wrap-around.
MAX_ECC_COUNT = 2**63 - 1
#: Every clock event reason bit NVML defines.
KNOWN_REASON_BITS: int = pynvml.nvmlClocksEventReasonAll


@dataclass(frozen=True)
class Limits:
    """What one GPU can do, from NVML (``None``: NVML did not say; the fallback bound is used).

    Attributes:
        power_watts: the highest power limit the board accepts.
        sm_clock_hertz, memory_clock_hertz: the board's maximum clocks.
        pcie_bytes_per_second: one way, at the link's maximum generation and width.
    """

    power_watts: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    pcie_bytes_per_second: float | None = None


def read_limits(call: Callable[..., Any], handle: Any) -> Limits:
    """The limits of the GPU behind ``handle`` (``call`` is ``Nvml.call``: absent values are ``None``)."""
    constraints = call("nvmlDeviceGetPowerManagementLimitConstraints", handle)
    sm = call("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM)
    mem = call("nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_MEM)
    generation = call("nvmlDeviceGetMaxPcieLinkGeneration", handle)
    width = call("nvmlDeviceGetMaxPcieLinkWidth", handle)
    lane = PCIE_LANE_BYTES.get(generation) if generation else None
    if lane is None and generation and generation > 6:  # a generation newer than this table: twice each step
        lane = PCIE_LANE_BYTES[6] * 2 ** (generation - 6)
    return Limits(
        power_watts=constraints[1] / 1000 if constraints and constraints[1] else None,
        sm_clock_hertz=sm * 1e6 if sm else None,
        memory_clock_hertz=mem * 1e6 if mem else None,
        pcie_bytes_per_second=lane * width if lane and width else None,
    )


class Checks:
    """The bounds of one GPU's reading; what falls outside is counted in ``dropped`` by kind.

    Args:
        limits: the GPU's limits.
        enforced_power_watts: its enforced power limit this reading (used when ``limits`` has none).
        dropped: where dropped readings are counted.
    """

    def __init__(self, limits: Limits, enforced_power_watts: float | None, dropped: Counter[str]) -> None:
        self.limits = limits
        self.enforced_power_watts = enforced_power_watts
        self.dropped = dropped

    def _keep(self, value: float | None, bound: float, kind: str) -> float | None:
        if value is not None and value > bound:
            self.dropped[kind] += 1
            return None
        return value

    def power(self, watts: float | None) -> float | None:
        """Power drawn, in W."""
        limit = max(filter(None, (self.limits.power_watts, self.enforced_power_watts)), default=None)
        return self._keep(watts, limit * POWER_LIMIT_FACTOR if limit else MAX_POWER_WATTS, "power")

    def clock(self, hertz: float | None, maximum: float | None, kind: str) -> float | None:
        """A clock in Hz against the board's ``maximum`` (``kind``: ``sm_clock`` or ``memory_clock``)."""
        return self._keep(hertz, maximum * CLOCK_FACTOR if maximum else MAX_CLOCK_HERTZ, kind)

    def pcie(self, bytes_per_second: float | None, kind: str) -> float | None:
        """A one-way PCIe throughput in B/s (``kind``: ``pcie_rx`` or ``pcie_tx``)."""
        link = self.limits.pcie_bytes_per_second or DEFAULT_PCIE_BYTES
        return self._keep(bytes_per_second, link * PCIE_FACTOR, kind)

    def memory(self, used: int | None, total: int | None, kind: str) -> int | None:
        """Bytes of device memory against the bytes installed (``kind``: ``memory_used``, ``memory_reserved``)."""
        if used is None or total is None:
            return used
        kept = self._keep(used, total, kind)
        return None if kept is None else int(kept)

    def ecc(self, count: int | None, kind: str) -> int | None:
        """An ECC error count (``kind``: ``ecc_corrected`` or ``ecc_uncorrected``)."""
        kept = self._keep(count, MAX_ECC_COUNT, kind)
        return None if kept is None else int(kept)

    def reasons(self, bits: int | None) -> int | None:
        """A clock event reason word: dropped when it sets bits NVML does not define."""
        if bits is not None and bits & ~KNOWN_REASON_BITS:
            self.dropped["clock_event_reasons"] += 1
            return None
        return bits
