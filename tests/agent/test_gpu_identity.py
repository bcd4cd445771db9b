"""A GPU's identity follows the board: read again when NVML's signals say it may have changed.

The GPUs are the stand-in NVML library (tests/support/fake_nvml.c, loaded by the real pynvml):
``uuid_gen@N G`` gives GPU N a new UUID (a board swapped, or reset with a new identity), ``lost@N``
answers GPU_IS_LOST, ``pci_when_lost@N`` lets its PCI info answer while lost.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from observe.agent import gpu as gpu_module
from tests.support.nvml import running_sampler, series, value
from tests.support.processes import wait_for

OLD = "GPU-fa4e0000-0000-4000-8000-000000000001"
NEW = "GPU-fa4e0000-0000-4000-8000-000900000001"


def test_a_new_uuid_is_seen_within_the_identity_period_and_the_series_follow_it(
    fake_nvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the start-up UUID stayed on the series for good."""
    monkeypatch.setattr(gpu_module, "IDENTITY_SECONDS", 0.3)
    with running_sampler(tmp_path) as sampler, caplog.at_level(logging.WARNING):
        assert sampler.sample().gpus[1].uuid == OLD
        fake_nvml.set("uuid_gen@1 9")
        snap = wait_for(lambda: (s := sampler.sample()) and s.gpus[1].uuid == NEW and s, timeout=10, what="new UUID")
    assert snap.gpus[0].uuid == "GPU-fa4e0000-0000-4000-8000-000000000000"
    assert value(series(snap), "fsdp_gpu_temperature_celsius", gpu="1", gpu_uuid=NEW) == 45
    assert value(series(snap), "fsdp_gpu_temperature_celsius", gpu_uuid=OLD) is None
    assert sum(f"now answers with UUID {NEW}, not {OLD}" in r.getMessage() for r in caplog.records) == 1


def test_a_gpu_back_from_lost_with_a_new_identity_carries_it(
    fake_nvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The review's second case: lost for a while, then back after a reset with another UUID.
    The identity period is left long: the revival itself reads the identity again."""
    monkeypatch.setattr(gpu_module, "REPROBE_SECONDS", 0.2)
    with running_sampler(tmp_path) as sampler:
        sampler.sample()
        fake_nvml.set("lost@1 1")
        # the next full reading says lost (one under a deadline on a loaded machine may come a sample late)
        wait_for(lambda: sampler.sample().gpus[1].lost, timeout=10, what="GPU 1 lost")
        fake_nvml.set("uuid_gen@1 9")
        time.sleep(0.3)
        back = wait_for(lambda: (s := sampler.sample()) and not s.gpus[1].lost and s, timeout=10, what="GPU 1 back")
    assert back.gpus[1].uuid == NEW


def test_a_gpu_lost_at_start_without_a_bus_gets_one_when_it_answers(
    fake_nvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: its PCI bus stayed null after the revival, so its XIDs (matched by bus) named no GPU."""
    monkeypatch.setattr(gpu_module, "REPROBE_SECONDS", 0.2)
    fake_nvml.set("lost@0 1")  # no pci_when_lost, and no driver /proc entry: nothing says its bus
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    with running_sampler(tmp_path, kernel_log=str(kernel_log), proc_root="/proc") as sampler:
        start = sampler.sample()
        fake_nvml.set("")
        time.sleep(0.3)
        back = wait_for(lambda: (s := sampler.sample()) and not s.gpus[0].lost and s, timeout=10, what="GPU 0 back")
        with open(kernel_log, "a") as f:
            f.write("NVRM: Xid (PCI:0000:10:00): 48, pid=7, name=python, Double Bit ECC Error\n")
        snap = wait_for(lambda: (s := sampler.sample()).xid_counts and s, what="the XID")
    assert start.gpus[0].lost and start.gpus[0].pci_bus is None
    assert back.gpus[0].pci_bus == "0000:10:00" and back.gpus[0].uuid == "GPU-fa4e0000-0000-4000-8000-000000000000"
    assert [(x.xid, x.gpu, x.gpu_uuid) for x in snap.xid_counts] == [(48, 0, back.gpus[0].uuid)]
