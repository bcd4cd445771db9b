"""Readings outside the device's own limits (as NVML reports them) are not readings: dropped for that
collection and counted by kind, never exported as measured, never replaced by the previous value.

The GPUs are the stand-in NVML library (tests/support/fake_nvml.c, loaded by the real pynvml), with
an H100 SXM's limits by default: 700 W most, 1,980 MHz SM, 2,619 MHz memory, PCIe Gen5 x16.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.agent.plausible import PCIE_LANE_BYTES, Checks, Limits
from tests.support.nvml import running_sampler, series, value

#: The review's "absurd" GPU 0: all-ones words and more memory used than installed.
ABSURD = (
    "power@0 4294967295\nsm_clock@0 4294967295\nmem_clock@0 4294967295\nmem_used@0 214748364800\n"
    "ecc_corrected@0 18446744073709551615\necc_uncorrected@0 18446744073709551615\npcie_rx@0 4294967295\n"
    "pcie_tx@0 4294967295\nreasons@0 0xFFFFFFFFFFFFFFFF"
)


def test_impossible_readings_are_dropped_and_counted_and_the_next_good_ones_are_read(fake_nvml, tmp_path: Path) -> None:
    """Before: 4.29 MW, 4.29 PHz, 1.8e19 uncorrectable ECC errors and all nine reasons exported as measured."""
    with running_sampler(tmp_path) as sampler:
        fake_nvml.set(ABSURD)
        bad = sampler.sample()
        fake_nvml.set("")
        good = sampler.sample()
    g = bad.gpus[0]
    assert (g.power_watts, g.sm_clock_hertz, g.memory_clock_hertz, g.memory_used_bytes) == (None, None, None, None)
    assert (g.ecc_corrected_total, g.ecc_uncorrected_total, g.throttle_reasons) == (None, None, None)
    assert (g.pcie_rx_bytes_per_second, g.pcie_tx_bytes_per_second) == (None, None)
    assert g.temperature_celsius == 45 and g.memory_total_bytes == 80 << 30 and g.unreadable is None
    assert bad.agent.dropped == {
        "power": 1,
        "sm_clock": 1,
        "memory_clock": 1,
        "memory_used": 1,
        "ecc_corrected": 1,
        "ecc_uncorrected": 1,
        "pcie_rx": 1,
        "pcie_tx": 1,
        "clock_event_reasons": 1,
    }
    parsed = series(bad)
    for name in ("fsdp_gpu_power_watts", "fsdp_gpu_sm_clock_hertz", "fsdp_gpu_memory_used_bytes"):
        assert value(parsed, name, gpu="0") is None and value(parsed, name, gpu="1") is not None
    assert value(parsed, "fsdp_gpu_ecc_errors_total", gpu="0", type="uncorrected") is None
    assert value(parsed, "fsdp_gpu_clock_throttle_reason", gpu="0", reason="gpu_idle") is None
    assert value(parsed, "fsdp_node_agent_dropped_readings_total", kind="power") == 1
    assert (good.gpus[0].power_watts, good.gpus[0].sm_clock_hertz) == (350, 1.98e9)


def test_the_bounds_are_the_devices_own(fake_nvml, tmp_path: Path) -> None:
    """A 300 W board (limit constraint) reading 700 W is impossible; the same reading on a 700 W board is not."""
    fake_nvml.set(
        "power_max@1 300000\npower_limit@1 300000\npower 700000\nsm_clock_max@1 1410\nsm_clock 1700\n"
        "pcie_gen@1 3\npcie_width@1 8\npcie_rx 20000000"
    )
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    small, big = snap.gpus[1], snap.gpus[0]
    assert (big.power_watts, big.sm_clock_hertz, big.pcie_rx_bytes_per_second) == (700, 1.7e9, 20_000_000 * 1024)
    assert (small.power_watts, small.sm_clock_hertz) == (None, None)
    assert small.pcie_rx_bytes_per_second is None  # 20 GB/s over a Gen3 x8 link (7.9 GB/s one way)
    assert snap.agent.dropped == {"power": 1, "sm_clock": 1, "pcie_rx": 1}


@pytest.mark.parametrize(
    ("limits", "enforced", "watts", "kept"),
    [
        (Limits(power_watts=700), None, 1399.0, True),
        (Limits(power_watts=700), None, 1401.0, False),
        (Limits(), 400.0, 801.0, False),
        (Limits(), None, 4999.0, True),  # no limit known: only the absolute bound
        (Limits(), None, 4_294_967.295, False),
    ],
)
def test_power_bound(limits: Limits, enforced: float | None, watts: float, kept: bool) -> None:
    from collections import Counter

    dropped: Counter[str] = Counter()
    assert (Checks(limits, enforced, dropped).power(watts) is not None) is kept
    assert dropped == ({} if kept else {"power": 1})


def test_pcie_lane_rates_double_from_gen3() -> None:
    assert [round(PCIE_LANE_BYTES[g + 1] / PCIE_LANE_BYTES[g], 2) for g in (3, 4, 5)] == [2.0, 2.0, 2.0]
