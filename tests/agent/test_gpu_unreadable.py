"""A GPU that answers nothing is a fault, not a healthy GPU without figures: every call failing with
an error other than lost, a handle NVML refuses, a GPU gone from NVML's device count.

The GPUs are the stand-in NVML library (tests/support/fake_nvml.c, loaded by the real pynvml):
``status@N unknown`` makes every call for GPU N answer NVML_ERROR_UNKNOWN (what ``nvidia-smi``
shows as "Unknown Error" on a failing board), ``handle@N`` fails its handle, ``gpus N`` changes
the device count between collections.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.nvml import running_sampler, series, value
from tests.support.processes import wait_for


def test_a_gpu_whose_every_call_fails_is_unreadable_with_its_reason(
    fake_nvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: shown fresh and healthy (age 0, not stale, not lost) with every figure absent."""
    with running_sampler(tmp_path) as sampler, caplog.at_level(logging.WARNING):
        first = sampler.sample()
        fake_nvml.set("status@1 unknown")
        bad = [sampler.sample() for _ in range(3)]
        fake_nvml.set("")
        back = sampler.sample()
    assert first.gpus[1].temperature_celsius == 45 and first.gpus[1].unreadable is None
    for snap in bad:
        gpu = snap.gpus[1]
        assert (gpu.unreadable, gpu.lost, gpu.stale, gpu.temperature_celsius) == ("nvml_unknown", False, False, None)
        assert gpu.reading_age_seconds > 0 and gpu.uuid == first.gpus[1].uuid
        assert [g.temperature_celsius for g in snap.gpus if g.index != 1] == [45, 45, 45]
        parsed = series(snap)
        assert value(parsed, "fsdp_gpu_unreadable", gpu="1") == 1
        assert value(parsed, "fsdp_gpu_unreadable", gpu="0") == 0
        assert value(parsed, "fsdp_gpu_reading_age_seconds", gpu="1") > 0
    assert bad[-1].gpus[2].reading_age_seconds == 0
    assert back.gpus[1].unreadable is None and back.gpus[1].temperature_celsius == 45
    assert value(series(back), "fsdp_gpu_unreadable", gpu="1") == 0
    assert sum("answers no NVML reading (nvml_unknown)" in r.getMessage() for r in caplog.records) == 1


def test_a_gpu_with_one_failing_field_is_not_unreadable(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("power@2 unknown")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert snap.gpus[2].unreadable is None and snap.gpus[2].power_watts is None
    assert snap.gpus[2].temperature_celsius == 45


def test_a_gpu_whose_every_figure_is_not_supported_is_not_unreadable(fake_nvml, tmp_path: Path) -> None:
    """NOT_SUPPORTED is not an error: a GPU that supports nothing is not a failing one."""
    fake_nvml.set("status@3 ns")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert snap.gpus[3].unreadable is None and not snap.agent.errors


def test_a_gpu_whose_handle_fails_at_start_is_kept_unreadable_and_asked_again(fake_nvml, tmp_path: Path) -> None:
    """Before: GPU 5 of 8 vanished from /snapshot and /metrics for good (fsdp_node_gpus 7)."""
    fake_nvml.set("gpus 8\nhandle@5 unknown")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
        fake_nvml.set("gpus 8")
        later = wait_for(
            lambda: (s := sampler.sample()) and s.gpus[5].temperature_celsius == 45 and s, what="GPU 5 read"
        )
    assert [g.index for g in snap.gpus] == list(range(8))
    assert snap.gpus[5].unreadable == "nvml_unknown" and snap.gpus[5].uuid is None
    parsed = series(snap)
    assert value(parsed, "fsdp_node_gpus") == 8 and value(parsed, "fsdp_gpu_unreadable", gpu="5") == 1
    assert later.gpus[5].uuid == "GPU-fa4e0000-0000-4000-8000-000000000005" and later.gpus[5].pci_bus == "0000:60:00"


def test_gpus_gone_from_the_device_count_are_unreadable_and_new_ones_are_read(fake_nvml, tmp_path: Path) -> None:
    """Before: 4 -> 2 showed GPUs 2 and 3 fresh with null figures; 2 -> 6 never showed GPUs 4 and 5."""
    with running_sampler(tmp_path) as sampler:
        sampler.sample()
        fake_nvml.set("gpus 2")
        first = sampler.sample()  # GPUs 2 and 3 answer INVALID_ARGUMENT before the new count is read
        fewer = wait_for(
            lambda: (s := sampler.sample()) and "device count" in (s.gpus[3].unreadable or "") and s,
            what="GPU 3 missed",
        )
        fake_nvml.set("gpus 6")
        more = wait_for(
            lambda: (s := sampler.sample()) and len(s.gpus) == 6 and s.gpus[5].temperature_celsius and s,
            what="GPUs 4 and 5 read",
        )
    assert [g.unreadable for g in first.gpus] in (
        [None, None, "nvml_invalid_argument", "nvml_invalid_argument"],
        [None, None, "not in NVML's device count (2 GPUs now)", "not in NVML's device count (2 GPUs now)"],
    )
    assert [g.index for g in fewer.gpus] == [0, 1, 2, 3]
    for gpu in fewer.gpus[2:]:
        assert gpu.unreadable.startswith("not in NVML's device count") and gpu.temperature_celsius is None
        assert value(series(fewer), "fsdp_gpu_unreadable", gpu=str(gpu.index)) == 1
    assert [g.temperature_celsius for g in more.gpus] == [45] * 6
    assert [g.unreadable for g in more.gpus] == [None] * 6
    assert more.gpus[5].uuid == "GPU-fa4e0000-0000-4000-8000-000000000005"


def test_a_device_count_that_fails_at_start_is_read_again(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("count_status unknown")
    with running_sampler(tmp_path) as sampler:
        assert sampler.sample().gpus == ()
        fake_nvml.set("")
        snap = wait_for(lambda: (s := sampler.sample()) and len(s.gpus) == 4 and s.gpus[3].uuid and s, what="4 GPUs")
    assert [g.temperature_celsius for g in snap.gpus] == [45] * 4
