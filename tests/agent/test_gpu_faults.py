"""GPU faults shown for what they are: one GPU's NVML call that hangs, a GPU lost before
its first reading, a GPU that comes back after a reset. The GPU is the stand-in NVML library
(tests/support/fake_nvml.c, loaded by the real pynvml): ``sleep@N MS`` makes every call for GPU N
sleep, as a hung driver call does; ``lost@N 1`` answers GPU_IS_LOST."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from observe.agent import gpu as gpu_module
from observe.agent.gpu import GpuCollector, Nvml
from tests.support.nvml import running_sampler, series, value
from tests.support.processes import wait_for


@pytest.mark.serial("a collection must finish within 1.5 s beside a hung call")
def test_a_hung_call_on_one_gpu_marks_it_stale_and_the_others_keep_updating(fake_nvml, tmp_path: Path) -> None:
    with running_sampler(tmp_path, nvml_timeout_seconds=0.3) as sampler:
        first = sampler.sample()
        assert [g.temperature_celsius for g in first.gpus] == [45, 45, 45, 45]
        fake_nvml.set("sleep@2 3000\ntemp 50")
        started = time.monotonic()
        late = sampler.sample()
        took = time.monotonic() - started
        fake_nvml.set("sleep@2 3000\ntemp 55")
        later = sampler.sample()  # GPU 2's first call is still asleep: it is not asked again
    assert took < 1.5, f"a collection waited {took:.1f} s on one hung GPU"
    for snap, temp in ((late, 50), (later, 55)):
        stale = snap.gpus[2]
        assert stale.stale and not stale.lost and stale.temperature_celsius is None and stale.uuid == first.gpus[2].uuid
        assert [g.temperature_celsius for i, g in enumerate(snap.gpus) if i != 2] == [temp] * 3
        assert not any(p.gpu == 2 for p in snap.gpu_processes)
        parsed = series(snap)
        assert value(parsed, "fsdp_gpu_reading_stale", gpu="2") == 1
        assert value(parsed, "fsdp_gpu_reading_stale", gpu="0") == 0
        assert value(parsed, "fsdp_gpu_temperature_celsius", gpu="2") is None  # never the old value as fresh
        assert value(parsed, "fsdp_gpu_temperature_celsius", gpu="1") == temp
    assert 0 < late.gpus[2].reading_age_seconds < later.gpus[2].reading_age_seconds
    assert value(series(later), "fsdp_gpu_reading_age_seconds", gpu="0") == 0


def test_a_stale_gpu_is_read_again_once_its_call_returns(
    fake_nvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_sampler(tmp_path, nvml_timeout_seconds=0.2) as sampler, caplog.at_level(logging.WARNING):
        sampler.sample()
        fake_nvml.set("sleep@1 1500")
        assert sampler.sample().gpus[1].stale
        fake_nvml.set("temp 61")  # the driver answers again; the sleeping call finishes within 1.5 s
        snap = wait_for(
            lambda: (s := sampler.sample()) and not s.gpus[1].stale and s, timeout=10, what="GPU 1 read again"
        )
        assert snap.gpus[1].temperature_celsius == 61 and snap.gpus[1].reading_age_seconds == 0
        assert sum("did not finish within" in r.getMessage() for r in caplog.records) == 1


def test_a_gpu_lost_before_its_first_reading_still_shows_its_pci_bus(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("lost@3 1\npci_when_lost@3 1")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    lost = snap.gpus[3]
    assert lost.lost and lost.uuid is None and lost.pci_bus == "0000:40:00"
    assert value(series(snap), "fsdp_gpu_lost", gpu="3") == 1
    assert [g.pci_bus for g in snap.gpus[:3]] == ["0000:10:00", "0000:20:00", "0000:30:00"]


def test_when_nvml_cannot_say_the_bus_the_drivers_proc_entry_does(fake_nvml, tmp_path: Path) -> None:
    """Every call for GPU 3 lost, its PCI info too: the bus comes from /proc/driver/nvidia/gpus,
    the one entry no readable GPU claims (a crafted procfs here)."""
    proc = tmp_path / "proc"
    for bus in ("0000:10:00.0", "0000:20:00.0", "0000:30:00.0", "0000:40:00.0"):
        (proc / "driver" / "nvidia" / "gpus" / bus).mkdir(parents=True)
    fake_nvml.set("lost@3 1")
    collector = GpuCollector(Nvml(), pid_max=4 << 20, proc_root=str(proc))
    assert collector.start(xid_events=False)
    try:
        infos, _ = collector.collect()
    finally:
        collector.stop()
    assert [(g.index, g.lost, g.pci_bus) for g in infos] == [
        (0, False, "0000:10:00"),
        (1, False, "0000:20:00"),
        (2, False, "0000:30:00"),
        (3, True, "0000:40:00"),
    ]


def test_an_xid_for_a_gpu_lost_at_start_is_matched_to_it_by_pci_bus(fake_nvml, tmp_path: Path) -> None:
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text(
        "NVRM: Xid (PCI:0000:40:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )
    fake_nvml.set("lost@3 1\npci_when_lost@3 1")
    with running_sampler(tmp_path, kernel_log=str(kernel_log)) as sampler:
        snap = wait_for(lambda: (s := sampler.sample()).xid_counts and s, what="the XID 79")
    assert [(x.xid, x.gpu, x.pci_bus) for x in snap.xid_counts] == [(79, 3, "0000:40:00")]


def test_a_gpu_back_after_a_reset_is_read_again_without_a_restart(
    fake_nvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(gpu_module, "REPROBE_SECONDS", 0.2)
    with running_sampler(tmp_path) as sampler, caplog.at_level(logging.WARNING):
        assert not sampler.sample().gpus[1].lost
        fake_nvml.set("lost@1 1")
        assert sampler.sample().gpus[1].lost
        time.sleep(0.3)
        assert sampler.sample().gpus[1].lost  # asked again: still lost
        fake_nvml.set("temp 70")  # reset: the GPU answers again
        time.sleep(0.3)
        back = wait_for(
            lambda: (s := sampler.sample()) and not s.gpus[1].lost and s, timeout=5, what="GPU 1 back after the reset"
        )
    gpu = back.gpus[1]
    assert gpu.temperature_celsius == 70 and gpu.uuid == "GPU-fa4e0000-0000-4000-8000-000000000001"
    assert value(series(back), "fsdp_gpu_lost", gpu="1") == 0
    assert sum("answers NVML again" in r.getMessage() for r in caplog.records) == 1
    assert sum("is lost" in r.getMessage() for r in caplog.records) == 1


def test_the_agent_flag_sets_the_deadline_and_refuses_one_beyond_the_interval(capsys) -> None:
    from observe.cli import main
    from observe.cli.agent import build_parser, validate

    ns = build_parser().parse_args(["--interval", "0.2"])
    validate(ns)
    assert ns.nvml_timeout == 0.1
    assert main(["agent", "--nvml-timeout", "2", "--interval", "1"]) == 2
    assert "error: --nvml-timeout: 2 s is out of range" in capsys.readouterr().err
