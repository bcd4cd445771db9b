"""Every row of tests/cases/nvml-scenarios.md as a test.

The GPUs here are a stand-in: a fake ``libnvidia-ml.so.1`` compiled from tests/support/fake_nvml.c
and loaded by the real pynvml, so the agent's own NVML path (wrapper, collector, sampler,
exposition) runs unchanged. Rows 3, 9 and 10 also run against a real agent process in
tests/e2e/test_agent_process.py.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from observe.agent.sampler import in_host_pid_namespace, read_pid_max
from observe.model import NodeSnapshot
from tests.support.cases import CASES
from tests.support.nvml import names_for_gpu, running_sampler, series, value
from tests.support.processes import REPO

#: Scenario row -> the test that covers it here.
SCENARIO_TESTS = {
    1: "test_1_fan_not_supported_leaves_only_the_fan_out",
    2: "test_2_memory_not_supported_means_absent_totals_and_no_ratio",
    3: "test_3_a_lost_gpu_is_marked_lost_and_the_others_go_on",
    4: "test_4_implausible_process_rows_are_dropped_and_counted",
    5: "test_5_implausible_or_stale_utilisation_samples_are_dropped",
    6: "test_6_implausible_readings_are_dropped_not_repeated",
    7: "test_7_mig_shows_na_utilisation_and_lists_instances",
    8: "test_8_gpu_process_outside_the_pid_namespace_is_kept",
    9: "test_9_no_driver_means_host_data_only",
    10: "test_10_a_missing_function_is_logged_once_and_stays_absent",
}


def test_every_scenario_row_has_a_test() -> None:
    rows = re.findall(r"^\|\s*(\d+)\s*\|", (CASES / "nvml-scenarios.md").read_text(), flags=re.M)
    assert sorted(map(int, rows)) == sorted(SCENARIO_TESTS)
    assert all(name in globals() for name in SCENARIO_TESTS.values())


def test_healthy_gpus_export_every_field(fake_nvml, tmp_path: Path) -> None:
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert [g.index for g in snap.gpus] == [0, 1, 2, 3]
    g = snap.gpus[0]
    assert (g.uuid, g.pci_bus, g.driver_version) == (
        "GPU-fa4e0000-0000-4000-8000-000000000000",
        "0000:10:00",
        "550.54.15-fake",
    )
    assert (g.utilization_ratio, g.memory_utilization_ratio, g.temperature_celsius) == (0.75, 0.30, 45)
    assert (g.memory_total_bytes, g.memory_used_bytes, g.memory_reserved_bytes) == (80 << 30, 10 << 30, 512 << 20)
    assert (g.power_watts, g.power_limit_watts, g.sm_clock_hertz, g.memory_clock_hertz) == (350, 700, 1.98e9, 2.619e9)
    assert (g.fan_speed_ratio, g.pcie_rx_bytes_per_second, g.pcie_tx_bytes_per_second) == (0.4, 1024_000, 2048_000)
    assert (g.encoder_utilization_ratio, g.decoder_utilization_ratio) == (0.0, 0.05)
    assert (g.ecc_corrected_total, g.ecc_uncorrected_total) == (2, 0)
    assert g.throttle_reasons == ("sw_power_cap",) and g.mig_enabled is False and not g.lost
    parsed = series(snap)
    labels = {"node": "gpu-node", "gpu": "0", "gpu_uuid": g.uuid}
    assert value(parsed, "fsdp_gpu_temperature_celsius", **labels) == 45
    assert value(parsed, "fsdp_gpu_clock_throttle_reason", reason="sw_power_cap", **labels) == 1
    assert value(parsed, "fsdp_gpu_clock_throttle_reason", reason="hw_slowdown", **labels) == 0
    assert value(parsed, "fsdp_gpu_ecc_errors_total", type="corrected", **labels) == 2
    assert value(parsed, "fsdp_node_gpus") == 4


def test_1_fan_not_supported_leaves_only_the_fan_out(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("fan@1 ns")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert snap.gpus[1].fan_speed_ratio is None and snap.gpus[0].fan_speed_ratio == 0.4
    parsed = series(snap)
    assert names_for_gpu(parsed, 1) == names_for_gpu(parsed, 0) - {"fsdp_gpu_fan_speed_ratio"}
    assert not snap.agent.errors  # NOT_SUPPORTED is not an error


def test_2_memory_not_supported_means_absent_totals_and_no_ratio(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("memory@0 ns\nproc 0 4242 1073741824")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    g = snap.gpus[0]
    assert (g.memory_total_bytes, g.memory_used_bytes, g.memory_reserved_bytes) == (None, None, None)
    parsed = series(snap)
    for name in ("fsdp_gpu_memory_total_bytes", "fsdp_gpu_memory_used_bytes", "fsdp_gpu_memory_reserved_bytes"):
        assert value(parsed, name, gpu="0") is None
    assert [(p.pid, p.used_memory_bytes) for p in snap.gpu_processes] == [(4242, 1 << 30)]
    assert value(parsed, "fsdp_gpu_process_memory_bytes", gpu="0", pid="4242") == 1 << 30


def test_3_a_lost_gpu_is_marked_lost_and_the_others_go_on(
    fake_nvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with running_sampler(tmp_path) as sampler, caplog.at_level(logging.WARNING):
        first = sampler.sample()
        fake_nvml.set("lost@3 1")
        snaps = [sampler.sample() for _ in range(5)]
    assert not first.gpus[3].lost and first.gpus[3].temperature_celsius == 45
    for snap in snaps:
        lost = snap.gpus[3]
        assert lost.lost and lost.uuid == first.gpus[3].uuid and lost.temperature_celsius is None
        assert [g.temperature_celsius for g in snap.gpus[:3]] == [45, 45, 45]
        parsed = series(snap)
        assert value(parsed, "fsdp_gpu_lost", gpu="3") == 1 and value(parsed, "fsdp_gpu_lost", gpu="0") == 0
        assert names_for_gpu(parsed, 3) == {
            "fsdp_gpu_info",
            "fsdp_gpu_lost",
            "fsdp_gpu_reading_stale",
            "fsdp_gpu_unreadable",
            "fsdp_gpu_reading_age_seconds",
        }
        assert value(parsed, "fsdp_gpu_reading_stale", gpu="3") == 0 and lost.reading_age_seconds > 0
    assert len([r for r in caplog.records if "is lost" in r.getMessage()]) == 1  # once, not once per cycle


def test_4_implausible_process_rows_are_dropped_and_counted(fake_nvml, tmp_path: Path) -> None:
    too_big_pid = read_pid_max("/proc") + 1
    fake_nvml.set(f"proc 0 {too_big_pid} 1048576\nproc 0 4243 {200 << 30}\nproc 0 4244 2097152")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert [(p.pid, p.used_memory_bytes) for p in snap.gpu_processes] == [(4244, 2 << 20)]
    assert snap.agent.dropped == {"process_memory": 1, "process_pid": 1}
    parsed = series(snap)
    assert value(parsed, "fsdp_node_agent_dropped_readings_total", kind="process_pid") == 1


def test_5_implausible_or_stale_utilisation_samples_are_dropped(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("proc 0 4245 1048576\nproc 0 4246 1048576\nsample 0 4245 1000 40 10\nsample 0 4246 1000 101 10")
    with running_sampler(tmp_path) as sampler:
        first = sampler.sample()
        fake_nvml.set(
            "proc 0 4245 1048576\nproc 0 4246 1048576\nsample 0 4245 900 50 10\nsample 0 4246 2000 255 10"
        )  # older than read; > 100 %
        second = sampler.sample()
    assert {p.pid: p.sm_utilization_ratio for p in first.gpu_processes} == {4245: 0.4, 4246: None}
    assert {p.pid: p.sm_utilization_ratio for p in second.gpu_processes} == {4245: None, 4246: None}
    assert second.agent.dropped == {"process_sample_stale": 1, "process_sm_utilization": 2}


def test_6_implausible_readings_are_dropped_not_repeated(fake_nvml, tmp_path: Path) -> None:
    with running_sampler(tmp_path) as sampler:
        good = sampler.sample()
        fake_nvml.set("temp@0 4278190080\ntemp@1 151\nutil_gpu@2 130")
        bad = sampler.sample()
        fake_nvml.set("")
        again = sampler.sample()
    assert [g.temperature_celsius for g in good.gpus] == [45, 45, 45, 45]
    assert [g.temperature_celsius for g in bad.gpus] == [None, None, 45, 45]
    assert bad.gpus[2].utilization_ratio is None and bad.gpus[2].memory_utilization_ratio == 0.3
    assert bad.agent.dropped == {"temperature": 2, "utilization": 1}
    parsed = series(bad)
    assert value(parsed, "fsdp_gpu_temperature_celsius", gpu="0") is None
    assert value(parsed, "fsdp_gpu_utilization_ratio", gpu="2") is None
    assert value(parsed, "fsdp_node_agent_dropped_readings_total", kind="temperature") == 2
    assert again.gpus[0].temperature_celsius == 45


def test_7_mig_shows_na_utilisation_and_lists_instances(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("mig@0 1")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    g = snap.gpus[0]
    assert g.mig_enabled is True and g.utilization_ratio is None  # N/A (MIG), not 0
    assert [(m.index, m.gpu_instance_id, m.memory_total_bytes, m.memory_used_bytes) for m in g.mig_instances] == [
        (0, 1, 40 << 30, 1 << 30),
        (1, 2, 40 << 30, 2 << 30),
    ]
    assert g.mig_instances[0].uuid == "MIG-fa4e0000-0000-4000-8000-000000000000"
    parsed = series(snap)
    assert value(parsed, "fsdp_gpu_utilization_ratio", gpu="0") is None
    assert value(parsed, "fsdp_gpu_mig_mode", gpu="0") == 1 and value(parsed, "fsdp_gpu_mig_mode", gpu="1") == 0
    assert value(parsed, "fsdp_gpu_mig_memory_used_bytes", gpu="0", gpu_instance="2") == 2 << 30
    assert not snap.agent.errors


#: A sampler in a PID namespace of its own (``unshare``: a new user and PID namespace with its own
#: /proc), printing one snapshot as JSON: the agent of a pod without ``hostPID``.
IN_OWN_PID_NAMESPACE = """
import sys
from observe.agent.sampler import Sampler, Settings
sampler = Sampler(Settings(node="gpu-node", kmsg=sys.argv[1]))
sampler.start()
print(sampler.sample().to_json())
sampler.stop()
"""


def test_8_gpu_process_outside_the_pid_namespace_is_kept(fake_nvml, tmp_path: Path, sleepers) -> None:
    """The agent runs in a PID namespace of its own (a real one, made by unshare) and NVML names
    a process of the host's: a sleeper started here, which that namespace cannot see."""
    unshare = shutil.which("unshare")
    assert unshare, "this test needs util-linux's unshare"
    elsewhere = sleepers(["python", "train.py"])
    fake_nvml.set(f"proc 0 {elsewhere.pid} {3 << 30}\nproc 1 1 {1 << 30}")  # pid 1: the agent itself, in there
    out = subprocess.run(
        [unshare, "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]
        + [sys.executable, "-c", IN_OWN_PID_NAMESPACE, str(tmp_path / "no-kmsg")],
        env=fake_nvml.env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    snap = NodeSnapshot.from_json(out.stdout)
    rows = {p.pid: p for p in snap.gpu_processes}
    outside = rows[elsewhere.pid]
    assert (outside.used_memory_bytes, outside.user, outside.command, outside.in_host_pid_namespace) == (
        3 << 30,
        None,
        None,
        False,
    )
    assert not outside.exited
    inside = rows[1]
    assert inside.in_host_pid_namespace and inside.user is not None and "python" in (inside.command or "")
    assert any("host PID namespace" in n and str(elsewhere.pid) in n for n in snap.agent.notices)


def test_8b_an_exited_gpu_process_is_not_taken_for_another_namespace(fake_nvml, tmp_path: Path, sleepers) -> None:
    """The agent sees the host PID namespace (this test's own); NVML still lists a process that has
    exited (it does while its memory is released). Before: a notice advised hostPID."""
    assert in_host_pid_namespace("/proc"), "this test runs in the node's first PID namespace"
    here = sleepers(["python", "train.py", "--hf_token", "hf_x"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    fake_nvml.set(f"proc 0 {gone.pid} {3 << 30}\nproc 1 {here.pid} {1 << 30}")
    with running_sampler(tmp_path, max_processes=1) as sampler:
        snap = sampler.sample()
    rows = {p.pid: p for p in snap.gpu_processes}
    exited = rows[gone.pid]
    assert (exited.used_memory_bytes, exited.user, exited.exited, exited.in_host_pid_namespace) == (
        3 << 30,
        None,
        True,
        True,
    )
    inside = rows[here.pid]
    assert inside.in_host_pid_namespace and not inside.exited and inside.user is not None
    assert inside.command == "python train.py --hf_token <redacted>"
    assert here.pid in {p.pid for p in snap.processes}  # GPU processes are always listed
    assert not any("host PID namespace" in n for n in snap.agent.notices)


def test_9_no_driver_means_host_data_only(fake_nvml, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake_nvml.set("init driver_not_loaded")
    with caplog.at_level(logging.WARNING), running_sampler(tmp_path) as sampler:
        snaps = [sampler.sample() for _ in range(3)]
    snap = snaps[-1]
    assert snap.gpus == () and snap.host.processes > 0
    assert any("no GPUs" in n for n in snap.agent.notices) and snap.agent.sources["nvml"] != "ok"
    parsed = series(snap)
    assert not [name for name, _ in parsed if name.startswith("fsdp_gpu_")]
    assert value(parsed, "fsdp_node_gpus") is None
    assert value(parsed, "fsdp_node_agent_source_up", source="nvml") == 0
    assert len([r for r in caplog.records if "no GPUs" in r.getMessage()]) == 1


def test_10_a_missing_function_is_logged_once_and_stays_absent(
    fake_nvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # In this process the stand-in answers FUNCTION_NOT_FOUND; the e2e test runs a library built
    # without the symbols, as an old driver ships it.
    fake_nvml.set("fan nf")
    with caplog.at_level(logging.WARNING), running_sampler(tmp_path) as sampler:
        snaps = [sampler.sample() for _ in range(3)]
        assert "nvmlDeviceGetFanSpeed" in sampler.nvml.missing
    assert all(g.fan_speed_ratio is None and g.temperature_celsius == 45 for s in snaps for g in s.gpus)
    assert len([r for r in caplog.records if "nvmlDeviceGetFanSpeed" in r.getMessage()]) == 1


def test_other_nvml_errors_are_counted_by_kind(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("power@2 unknown\npower@3 noperm")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert snap.gpus[2].power_watts is None and snap.gpus[1].power_watts == 350
    assert snap.agent.errors == {"nvml_no_permission": 1, "nvml_unknown": 1}


def test_nvml_xid_events_are_counted_when_the_kernel_log_is_unreadable(fake_nvml, tmp_path: Path) -> None:
    fake_nvml.set("xid 1 48\nxid 1 48\nxid 2 13")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    counts = {(x.gpu, x.xid): (x.count, x.severity, x.gpu_uuid) for x in snap.xid_counts}
    assert counts == {(1, 48): (2, "gpu_reset", snap.gpus[1].uuid), (2, 13): (1, "application", snap.gpus[2].uuid)}
    assert {e.source for e in snap.xid_events} == {"nvml"}
    assert "XIDs from NVML events" in snap.agent.sources["kernel_log"]
