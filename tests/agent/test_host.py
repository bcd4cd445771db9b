"""Host figures read from a procfs root given as an argument (no global state), with psutil's
arithmetic: exact values from a fixture procfs, and psutil's own figures on this machine's /proc."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from observe.agent.host import HostCollector

STAT = """cpu  100 0 100 700 100 0 0 0 0 0
cpu0 50 0 50 350 50 0 0 0 0 0
cpu1 50 0 50 350 50 0 0 0 0 0
intr 1 2 3
btime 1700000000
"""
STAT_LATER = """cpu  200 0 200 800 200 0 0 0 0 0
cpu0 150 0 150 350 50 0 0 0 0 0
cpu1 50 0 50 450 150 0 0 0 0 0
btime 1700000000
"""
MEMINFO = """MemTotal:       16000000 kB
MemFree:         4000000 kB
MemAvailable:    9000000 kB
Buffers:          500000 kB
Cached:          3000000 kB
SReclaimable:     500000 kB
SwapTotal:       2000000 kB
SwapFree:        1500000 kB
"""


def fixture_procfs(root: Path) -> Path:
    root.mkdir()
    (root / "stat").write_text(STAT)
    (root / "meminfo").write_text(MEMINFO)
    (root / "loadavg").write_text("0.50 1.25 2.00 3/400 12345\n")
    return root


def test_a_fixture_procfs_gives_exact_figures_and_leaves_psutil_alone(tmp_path: Path) -> None:
    before = psutil.PROCFS_PATH
    host = HostCollector(str(fixture_procfs(tmp_path / "proc")))
    assert psutil.PROCFS_PATH == before  # nothing global is set
    assert (host.cpu_count(), host.boot_time, host.load()) == (2, 1_700_000_000.0, (0.5, 1.25, 2.0))
    assert host.uptime_seconds(1_700_000_100.0) == 100.0
    first = host.cpu()
    assert first.busy_ratio is None and first.core_busy_ratios == ()
    (tmp_path / "proc" / "stat").write_text(STAT_LATER)
    later = host.cpu()
    assert later.busy_ratio == pytest.approx(1 - 200 / 400)  # +400 ticks, +100 idle +100 iowait
    assert later.core_busy_ratios == pytest.approx((1.0, 0.0))
    memory = host.memory()
    kib = 1024
    assert memory.total_bytes == 16_000_000 * kib and memory.available_bytes == 9_000_000 * kib
    assert memory.cached_bytes == 3_500_000 * kib and memory.buffers_bytes == 500_000 * kib
    assert memory.used_bytes == (16_000_000 - 9_000_000) * kib  # total - available
    assert (memory.swap_total_bytes, memory.swap_used_bytes) == (2_000_000 * kib, 500_000 * kib)


def test_two_roots_in_one_process(tmp_path: Path) -> None:
    fixture = HostCollector(str(fixture_procfs(tmp_path / "proc")))
    real = HostCollector("/proc")
    assert fixture.memory().total_bytes == 16_000_000 * 1024
    assert real.memory().total_bytes == psutil.virtual_memory().total


def test_this_machine_matches_psutil() -> None:
    host = HostCollector("/proc")
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    memory = host.memory()
    assert memory.total_bytes == vm.total and memory.swap_total_bytes == swap.total
    slack = 64 * 2**20  # the two reads are moments apart on a busy machine
    assert abs(memory.buffers_bytes - vm.buffers) < slack and abs(memory.cached_bytes - vm.cached) < slack
    assert abs(memory.used_bytes - vm.used) < 2 * slack
    assert host.cpu_count() == psutil.cpu_count() == os.cpu_count()
    assert host.boot_time == pytest.approx(psutil.boot_time(), abs=1)


def test_a_missing_procfs_is_an_error_at_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        HostCollector(str(tmp_path / "nothing"))
