"""``benchmarks/gpu_check.py`` without a GPU: its refusal, and the parts that need none.

The script has never run on a GPU (none is available to this project). What runs here: the
one-line refusal on this CPU-only torch; nvidia-smi CSV parsing (the cells nvidia-smi writes:
``[N/A]``, ``[Not Supported]``, ``Active``/``Not Active``, ``Enabled``/``Disabled``); the field
comparison, fed by a real ``fsdp-observe agent`` over the compiled NVML stand-in
(``tests/support/fake_nvml.c``, the one test double: no driver here) against the nvidia-smi
line that the stand-in's GPU would give; and the MFU and device-memory checks against the peak table.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks import gpu_check as g
from observe.ports import free_port
from observe.promtext import parse
from tests.support.benchmark import run_benchmark

#: What ``nvidia-smi --query-gpu=<g.SMI_FIELDS> --format=csv,noheader,nounits`` prints for the stand-in's
#: GPU 0 with its defaults (fake_nvml.c: 80 GiB, 10 GiB used, 512 MiB reserved, 75 % / 30 %, 45 °C,
#: 350 W of 700 W, 1980 / 2619 MHz, fan 40 %, ECC 2 / 0, clock event reason 0x4 = SW power cap).
STANDIN_SMI = (
    "GPU-fa4e0000-0000-4000-8000-000000000000, Fake H100 80GB HBM3 (test stand-in), 00000000:10:00.0, "
    "550.54.15-fake, 81920, 10240, 512, 75, 30, 0, 5, 45, 350.12, 700.00, 1980, 2619, 40, 2, 0, Disabled, "
    "Not Active, Not Active, Active, Not Active, Not Active, Not Active, Not Active, Not Active, Not Active\n"
)


@pytest.mark.e2e  # runs the benchmark script (torch imported in a child process)
def test_without_cuda_it_refuses_in_one_line(subprocess_env) -> None:
    proc = run_benchmark("gpu_check", env=subprocess_env, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: gpu_check: torch ") and "CPU-only build" in line and "Traceback" not in line
    assert (g.cuda_problem(lambda: False) or "").startswith("torch.cuda.is_available() is False")
    assert g.cuda_problem(lambda: True) is None


def test_the_docstring_says_it_has_not_run_on_a_gpu() -> None:
    assert "This script has not run on a GPU" in (g.__doc__ or "")


def test_nvidia_smi_cells_parse_as_nvidia_smi_writes_them() -> None:
    fields = [
        "name",
        "fan.speed",
        "power.draw",
        "mig.mode.current",
        "clocks_throttle_reasons.sw_power_cap",
        "utilization.encoder",
    ]
    rows = g.parse_smi_csv(
        "NVIDIA H100 80GB HBM3, [N/A], 72.45, [N/A], Not Active, [Not Supported]\n"
        "NVIDIA H200, 30, 650.00, Enabled, Active, 0\n\n",
        fields,
    )
    assert rows == [
        {
            "name": "NVIDIA H100 80GB HBM3",
            "fan.speed": None,
            "power.draw": 72.45,
            "mig.mode.current": None,
            "clocks_throttle_reasons.sw_power_cap": 0.0,
            "utilization.encoder": None,
        },
        {
            "name": "NVIDIA H200",
            "fan.speed": 30.0,
            "power.draw": 650.0,
            "mig.mode.current": 1.0,
            "clocks_throttle_reasons.sw_power_cap": 1.0,
            "utilization.encoder": 0.0,
        },
    ]
    with pytest.raises(g.CheckError, match="line 1 has 2 columns for 6 fields"):
        g.parse_smi_csv("a, b\n", fields)


@pytest.fixture
def standin_agent(native, tmp_path: Path, subprocess_env):
    """A real agent over the NVML stand-in (one GPU); yields its /metrics text."""
    from tests.support.fake_nvml import FakeNvml

    fake = FakeNvml(native.fake_nvml, tmp_path / "nvml.conf")
    fake.set("gpus 1")
    port = free_port()
    agent = subprocess.Popen(
        [sys.executable, "-m", "observe.cli", "agent", "--port", str(port), "--interval", "0.5"],
        env=fake.env(subprocess_env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        g.wait_for(f"http://127.0.0.1:{port}/healthz", 60)
        deadline = time.monotonic() + 30
        while "fsdp_gpu_ecc_errors_total{" not in (
            text := httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        ):
            assert time.monotonic() < deadline, "the agent exported no GPU reading"
            time.sleep(0.2)
        yield text
    finally:
        agent.terminate()
        agent.wait(timeout=15)


@pytest.mark.e2e  # starts the real agent process
def test_every_agent_gpu_field_is_compared_with_nvidia_smi(standin_agent: str) -> None:
    samples = parse(standin_agent)
    uuid = "GPU-fa4e0000-0000-4000-8000-000000000000"
    agent = g.agent_values(samples, uuid)
    smi = g.parse_smi_csv(STANDIN_SMI, g.SMI_FIELDS)
    rows = g.compare(agent, smi)
    assert [r for r in rows if r.ok is not True] == []  # every field on both sides, and agreeing
    compared = {f.metric.split("{")[0] for f in g.FIELDS if not f.metric.startswith("label:")} | {"fsdp_gpu_info"}
    exported = {s.name for s in samples if s.labels.get("gpu_uuid") == uuid}
    health = {
        "fsdp_gpu_lost",
        "fsdp_gpu_reading_stale",
        "fsdp_gpu_unreadable",
        "fsdp_gpu_reading_age_seconds",
        "fsdp_gpu_xid_errors_total",
    }
    assert exported - compared - health == set(g.NOT_COMPARED)  # nothing the agent exports is left unchecked

    hotter = g.parse_smi_csv(STANDIN_SMI.replace(", 45, 350.12,", ", 55, 350.12,"), g.SMI_FIELDS)
    (temp,) = [r for r in g.compare(agent, hotter) if r.field == "temperature.gpu"]
    assert temp.ok is False and temp.agent == 45.0
    other_gpu = g.parse_smi_csv(STANDIN_SMI.replace("00000000:10:00.0", "00000000:3B:00.0"), g.SMI_FIELDS)
    assert [r.field for r in g.compare(agent, other_gpu) if not r.ok] == ["pci.bus_id"]


def test_a_field_on_one_side_only_is_a_mismatch_and_on_neither_is_na() -> None:
    field = (g.Field("fan.speed", "fsdp_gpu_fan_speed_ratio", 0.01, (0.10, 0.0)),)
    assert g.compare({}, [{"fan.speed": None}], field)[0].ok is None  # a passively cooled GPU: absent on both
    assert g.compare({}, [{"fan.speed": 30.0}], field)[0].note == "only nvidia-smi has it"
    assert g.compare({"fsdp_gpu_fan_speed_ratio": 0.3}, [{"fan.speed": None}], field)[0].note == "only the agent has it"
    between = g.compare({"fsdp_gpu_fan_speed_ratio": 0.55}, [{"fan.speed": 30.0}, {"fan.speed": 60.0}], field)
    assert between[0].ok is True  # within tolerance of the second read, taken after the scrape


def test_mfu_is_checked_against_the_peak_table() -> None:
    # Llama 3.2 1B at seq 2048: ~8.2e9 FLOPs/token; 30,000 tokens/s on an H100 SXM (989 TFLOP/s dense BF16)
    ok, expected = g.mfu_agrees(0.2487, 8.2e9, 30_000, "NVIDIA H100 80GB HBM3")
    assert ok and expected == pytest.approx(8.2e9 * 30_000 / 989e12)
    assert g.mfu_agrees(0.30, 8.2e9, 30_000, "NVIDIA H100 80GB HBM3")[0] is False
    assert g.mfu_agrees(0.2, 8.2e9, 30_000, "NVIDIA H100 PCIe")[1] == pytest.approx(8.2e9 * 30_000 / 756e12)
    assert g.mfu_agrees(0.2, 8.2e9, 30_000, "Tesla T4") == (False, None)  # no peak: never another GPU's


def test_device_memory_plausibility() -> None:
    gib = 2**30
    assert g.memory_plausible(20 * gib, 24 * gib, 30 * gib, 80 * gib, 1.24e9) == []
    assert g.memory_plausible(25 * gib, 24 * gib, 30 * gib, 80 * gib, 1.24e9) == [
        f"allocated {25 * gib:.3g} B is not in (0, reserved {24 * gib:.3g} B]"
    ]
    assert "below 0.8 x 16 B" in g.memory_plausible(1 * gib, 2 * gib, 2 * gib, 80 * gib, 1.24e9)[0]
