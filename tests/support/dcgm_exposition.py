"""dcgm-exporter's ``/metrics`` text as released versions print it, for tests without a GPU.

A stand-in for dcgm-exporter (which needs a GPU and DCGM), built from what the exporter really
does, so a real Prometheus can scrape it (tests say they replay it):

- the fields: the counter list the exporter is started with, read from the release's csv
  (``tests/cases/dcgm/released-4.5.3-4.8.2``, ``tests/dashboards/dcgm_sources/released-4.6.0-4.8.3``);
  rows commented out there are not exported, and ``label`` rows (``DCGM_FI_DRIVER_VERSION``)
  become a label on every series. 4.9.0 and 4.10.0 print the 4.6.0-4.8.3 lists under the names
  and units of ``tests/dashboards/dcgm_sources/renames-4.9.0-4.10.0.csv``
  (their own lists were not found; ``RELEASES``), with ``DCGM_FI_DEV_FB_CAPACITY_BYTES`` added;
- the labels and their order: ``gpuMetricsFormat`` of ``internal/pkg/rendermetrics`` -
  ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``GPU_I_PROFILE``/``GPU_I_ID``
  for a MIG instance, ``Hostname`` (``hostname`` from 4.6.0-4.8.3), then the label fields, then
  the attributes in key order (Go templates range over maps sorted): ``container``,
  ``err_code``/``err_msg`` (the last-XID field only), ``namespace``, ``pod`` (the Kubernetes pod
  mapping);
- values: integers as ``%d``, doubles as ``%f`` (``toString`` in ``gpu_collector.go``); MIG
  instances get no GPU or memory-copy utilisation (not supported for MIG); a renamed field's
  value is the same reading in its new unit (1980 MHz is 1980000000 Hz);
- ``DCGM_EXP_XID_ERRORS_COUNT`` (when listed): one series per GPU and code with ``xid`` and
  ``window_size_in_ms``, or one 0-valued series without ``xid`` (``expcollector.go``).

Values are made up; ``render`` is deterministic, so fixtures written from it are reproducible
(``tests/dashboards/test_dcgm_fixtures.py``).
"""

from __future__ import annotations

import csv
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cases import CASES

RELEASE = "4.5.3-4.8.2"
COUNTERS = CASES / "dcgm" / f"released-{RELEASE}"
#: Counter lists and the rename table that are not among the shared field cases (their sources: the README there).
SOURCES = Path(__file__).resolve().parents[1] / "dashboards" / "dcgm_sources"
RENAMES = SOURCES / "renames-4.9.0-4.10.0.csv"
#: DCGM fields of type double (``DCGM_FT_DOUBLE``), by every name they have; the others are int64.
DOUBLE_FIELDS = frozenset(
    {
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_BOARD_POWER_WATTS",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_DRAM_UTIL_RATIO",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_DEV_GPU_UTIL_RATIO",
        "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
        "DCGM_FI_DEV_ENC_UTIL_RATIO",
        "DCGM_FI_DEV_DEC_UTIL_RATIO",
    }
)
NOT_FOR_MIG = frozenset(
    {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_MEMORY_UTIL_RATIO"}
)
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
LAST_XID = frozenset({"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR"})
#: The exporter's default --xid-count-window-size (5 minutes), in ms.
XID_WINDOW_MS = 300_000
#: dcgm-exporter's text for the XID codes used here (``xidErrCodeToText``).
XID_TEXT = {
    0: "No Error",
    31: "GPU memory page fault",
    48: "DBE (Double Bit Error) ECC Error",
    79: "GPU has fallen off the bus",
    143: "GPU initialization failure",
}


@dataclass(frozen=True)
class Release:
    """What one dcgm-exporter release prints.

    Attributes:
        name: the release (``4.9.0``).
        counters: the folder of its counter lists.
        hostname_label: ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` from 4.6.0-4.8.3.
        renamed: the rename table's column naming its fields (``from_4_9``, ``from_4_10``), or ``""``.
    """

    name: str
    counters: Path
    hostname_label: str
    renamed: str = ""


RELEASES = {
    r.name: r
    for r in (
        Release("4.5.3-4.8.2", COUNTERS, "Hostname"),
        Release("4.6.0-4.8.3", SOURCES / "released-4.6.0-4.8.3", "hostname"),
        Release("4.9.0", SOURCES / "released-4.6.0-4.8.3", "hostname", "from_4_9"),
        Release("4.10.0", SOURCES / "released-4.6.0-4.8.3", "hostname", "from_4_10"),
    )
}


@dataclass(frozen=True)
class Rename:
    """One row of the rename table: the name up to 4.8.x, from 4.9.0 and from 4.10.0, and the
    PromQL that turns the old unit into the new one."""

    up_to_4_8: str
    from_4_9: str
    from_4_10: str
    convert: str
    status: str


@functools.cache
def renames() -> tuple[Rename, ...]:
    """The rows of ``renames-4.9.0-4.10.0.csv``."""
    lines = [line for line in RENAMES.read_text().splitlines() if line and not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    return tuple(
        Rename(r["up_to_4_8"], r["from_4_9"], r["from_4_10"] or r["from_4_9"], r["convert"], r["status"]) for r in rows
    )


def convert(value: float, how: str) -> float:
    """``value`` in the new unit: ``how`` is the table's ``* 1e6`` or ``/ 100``."""
    if not how:
        return value
    op, number = how.split()
    return value * float(number) if op == "*" else value / float(number)


@dataclass(frozen=True)
class Counter:
    """One row of a counters csv: field name, Prometheus type, help text."""

    name: str
    kind: str
    help: str


def counters(csv_name: str, extra: tuple[Counter, ...] = (), release: str = RELEASE) -> list[Counter]:
    """The rows of a release's counters csv that are not commented out, plus ``extra`` (rows a
    user uncommented, e.g. ``DCGM_EXP_XID_ERRORS_COUNT``); for 4.9.0 and later under their renamed
    names, with ``DCGM_FI_DEV_FB_CAPACITY_BYTES`` (4.9.0 collects it by default)."""
    r = RELEASES[release]
    rows = []
    for line in (r.counters / csv_name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, kind, text = (part.strip() for part in next(csv.reader([line], skipinitialspace=True)))
        rows.append(Counter(name, kind, text))
    rows += list(extra)
    if not r.renamed:
        return rows
    table = {row.up_to_4_8: getattr(row, r.renamed) for row in renames() if row.up_to_4_8}
    capacity = Counter("DCGM_FI_DEV_FB_CAPACITY_BYTES", "gauge", "Total framebuffer memory (in bytes).")
    return [Counter(table.get(row.name, row.name), row.kind, row.help) for row in rows] + [capacity]


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


def reading(gpu: Gpu, name: str) -> float:
    """The GPU's reading of field ``name`` in that name's unit: a renamed field's is the old
    field's reading converted (``renames``); the framebuffer's capacity is used + free + reserved."""
    if name == "DCGM_FI_DEV_FB_CAPACITY_BYTES":
        mib = sum(reading(gpu, f) for f in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"))
        return mib * 1048576
    for row in renames():
        if name in (row.from_4_9, row.from_4_10) and name != row.up_to_4_8:
            return convert(reading(gpu, row.up_to_4_8), row.convert)
    return gpu.readings.get(name, BUSY.get(name, 0))


def _labels(
    gpu: Gpu, hostname_label: str, hostname: str, driver: str, attributes: dict[str, str], driver_label: str
) -> str:
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
    parts.append((driver_label, driver))
    if gpu.pod:
        attributes = {**attributes, **dict(zip(("container", "namespace", "pod"), gpu.pod, strict=True))}
    parts += sorted(attributes.items())
    return ",".join(f'{k}="{v}"' for k, v in parts)


def lines(
    fields: list[Counter],
    gpus: list[Gpu],
    hostname: str,
    *,
    release: str = RELEASE,
    driver: str = "570.124.06",
) -> Iterator[str]:
    """The exposition's lines, family by family (HELP, TYPE, then one line per GPU); a family
    with no series (GPU utilisation on a MIG-only node) is left out, as the exporter does."""
    hostname_label = RELEASES[release].hostname_label
    driver_label = next(c.name for c in fields if c.kind == "label")
    for counter in fields:
        if counter.kind == "label":
            continue
        family = list(_family(counter, gpus, hostname, hostname_label, driver, driver_label))
        if family:
            yield f"# HELP {counter.name} {counter.help}"
            yield f"# TYPE {counter.name} {counter.kind}"
            yield from family


def _family(
    counter: Counter, gpus: list[Gpu], hostname: str, hostname_label: str, driver: str, driver_label: str
) -> Iterator[str]:
    """One family's series lines, a line per GPU (per GPU and code for the XID count)."""

    def labels(gpu: Gpu, attributes: dict[str, str]) -> str:
        return _labels(gpu, hostname_label, hostname, driver, attributes, driver_label)

    for gpu in gpus:
        if gpu.mig_profile and counter.name in NOT_FOR_MIG:
            continue
        if counter.name == XID_COUNT:
            window = {"window_size_in_ms": str(XID_WINDOW_MS)}
            none: list[tuple[int | None, int]] = [(None, 0)]  # no XID in the window: one 0 without xid
            counts: list[tuple[int | None, int]] = [*sorted(gpu.xid_counts.items())]
            for code, count in counts or none:
                attributes = {**window, **({"xid": str(code)} if code is not None else {})}
                yield f"{counter.name}{{{labels(gpu, attributes)}}} {count}"
            continue
        if counter.name in LAST_XID:
            attributes = {"err_code": str(gpu.last_xid), "err_msg": XID_TEXT.get(gpu.last_xid, "Unknown Error")}
            yield f"{counter.name}{{{labels(gpu, attributes)}}} {gpu.last_xid}"
            continue
        yield f"{counter.name}{{{labels(gpu, {})}}} {_value(counter.name, reading(gpu, counter.name))}"


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


def fleet_gpus() -> dict[str, list[Gpu]]:
    """The GPUs of a small fleet, by node: the hot training node, two plain nodes and a MIG node.
    Every dialect prints the same readings for them (in its own names and units)."""

    def plain(node: int) -> list[Gpu]:
        return [
            Gpu(g, f"GPU-f1ee7000-0000-4000-8000-0000000{node}{g:02d}", f"00000000:{24 + g:02X}:00.0") for g in (0, 1)
        ]

    return {
        "fleet-node-1": training_gpus(),
        "fleet-node-2": plain(2),
        "fleet-node-3": mig_gpus(),
        "fleet-node-4": plain(4),
    }


#: The mixed fleet of a rolling upgrade: each node on another release, and fleet-node-4 scraped
#: from two exporter pods at once (the 4.9.0 pod not yet gone when the 4.10.0 one starts).
MIXED = {
    "fleet-node-1": ("4.5.3-4.8.2",),
    "fleet-node-2": ("4.6.0-4.8.3",),
    "fleet-node-3": ("4.9.0",),
    "fleet-node-4": ("4.10.0", "4.9.0"),
}


def fleet(releases: dict[str, tuple[str, ...]], gpus: dict[str, list[Gpu]] | None = None) -> dict[str, bytes]:
    """``<node>-<release>`` → the ``/metrics`` body of that node's exporter of that release
    (``default-counters.csv``, which every release of the fleet starts with)."""
    gpus = gpus or fleet_gpus()
    return {
        f"{node}-{release}": render(
            counters("default-counters.csv", release=release), gpus[node], node, release=release
        )
        for node, names in releases.items()
        for release in names
    }


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
        # The same node after the upgrade to 4.6.0-4.8.3 ("Rename Hostname label to hostname", #655).
        "dcgm-4.6.0-4.8.3-gpu-operator.prom": render(
            counters("dcp-metrics-included.csv", release="4.6.0-4.8.3"), training_gpus(), NODE, release="4.6.0-4.8.3"
        ),
        # ... and to 4.9.0 and 4.10.0 (renamed fields in base units; dcp-metrics-included.csv deprecated).
        **{
            f"dcgm-{r}-default.prom": render(
                counters("default-counters.csv", release=r), training_gpus(), NODE, release=r
            )
            for r in ("4.9.0", "4.10.0")
        },
        # The mixed fleet of a rolling upgrade (MIXED).
        **{f"dcgm-mixed-fleet-{name}.prom": body for name, body in fleet(MIXED).items()},
    }


def write_fixtures() -> None:
    """Write ``fixtures()`` into ``tests/dashboards/fixtures`` (``python -m tests.support.dcgm_exposition``)."""
    FIXTURES.mkdir(exist_ok=True)
    for name, body in fixtures().items():
        (FIXTURES / name).write_bytes(body)


if __name__ == "__main__":
    write_fixtures()
