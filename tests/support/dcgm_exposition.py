"""dcgm-exporter's ``/metrics`` text as released versions print it, for tests without a GPU.

A stand-in for dcgm-exporter (which needs a GPU and DCGM), built from what the exporter really
does, so a real Prometheus can scrape it (tests say they replay it):

- the fields: the counter list the exporter is started with, read from the release's csv
  (``tests/cases/dcgm/released-4.5.3-4.8.2``); rows commented out there are not exported, and
  ``label`` rows (``DCGM_FI_DRIVER_VERSION``) become a label on every series;
- the labels and their order: ``gpuMetricsFormat`` of ``internal/pkg/rendermetrics`` -
  ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``GPU_I_PROFILE``/``GPU_I_ID``
  for a MIG instance, ``Hostname`` (``hostname`` on the exporter's main branch after the last
  tag, ``d5e5f51``), then the label fields, then the attributes in key order (Go templates range
  over maps sorted): ``container``, ``err_code``/``err_msg`` (``DCGM_FI_DEV_XID_ERRORS`` only),
  ``namespace``, ``pod`` (the Kubernetes pod mapping);
- values: integers as ``%d``, doubles as ``%f`` (``toString`` in ``gpu_collector.go``); MIG
  instances get no ``DCGM_FI_DEV_GPU_UTIL``/``DCGM_FI_DEV_MEM_COPY_UTIL`` (not supported for MIG);
- ``DCGM_EXP_XID_ERRORS_COUNT`` (when listed): one series per GPU and code with ``xid`` and
  ``window_size_in_ms``, or one 0-valued series without ``xid`` (``expcollector.go``).

Values are made up; ``render`` is deterministic, so fixtures written from it are reproducible
(``tests/dashboards/test_dcgm_fixtures.py``).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cases import CASES

RELEASE = "4.5.3-4.8.2"
COUNTERS = CASES / "dcgm" / f"released-{RELEASE}"
#: DCGM fields of type double (``DCGM_FT_DOUBLE``); the others are int64.
DOUBLE_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
    }
)
NOT_FOR_MIG = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"})
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
#: The exporter's default --xid-count-window-size (5 minutes), in ms.
XID_WINDOW_MS = 300_000
#: dcgm-exporter's text for the XID codes used here (``xidErrCodeToText``).
XID_TEXT = {
    0: "No Error",
    31: "GPU memory page fault",
    48: "DBE (Double Bit Error) ECC Error",
    79: "GPU has fallen off the bus",
}


@dataclass(frozen=True)
class Counter:
    """One row of a counters csv: field name, Prometheus type, help text."""

    name: str
    kind: str
    help: str


def counters(csv_name: str, extra: tuple[Counter, ...] = ()) -> list[Counter]:
    """The rows of a release's counters csv that are not commented out, plus ``extra`` (rows a
    user uncommented, e.g. ``DCGM_EXP_XID_ERRORS_COUNT``)."""
    rows = []
    for line in (COUNTERS / csv_name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, kind, text = (part.strip() for part in next(csv.reader([line], skipinitialspace=True)))
        rows.append(Counter(name, kind, text))
    return rows + list(extra)


@dataclass
class Gpu:
    """One GPU (or MIG instance) the exporter reports, and its readings (field name → value)."""

    index: int
    uuid: str
    pci_bus_id: str
    model: str = "NVIDIA H200"
    mig_profile: str = ""
    mig_instance: str = ""
    pod: tuple[str, str, str] | None = None  # (container, namespace, pod) of the pod using it
    readings: dict[str, float] = field(default_factory=dict)
    last_xid: int = 0
    xid_counts: dict[int, int] = field(default_factory=dict)


#: Readings a busy H200 in a bf16 FSDP fine-tune shows, per field (MiB, MHz, °C, W, ratios).
BUSY = {
    "DCGM_FI_DEV_SM_CLOCK": 1980,
    "DCGM_FI_DEV_MEM_CLOCK": 2619,
    "DCGM_FI_DEV_MEMORY_TEMP": 58,
    "DCGM_FI_DEV_GPU_TEMP": 61,
    "DCGM_FI_DEV_POWER_USAGE": 612.42,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 81234567890,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
    "DCGM_FI_DEV_GPU_UTIL": 100,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 38,
    "DCGM_FI_DEV_ENC_UTIL": 0,
    "DCGM_FI_DEV_DEC_UTIL": 0,
    "DCGM_FI_DEV_FB_FREE": 19703,
    "DCGM_FI_DEV_FB_USED": 121344,
    "DCGM_FI_DEV_FB_RESERVED": 523,
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 182340,
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.982,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.412,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.376,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1843200000,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 2297856000,
}


def _value(name: str, value: float) -> str:
    return f"{value:f}" if name in DOUBLE_FIELDS else f"{int(value):d}"


def _labels(gpu: Gpu, hostname_label: str, hostname: str, driver: str, attributes: dict[str, str]) -> str:
    parts = [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model),
    ]
    if gpu.mig_profile:
        parts += [("GPU_I_PROFILE", gpu.mig_profile), ("GPU_I_ID", gpu.mig_instance)]
    parts.append((hostname_label, hostname))
    parts.append(("DCGM_FI_DRIVER_VERSION", driver))
    if gpu.pod:
        attributes = {**attributes, **dict(zip(("container", "namespace", "pod"), gpu.pod, strict=True))}
    parts += sorted(attributes.items())
    return ",".join(f'{k}="{v}"' for k, v in parts)


def lines(
    fields: list[Counter],
    gpus: list[Gpu],
    hostname: str,
    *,
    hostname_label: str = "Hostname",
    driver: str = "570.124.06",
) -> Iterator[str]:
    """The exposition's lines, family by family (HELP, TYPE, then one line per GPU); a family
    with no series (GPU utilisation on a MIG-only node) is left out, as the exporter does."""
    for counter in fields:
        if counter.kind == "label":
            continue
        family = list(_family(counter, gpus, hostname, hostname_label, driver))
        if family:
            yield f"# HELP {counter.name} {counter.help}"
            yield f"# TYPE {counter.name} {counter.kind}"
            yield from family


def _family(counter: Counter, gpus: list[Gpu], hostname: str, hostname_label: str, driver: str) -> Iterator[str]:
    """One family's series lines, a line per GPU (per GPU and code for the XID count)."""
    for gpu in gpus:
        if gpu.mig_profile and counter.name in NOT_FOR_MIG:
            continue
        if counter.name == XID_COUNT:
            window = {"window_size_in_ms": str(XID_WINDOW_MS)}
            none: list[tuple[int | None, int]] = [(None, 0)]  # no XID in the window: one 0 without xid
            counts: list[tuple[int | None, int]] = [*sorted(gpu.xid_counts.items())]
            for code, count in counts or none:
                attributes = {**window, **({"xid": str(code)} if code is not None else {})}
                yield f"{counter.name}{{{_labels(gpu, hostname_label, hostname, driver, attributes)}}} {count}"
            continue
        if counter.name == "DCGM_FI_DEV_XID_ERRORS":
            attributes = {"err_code": str(gpu.last_xid), "err_msg": XID_TEXT.get(gpu.last_xid, "Unknown Error")}
            yield f"{counter.name}{{{_labels(gpu, hostname_label, hostname, driver, attributes)}}} {gpu.last_xid}"
            continue
        value = gpu.readings.get(counter.name, BUSY.get(counter.name, 0))
        yield f"{counter.name}{{{_labels(gpu, hostname_label, hostname, driver, {})}}} {_value(counter.name, value)}"


def render(fields: list[Counter], gpus: list[Gpu], hostname: str, **options: str) -> bytes:
    """The whole ``/metrics`` body."""
    return ("\n".join(lines(fields, gpus, hostname, **options)) + "\n").encode()


# --- the recorded fixtures -----------------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "dashboards" / "fixtures"
NODE = "ip-10-0-7-21.ec2.internal"
MIG_NODE = "ip-10-0-7-35.ec2.internal"
TRAINING_UUIDS = ("GPU-7d1e3c2a-55b0-4f7e-9c1d-2a3b4c5d6e01", "GPU-7d1e3c2a-55b0-4f7e-9c1d-2a3b4c5d6e02")


def training_gpus() -> list[Gpu]:
    """Two H200s of a node running ranks 0 and 1 of run llama2-7b-ft (namespace training); GPU 1
    runs hot (83 °C), has remapped rows and ran out of spare ones, and its last XID is 31 (twice in
    the exporter's window)."""
    return [
        Gpu(0, TRAINING_UUIDS[0], "00000000:18:00.0", pod=("pytorch", "training", "llama2-7b-ft-worker-0")),
        Gpu(
            1,
            TRAINING_UUIDS[1],
            "00000000:2A:00.0",
            pod=("pytorch", "training", "llama2-7b-ft-worker-1"),
            readings={
                "DCGM_FI_DEV_GPU_TEMP": 83,
                "DCGM_FI_DEV_SM_CLOCK": 1755,
                "DCGM_FI_DEV_POWER_USAGE": 388.07,
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.913,
                "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
                "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 3,
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1,
            },
            last_xid=31,
            xid_counts={31: 2},
        ),
    ]


def mig_gpus() -> list[Gpu]:
    """An H100 in MIG mode with two 3g.40gb instances (no pods), one of which failed row remapping."""
    uuid = "GPU-3c4d5e6f-0a1b-4c2d-8e3f-5a6b7c8d9e00"
    model, profile = "NVIDIA H100 80GB HBM3", "3g.40gb"
    return [
        Gpu(0, uuid, "00000000:C1:00.0", model=model, mig_profile=profile, mig_instance="1"),
        Gpu(
            0,
            uuid,
            "00000000:C1:00.0",
            model=model,
            mig_profile=profile,
            mig_instance="2",
            readings={"DCGM_FI_DEV_ROW_REMAP_FAILURE": 1},
        ),
    ]


def fixtures() -> dict[str, bytes]:
    """File name → body of every recorded fixture (``tests/dashboards/fixtures``)."""
    gpu_operator = counters("dcp-metrics-included.csv")
    with_count = counters(
        "default-counters.csv",
        (
            Counter(
                XID_COUNT,
                "gauge",
                "Count of XID Errors within user-specified time window (see xid-count-window-size param).",
            ),
        ),
    )
    return {
        # What the GPU Operator's exporter (4.5.3-4.8.2, dcp-metrics-included.csv) prints.
        f"dcgm-{RELEASE}-gpu-operator.prom": render(gpu_operator, training_gpus(), NODE),
        # The same node's exporter started with default-counters.csv and DCGM_EXP_XID_ERRORS_COUNT uncommented.
        f"dcgm-{RELEASE}-xid-count.prom": render(with_count, training_gpus(), NODE),
        # A MIG node's exporter (4.5.3-4.8.2, GPU Operator counters).
        f"dcgm-{RELEASE}-mig.prom": render(gpu_operator, mig_gpus(), MIG_NODE),
        # The exporter's main branch after d5e5f51 ("Rename Hostname label to hostname", #655): not released.
        "dcgm-main-d5e5f51-hostname.prom": render(gpu_operator, training_gpus(), NODE, hostname_label="hostname"),
    }


def write_fixtures() -> None:
    """Write ``fixtures()`` into ``tests/dashboards/fixtures`` (``python -m tests.support.dcgm_exposition``)."""
    FIXTURES.mkdir(exist_ok=True)
    for name, body in fixtures().items():
        (FIXTURES / name).write_bytes(body)


if __name__ == "__main__":
    write_fixtures()
