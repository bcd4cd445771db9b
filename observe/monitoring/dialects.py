"""The canonical DCGM layer: every dcgm-exporter dialect in use mapped to one set of recorded
series in Prometheus base units, which every dashboard and alert reads.

NVIDIA changed what dcgm-exporter prints three times in 2026 (the table, with its sources, is
``tests/dashboards/dcgm_sources/renames-4.9.0-4.10.0.csv`` and ``docs/dashboards.md``):

- 4.6.0-4.8.3 renamed the node label ``Hostname`` to ``hostname`` (PR #655);
- 4.9.0 renamed the fields DCGM 4.7 deprecates to their DCGM names, eleven of them to new fields
  in base units (clocks in Hz, utilisation as a 0-1 ratio, memory in bytes, energy in J, NVLink
  in B/s), and the driver label ``DCGM_FI_DRIVER_VERSION`` to ``DCGM_FI_SYSTEM_DRIVER_VERSION``;
- 4.10.0 renamed ``DCGM_FI_PROF_PCIE_{TX,RX}_BYTES`` to ``..._BYTES_PER_SECOND``.

During a node-by-node upgrade a cluster runs two dialects at once. So each ``Figure`` below is
recorded once per GPU (``gpu:<figure>:max``) from every spelling at once, converted to the base
unit, with the canonical labels ``CANONICAL_LABELS`` copied from whichever spelling the series
has, and reduced with ``max by`` so a GPU two dialects report in the same instant (an old and a
new exporter pod during a rollout) is one series. Where no dcgm-exporter reports a GPU, the
fsdp-observe agent's NVML reading of the same quantity fills the figure (``or on (node,
gpu_uuid)``): the profiling fields (graphics-engine, tensor and DRAM activity), NVLink, PCIe
replays and remapped rows have no agent counterpart and stay empty without dcgm-exporter.

Each exporter spelling names the releases that print it and whether the name is confirmed from
NVIDIA's own sources or inferred (``Spelling.confirmed``, ``Spelling.source``): the layer reads
every spelling, so an inferred name that turns out wrong costs only that figure on 4.9 nodes.

Standard library only; nothing here talks to a server.
"""

from __future__ import annotations

from dataclasses import dataclass

from observe import catalog as c
from observe.monitoring import fields as f
from observe.monitoring.settings import Settings

#: Labels of every canonical series: the GPU (``gpu`` is NVML's index; a MIG instance adds
#: ``gpu_instance`` and ``mig_profile``), its model, and the workload pod dcgm-exporter's
#: Kubernetes mapping names (arriving as ``exported_namespace``/``exported_pod`` under the GPU
#: Operator's ServiceMonitor; the exporter pod's own target labels are dropped).
CANONICAL_LABELS = ("node", "gpu", "gpu_uuid", "gpu_instance", "mig_profile", "model", "namespace", "pod")
#: The identity of one GPU (or MIG instance) across every canonical series.
GPU_IDENTITY = "node, gpu, gpu_uuid, gpu_instance"
#: dcgm-exporter's label spellings, per canonical label: (label as printed, regex of its value).
#: ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` from 4.6.0-4.8.3; ``UUID``, or ``uuid`` with
#: ``--use-old-namespace``; ``GPU_I_ID``/``GPU_I_PROFILE`` on a MIG instance. ``(.*)`` also
#: copies an absent label as empty, which removes a target label of the same name.
_COPIED: tuple[tuple[str, str, str], ...] = (
    ("node", "Hostname", "(.+)"),
    ("node", "hostname", "(.+)"),
    ("gpu_uuid", "UUID", "(.+)"),
    ("gpu_uuid", "uuid", "(.+)"),
    ("gpu_instance", f.DCGM_MIG_INSTANCE, "(.*)"),
    ("mig_profile", f.DCGM_MIG_PROFILE, "(.*)"),
    ("model", "modelName", "(.*)"),
    ("namespace", "exported_namespace", "(.*)"),
    ("pod", "exported_pod", "(.*)"),
)
#: The PCI bus in the agent's form (``0000:18:00``) from DCGM's ``00000000:18:00.0``.
_PCI_BUS = ("pci_bus", "pci_bus_id", "0000([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[.][0-9A-Fa-f]", "$1:$2")

#: Which releases print a spelling.
UP_TO_4_8 = "up to 4.8.4"
FROM_4_9 = "from 4.9.0"
FROM_4_10 = "from 4.10.0"
UP_TO_4_9 = "up to 4.9.x"


@dataclass(frozen=True)
class Spelling:
    """One name dcgm-exporter prints for a figure.

    Attributes:
        name: the series name as printed.
        convert: PromQL that turns its value into the base unit (``"* 1e6"`` for MHz to Hz,
            ``"/ 100"`` for a percentage; division keeps 38 % exactly 0.38), or ``""``.
        releases: which releases print it (``UP_TO_4_8``, ``FROM_4_9``, ...).
        confirmed: the name (and unit) is confirmed from NVIDIA's own published sources; else
            inferred, with the reason in ``source``.
        source: where the name comes from, or why it is inferred.
    """

    name: str
    convert: str
    releases: str
    confirmed: bool
    source: str


@dataclass(frozen=True)
class Figure:
    """One DCGM figure the dashboards or alerts read, recorded as ``gpu:<metric>:max``.

    Attributes:
        metric: the canonical metric name, in the base unit (``dcgm_sm_clock_hertz``).
        help: what it is, with its unit.
        spellings: every name dcgm-exporter prints for it, newest first.
        agent: the agent's series that read the same quantity (labels ``node``, ``gpu``,
            ``gpu_uuid``), used for GPUs no dcgm-exporter reports; empty where the agent has none.
        agent_expr: how the ``agent`` series combine (``str.format`` over their selectors; ``"{0}"``: the
            first alone).
        labels: labels of the field itself kept besides ``CANONICAL_LABELS`` (``xid``, ``pci_bus``).
    """

    metric: str
    help: str
    spellings: tuple[Spelling, ...]
    agent: tuple[str, ...] = ()
    agent_expr: str = "{0}"
    labels: tuple[str, ...] = ()

    @property
    def record(self) -> str:
        """The recorded series' name (``level:metric:operations``)."""
        return f"gpu:{self.metric}:max"


_DCGM_BINDINGS = "DCGM's Python bindings (dcgm_fields.py, _DEPRECATED_ALIASES)"
_GO_DCGM_UNITS = "go-dcgm pkg/dcgm/base_unit_fields_test.go (new field id, legacy id kept)"
_SECONDARY = (
    "inferred: the 4.9.0 release notes (as recorded, not found again in stored sources) say this "
    "field changes unit; the name is from a third-party summary of DCGM 4.7's field list (id {id}), "
    "not seen in NVIDIA's own files"
)


def _same(new: str, source: str = _DCGM_BINDINGS) -> Spelling:
    return Spelling(new, "", FROM_4_9, True, source)


def _old(name: str, convert: str = "") -> Spelling:
    return Spelling(name, convert, UP_TO_4_8, True, "released default-counters.csv up to 4.6.0-4.8.3")


MIB = "* 1048576"
#: dcgm-exporter's NVLink figure up to 4.8 is KiB/s divided by 1000 (DCGM's
#: ReadAndCacheNvLinkBandwidth); times 1024000 is bytes per second.
NVLINK_TO_BYTES = "* 1024000"

TEMPERATURE = Figure(
    "dcgm_temperature_celsius",
    "GPU temperature, degrees Celsius.",
    (_same("DCGM_FI_DEV_GPU_TEMP_CELSIUS"), _old(f.DCGM_GPU_TEMP)),
    agent=(c.GPU_TEMPERATURE.name,),
)
POWER = Figure(
    "dcgm_power_watts",
    "Board power draw, watts.",
    (_same("DCGM_FI_DEV_BOARD_POWER_WATTS"), _old(f.DCGM_POWER_USAGE)),
    agent=(c.GPU_POWER.name,),
)
SM_CLOCK = Figure(
    "dcgm_sm_clock_hertz",
    "SM clock, hertz.",
    (_same("DCGM_FI_DEV_SM_CLOCK_HERTZ", _GO_DCGM_UNITS + ", 1603"), _old(f.DCGM_SM_CLOCK, "* 1e6")),
    agent=(c.GPU_SM_CLOCK.name,),
)
UTILIZATION = Figure(
    "dcgm_utilization_ratio",
    "Share of time a kernel ran (0-1); not reported for MIG instances.",
    (
        Spelling(
            "DCGM_FI_DEV_GPU_UTIL_RATIO",
            "",
            FROM_4_9,
            True,
            _DCGM_BINDINGS + "; the 4.9.0 release notes (as recorded) move utilisation to a 0-1 ratio",
        ),
        _old(f.DCGM_GPU_UTIL, "/ 100"),
    ),
    agent=(c.GPU_UTILIZATION.name,),
)
MEMORY_COPY_UTILIZATION = Figure(
    "dcgm_memory_copy_utilization_ratio",
    "Share of time device memory was read or written (0-1); not reported for MIG instances.",
    (
        Spelling("DCGM_FI_DEV_MEMORY_UTIL_RATIO", "", FROM_4_9, False, _SECONDARY.format(id=1614)),
        _old(f.DCGM_MEM_COPY_UTIL, "/ 100"),
    ),
    agent=(c.GPU_MEMORY_UTILIZATION.name,),
)
FRAMEBUFFER_USED = Figure(
    "dcgm_framebuffer_used_bytes",
    "Device memory in use, bytes.",
    (
        Spelling("DCGM_FI_DEV_FB_USED_BYTES", "", FROM_4_9, False, _SECONDARY.format(id=1627)),
        _old(f.DCGM_FB_USED, MIB),
    ),
    agent=(c.GPU_MEMORY_USED.name,),
)
FRAMEBUFFER_FREE = Figure(
    "dcgm_framebuffer_free_bytes",
    "Device memory free, bytes.",
    (
        Spelling("DCGM_FI_DEV_FB_FREE_BYTES", "", FROM_4_9, False, _SECONDARY.format(id=1626)),
        _old(f.DCGM_FB_FREE, MIB),
    ),
    # NVML: total = used + free + reserved (v2 memory info); without the reserved figure, used + free.
    agent=(c.GPU_MEMORY_TOTAL.name, c.GPU_MEMORY_USED.name, c.GPU_MEMORY_RESERVED.name),
    agent_expr="({0} - {1} - {2}) or ({0} - {1})",
)
GRAPHICS_ENGINE_ACTIVE = Figure(
    "dcgm_graphics_engine_active_ratio",
    "Share of time the graphics or compute engine was active (0-1; profiling field, MIG-safe).",
    (_same("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"), _old(f.DCGM_GR_ENGINE_ACTIVE)),
)
TENSOR_ACTIVE = Figure(
    "dcgm_tensor_active_ratio",
    "Share of cycles the tensor (HMMA) pipe was active (0-1; profiling field).",
    (_same("DCGM_FI_PROF_TENSOR_UTIL_RATIO"), _old(f.DCGM_TENSOR_ACTIVE)),
)
DRAM_ACTIVE = Figure(
    "dcgm_dram_active_ratio",
    "Share of cycles device memory was sending or receiving data (0-1; profiling field).",
    (_same("DCGM_FI_PROF_DRAM_UTIL_RATIO"), _old(f.DCGM_DRAM_ACTIVE)),
)
NVLINK = Figure(
    "dcgm_nvlink_bytes_per_second",
    "NVLink traffic over all links, sent and received, bytes per second.",
    (
        Spelling("DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "", FROM_4_9, False, _SECONDARY.format(id=1648)),
        _old(f.DCGM_NVLINK_BANDWIDTH, NVLINK_TO_BYTES),
    ),
)
_PCIE_410 = "the 4.10.0 release notes as recorded, not found again in stored sources (renamed, still bytes per second)"
PCIE_TRANSMIT = Figure(
    "dcgm_pcie_transmit_bytes_per_second",
    "PCIe transmit, headers included, bytes per second (profiling field; the agent's NVML figure elsewhere).",
    (
        Spelling("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", "", FROM_4_10, True, _PCIE_410),
        Spelling(f.DCGM_PCIE_TX, "", UP_TO_4_9, True, "released default-counters.csv up to 4.6.0-4.8.3"),
    ),
    agent=(c.GPU_PCIE_TX.name,),
)
PCIE_RECEIVE = Figure(
    "dcgm_pcie_receive_bytes_per_second",
    "PCIe receive, headers included, bytes per second (profiling field; the agent's NVML figure elsewhere).",
    (
        Spelling("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", "", FROM_4_10, True, _PCIE_410),
        Spelling(f.DCGM_PCIE_RX, "", UP_TO_4_9, True, "released default-counters.csv up to 4.6.0-4.8.3"),
    ),
    agent=(c.GPU_PCIE_RX.name,),
)
PCIE_REPLAYS = Figure(
    "dcgm_pcie_replays_total",
    "PCIe retries since boot (a counter).",
    (_same("DCGM_FI_DEV_PCIE_REPLAY_TOTAL"), _old(f.DCGM_PCIE_REPLAY)),
)
ROWS_REMAPPED_UNCORRECTABLE = Figure(
    "dcgm_rows_remapped_uncorrectable_total",
    "Rows remapped for uncorrectable errors (a counter).",
    (_same("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"), _old(f.DCGM_ROWS_REMAPPED_UNCORRECTABLE)),
)
ROWS_REMAPPED_CORRECTABLE = Figure(
    "dcgm_rows_remapped_correctable_total",
    "Rows remapped for correctable errors (a counter).",
    (_same("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL"), _old(f.DCGM_ROWS_REMAPPED_CORRECTABLE)),
)
ROW_REMAP_FAILED = Figure(
    "dcgm_row_remap_failed",
    "1 when remapping rows has failed (no spare rows left).",
    (_same("DCGM_FI_DEV_ROW_REMAP_FAILED"), _old(f.DCGM_ROW_REMAP_FAILURE)),
)
LAST_XID = Figure(
    "dcgm_last_xid",
    "The last XID code the GPU reported (label xid; sticky, never back to 0 by itself; 0 before the "
    "first). The XID alerts read which GPUs the exporter reported a window ago from it.",
    (_same("DCGM_FI_DEV_XID_ERROR"), _old(f.DCGM_XID_ERRORS)),
    labels=("xid", "pci_bus"),
)
XID_WINDOW = Figure(
    "dcgm_xid_window_errors",
    "XID records per GPU and code (label xid) in dcgm-exporter's sliding window (a gauge; off by "
    "default in the exporter: the dcgm_xid_count setting).",
    (
        Spelling(
            f.DCGM_XID_COUNT,
            "",
            "from 3.3.x",
            False,
            "inferred: an exporter-owned family, not a DCGM field; no release note renames it",
        ),
    ),
    labels=("xid", "pci_bus"),
)
#: The figures recorded for every cluster (``XID_WINDOW`` only with ``dcgm_xid_count``).
FIGURES: tuple[Figure, ...] = (
    TEMPERATURE,
    POWER,
    SM_CLOCK,
    UTILIZATION,
    MEMORY_COPY_UTILIZATION,
    FRAMEBUFFER_USED,
    FRAMEBUFFER_FREE,
    GRAPHICS_ENGINE_ACTIVE,
    TENSOR_ACTIVE,
    DRAM_ACTIVE,
    NVLINK,
    PCIE_TRANSMIT,
    PCIE_RECEIVE,
    PCIE_REPLAYS,
    ROWS_REMAPPED_UNCORRECTABLE,
    ROWS_REMAPPED_CORRECTABLE,
    ROW_REMAP_FAILED,
    LAST_XID,
)

#: The per-GPU record of which dialect dcgm-exporter speaks for it (label ``dialect``, value 1).
DIALECT = "gpu:dcgm_exporter_dialect:info"
#: Dialect names, newest first, with the field and label that tell each apart: 4.10 prints the
#: renamed PCIe field (a 4.10 exporter without PCIe profiling fields shows as 4.9), 4.9 the
#: renamed temperature, 4.8.3 the old names with ``hostname``, older releases ``Hostname``.
DIALECTS: tuple[tuple[str, str, str], ...] = (
    ("4.10", PCIE_TRANSMIT.spellings[0].name, ""),
    ("4.9", TEMPERATURE.spellings[0].name, ""),
    ("4.8.3", f.DCGM_GPU_TEMP, 'hostname!=""'),
    ("up-to-4.8.2", f.DCGM_GPU_TEMP, 'Hostname!=""'),
)
#: The driver-version label: ``DCGM_FI_DRIVER_VERSION`` up to 4.8, ``DCGM_FI_SYSTEM_DRIVER_VERSION``
#: from 4.9.0 (its release notes as recorded; check against a 4.9 exporter's ``/metrics``).
DRIVER_LABELS = ("DCGM_FI_SYSTEM_DRIVER_VERSION", "DCGM_FI_DRIVER_VERSION")


def canonical(expr: str, keep: tuple[str, ...] = (), op: str = "max") -> str:
    """``expr`` (dcgm-exporter series of any dialect) with the canonical labels copied from the
    dialect's, reduced to one series per GPU: ``max by (CANONICAL_LABELS + keep) (...)``.

    Labels are only added before the first reduction (``label_replace`` fails on a result that
    holds two series with one label set, as two exporter pods on one host network would after
    their ``pod`` labels were overwritten); the workload's ``namespace`` and ``pod`` replace the
    exporter pod's target labels after it."""
    workload = {"namespace", "pod"}
    for ours, theirs, regex in _COPIED:
        if ours not in workload:
            expr = f'label_replace({expr}, "{ours}", "$1", "{theirs}", "{regex}")'
    if "pci_bus" in keep:
        ours, theirs, regex, replacement = _PCI_BUS
        expr = f'label_replace({expr}, "{ours}", "{replacement}", "{theirs}", "{regex}")'
    labels = [label for label in CANONICAL_LABELS if label not in workload]
    copied = [theirs for ours, theirs, _ in _COPIED if ours in workload]
    expr = f"{op} by ({', '.join((*labels, *copied, *keep))}) (\n  {expr}\n)"
    for ours, theirs, regex in _COPIED:
        if ours in workload:
            expr = f'label_replace({expr}, "{ours}", "$1", "{theirs}", "{regex}")'
    return f"{op} by ({', '.join((*CANONICAL_LABELS, *keep))}) (\n  {expr}\n)"


def exporter_series(figure: Figure, s: Settings, *matchers: str) -> str:
    """Every spelling of ``figure`` in its base unit: ``{__name__=~"A|C"} or (B * 1e6) or ...``
    (the unconverted spellings in one selector), each with the DCGM selector and ``matchers``."""
    plain = [sp.name for sp in figure.spellings if not sp.convert]
    parts = []
    if len(plain) == 1:
        parts.append(s.dcgm_raw(plain[0], *matchers))
    elif plain:
        parts.append(s.dcgm_raw("", f'__name__=~"{"|".join(plain)}"', *matchers))
    parts += [f"({s.dcgm_raw(sp.name, *matchers)} {sp.convert})" for sp in figure.spellings if sp.convert]
    return " or ".join(parts)


def agent_series(figure: Figure, s: Settings) -> str | None:
    """The agent's reading of ``figure`` per GPU (``None`` where it has none)."""
    if not figure.agent:
        return None
    return f"max by (node, gpu, gpu_uuid) ({figure.agent_expr.format(*(s.agent(m) for m in figure.agent))})"


def record_expr(figure: Figure, s: Settings) -> str:
    """The recording rule's expression for ``figure``: every dialect's spelling, canonical labels,
    one series per GPU; the agent's reading for GPUs no dcgm-exporter reports."""
    if figure is LAST_XID:
        coded = exporter_series(figure, s)
        return canonical(f'label_replace({coded}, "xid", "$1", "err_code", "(.+)")', figure.labels)
    if figure is XID_WINDOW:
        return canonical(exporter_series(figure, s, 'xid!=""'), figure.labels)
    expr = canonical(exporter_series(figure, s))
    agent = agent_series(figure, s)
    return expr if agent is None else f"{expr}\nor on (node, gpu_uuid)\n{agent}"


def dialect_expr(s: Settings) -> str:
    """The dialect record: one series per GPU (the newest dialect where two report it), labels
    ``CANONICAL_LABELS``, ``driver_version`` and ``dialect``, value 1."""
    parts = []
    for name, field, matcher in DIALECTS:
        expr = s.dcgm_raw(field, matcher)
        for label in DRIVER_LABELS:
            expr = f'label_replace({expr}, "driver_version", "$1", "{label}", "(.+)")'
        expr = f'label_replace({expr}, "dialect", "{name}", "", "")'
        parts.append(f"({canonical(expr, ('driver_version', 'dialect'), op='group')})")
    return f"\nor on ({GPU_IDENTITY})\n".join(parts)


def recording_rules(s: Settings) -> list[dict[str, str]]:
    """The canonical layer as recording rules (first in the group ``fsdp-observe.gpu``)."""
    figures = (*FIGURES, XID_WINDOW) if s.dcgm_xid_count else FIGURES
    return [
        *({"record": figure.record, "expr": record_expr(figure, s)} for figure in figures),
        {"record": DIALECT, "expr": dialect_expr(s)},
    ]


#: Every recorded name of the layer (with ``XID_WINDOW``'s).
RECORDED = (*(figure.record for figure in (*FIGURES, XID_WINDOW)), DIALECT)
