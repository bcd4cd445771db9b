"""The shared field cases' dcgm-exporter bodies through the generated rules, under ``promtool``.

``tests/cases/dcgm/exposition-v3.prom`` (label ``Hostname``, every tagged release up to
4.5.3-4.8.2) and ``exposition-v4.prom`` (``hostname``, the exporter after its rename) are the same
two GPUs in two label dialects. Each body is replayed as the GPU Operator's ServiceMonitor stores
it (a recorded real format, no GPU here): the workload's ``namespace``/``pod``/``container`` become
``exported_*`` beside the exporter pod's own target labels. Whichever dialect a node speaks, and
when both exporters report the same GPUs during a rolling upgrade, the canonical layer must give
the same series: one per GPU, tied to the training pods, in base units, with the case's semantics
(the last-XID field is the last code, not a count; the windowed count is a gauge).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from observe.monitoring import rules
from observe.monitoring.settings import Settings
from tests.support.cases import CASES

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is missing: apt-get install prometheus (CI installs it)"
)
NODE = "ip-10-0-7-21.ec2.internal"
UUID = "GPU-7d1e3c2a-55b0-4f7e-9c1d-2a3b4c5d6e0{}"
#: The exporter's labels a ServiceMonitor without honorLabels renames, because the target has its own.
TARGET = ("namespace", "pod", "container")


def replay(case: str, exporter_pod: str) -> list[dict[str, str]]:
    """promtool input series for one case body, scraped from ``exporter_pod`` for 30 minutes."""
    text = (CASES / "dcgm" / case).read_text()
    series = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {(f"exported_{k}" if k in TARGET else k): v for k, v in sample.labels.items()}
            labels |= {
                "job": "nvidia-dcgm-exporter",
                "instance": f"{exporter_pod}:9400",
                "namespace": "gpu-operator",
                "pod": exporter_pod,
                "container": "nvidia-dcgm-exporter",
            }
            inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
            series.append({"series": f"{sample.name}{{{inner}}}", "values": f"{sample.value:g}x30"})
    return series


FLEETS = {
    "Hostname (4.5.3-4.8.2)": replay("exposition-v3.prom", "nvidia-dcgm-exporter-old"),
    "hostname": replay("exposition-v4.prom", "nvidia-dcgm-exporter-new"),
    "both at once (rolling upgrade)": [
        *replay("exposition-v3.prom", "nvidia-dcgm-exporter-old"),
        *replay("exposition-v4.prom", "nvidia-dcgm-exporter-new"),
    ],
}


def gpu(i: int, **extra: str) -> str:
    """The canonical labels of the case's GPU ``i`` (its training pod from the Kubernetes mapping)."""
    labels = {
        "gpu": str(i),
        "gpu_uuid": UUID.format(i + 1),
        "model": "NVIDIA H200",
        "namespace": "training",
        "node": NODE,
        "pod": f"llama2-7b-ft-worker-{i}",
        **extra,
    }
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def checks(counted: bool) -> list[dict]:
    """What the layer must record from the case, in every dialect (values from the case file)."""
    mib = 1048576
    one_each = [  # (record, GPU 0's value, GPU 1's value), base units
        ("gpu:dcgm_temperature_celsius:max", 61, 83),
        ("gpu:dcgm_power_watts:max", 612.42, 388.07),
        ("gpu:dcgm_sm_clock_hertz:max", 1980e6, 1755e6),
        ("gpu:dcgm_utilization_ratio:max", 1.0, 0.97),
        ("gpu:dcgm_memory_copy_utilization_ratio:max", 0.38, 0.35),
        ("gpu:dcgm_framebuffer_used_bytes:max", 121344 * mib, 119808 * mib),
    ]
    out = [
        {
            "expr": f"round({record}, 0.001)",
            "eval_time": "10m",
            "exp_samples": [
                {"labels": gpu(0), "value": zero},
                {"labels": gpu(1), "value": one},
            ],
        }
        for record, zero, one in one_each
    ]
    out += [
        {  # no GPU twice, whichever exporters report it
            "expr": "count(gpu:dcgm_temperature_celsius:max)",
            "eval_time": "10m",
            "exp_samples": [{"labels": "{}", "value": 2}],
        },
        {  # GPU 1 runs hot: the one GPU at or above the 80 degree warning
            "expr": "count(gpu:dcgm_temperature_celsius:max >= 80)",
            "eval_time": "10m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        },
        {  # the last XID is a code (31 on GPU 1, 0 = none on GPU 0), never a count
            "expr": "gpu:dcgm_last_xid:max",
            "eval_time": "10m",
            "exp_samples": [
                {
                    "labels": "gpu:dcgm_last_xid:max" + gpu(0, pci_bus="0000:18:00", xid="0"),
                    "value": 0,
                },
                {
                    "labels": "gpu:dcgm_last_xid:max" + gpu(1, pci_bus="0000:2A:00", xid="31"),
                    "value": 31,
                },
            ],
        },
    ]
    if counted:  # the windowed count is a gauge: XID 31 twice in the window on GPU 1, per code
        out.append(
            {
                "expr": "gpu:dcgm_xid_window_errors:max",
                "eval_time": "10m",
                "exp_samples": [
                    {
                        "labels": "gpu:dcgm_xid_window_errors:max" + gpu(1, pci_bus="0000:2A:00", xid="31"),
                        "value": 2,
                    }
                ],
            }
        )
    return out


def alerts_silent(counted: bool) -> list[dict]:
    """A steady application XID 31 (the sticky last code; two in the window, under the burst of 3)
    pages nothing over the half hour, in any dialect."""
    names = ("FsdpDcgmXidCritical", "FsdpDcgmXidApplicationBurst") if counted else ("FsdpDcgmXidCritical",)
    return [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": []} for t in (5, 29) for name in names]


@pytest.mark.parametrize("counted", [False, True], ids=["stock", "dcgm_xid_count"])
def test_the_field_case_gives_the_same_canonical_gpus_in_every_dialect(tmp_path: Path, counted: bool) -> None:
    settings = Settings(dcgm_xid_count=counted)
    tests = [
        {
            "name": fleet,
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": checks(counted),
            "alert_rule_test": alerts_silent(counted),
        }
        for fleet, series in FLEETS.items()
    ]
    (tmp_path / "rules.yaml").write_text(rules.render(settings))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False, width=1000
        )
    )
    done = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_both_case_bodies_are_the_same_gpus_in_two_label_dialects() -> None:
    """The premise of the test above: the two bodies differ only in the node label's spelling."""
    v3 = (CASES / "dcgm" / "exposition-v3.prom").read_text()
    v4 = (CASES / "dcgm" / "exposition-v4.prom").read_text()
    assert "Hostname=" in v3 and "hostname=" not in v3
    assert v3.replace("Hostname=", "hostname=") == v4
