"""The Node screen's nvtop side: GPUs as a compact table (one line each, nvitop's compact view) or
as detailed blocks with history, UUIDs by their distinguishing tail, and one GPU in full (Enter).

LOST GPUs and MIG utilisation are shown as such (``LOST``, ``N/A (MIG)``); a value NVML could not
read is ``N/A``, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from observe.model import GpuInfo, XidEvent
from observe.sources.view import NodeFigures
from observe.tui import fmt
from observe.tui.widgets.lines import Line, Lines, bar, fit, spark
from observe.tui.widgets.table import Column

#: Rows one detailed GPU block takes (title, UTIL, MEM, readings, PCIe/ECC, throttle, gap).
BLOCK_ROWS = 7
#: The shortest UUID tail shown (``…0000dea``): enough to tell GPUs of one node apart at a glance.
MIN_TAIL = 6
#: Block cells of a text meter, from empty to full in eighths.
_EIGHTHS = " ▏▎▍▌▋▊▉█"


def uuid_tails(uuids: Sequence[str | None], least: int = MIN_TAIL) -> list[str]:
    """The shortest tail (at least ``least`` characters) that tells each UUID from the others of
    the list, written ``…tail``; a UUID no longer than its tail stays whole; ``None`` is ``N/A``."""
    known = [u for u in uuids if u]
    length = least
    longest = max((len(u) for u in known), default=0)
    while length < longest and len({u[-length:] for u in known}) < len(set(known)):
        length += 1
    return [fmt.NA if not u else u if len(u) <= length + 1 else "…" + u[-length:] for u in uuids]


def text_meter(ratio: float | None, width: int) -> str:
    """A meter drawn with block characters in eighths of a cell (``█████▌    ``), ``width`` cells."""
    if ratio is None or width <= 0:
        return " " * max(0, width)
    eighths = round(max(0.0, min(1.0, ratio)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)[:width]


def level_style(ratio: float | None) -> str | None:
    """``ok`` below 50 %, ``warn`` below 80 %, ``bad`` from 80 % (as the meters' colours)."""
    if ratio is None:
        return "dim"
    return "ok" if ratio < 0.5 else "warn" if ratio < 0.8 else "bad"


@dataclass(frozen=True)
class GpuRow:
    """One line of the compact GPU table: the GPU, its UUID as shown, its XID state."""

    gpu: GpuInfo
    uuid_text: str
    xid_severity: str | None

    @property
    def memory_ratio(self) -> float | None:
        g = self.gpu
        return (
            None
            if g.memory_used_bytes is None or not g.memory_total_bytes
            else g.memory_used_bytes / g.memory_total_bytes
        )


def gpu_rows(gpus: Sequence[GpuInfo], severities: Sequence[str | None] = ()) -> list[GpuRow]:
    """The compact table's rows, UUIDs cut to their distinguishing tail."""
    tails = uuid_tails([g.uuid for g in gpus])
    severities = list(severities) + [None] * (len(gpus) - len(severities))
    return [GpuRow(g, tail, severity) for g, tail, severity in zip(gpus, tails, severities, strict=False)]


def _util(row: GpuRow) -> str:
    g = row.gpu
    if g.lost:
        return "LOST"
    if g.unreadable:
        return "ERROR"
    if g.stale:
        return "STALE"
    if g.utilization_ratio is None and g.mig_enabled:
        return "MIG"
    return fmt.pct(g.utilization_ratio)


def _note(row: GpuRow) -> str:
    """Why the GPU needs a look, in a few words (whole in ``GPU_COLUMNS``' 36 characters, one thing at
    a time): ``fell off the bus: reset or reboot``, ``stale for 14s: a driver call hangs``, ..."""
    g = row.gpu
    if g.lost:
        return "fell off the bus: reset or reboot"
    if g.unreadable:
        return f"no NVML reading ({g.unreadable}): a failing board; drain and reset it"
    notes = []
    if g.stale:
        age = f" for {fmt.age(g.reading_age_seconds)}" if g.reading_age_seconds is not None else ""
        notes.append(f"stale{age}: a driver call hangs")
    if row.xid_severity:
        notes.append(f"XID {row.xid_severity}")
    if g.ecc_uncorrected_total:
        notes.append(f"ECC uncorrected {g.ecc_uncorrected_total}")
    reasons = [r for r in (g.throttle_reasons or ()) if r != "gpu_idle"]
    if reasons:
        notes.append("throttle " + ",".join(reasons))
    if g.mig_enabled:
        notes.append(f"MIG x{len(g.mig_instances)}")
    return "; ".join(notes)


def _note_style(row: GpuRow) -> str | None:
    if (
        row.gpu.lost
        or row.gpu.unreadable
        or row.gpu.ecc_uncorrected_total
        or row.xid_severity in ("node_reboot", "gpu_reset", "unknown", "nvlink_fabric")
    ):
        return "bad"
    return "warn" if row.xid_severity or row.gpu.throttle_reasons or row.gpu.stale else "dim"


def _na(row: GpuRow, text: str) -> str:
    return "" if row.gpu.lost else text


#: The compact GPU table, most important first to keep: GPU, UTIL, MEM and NOTE never drop; the
#: utilisation bar goes first, then FAN, SM clock and UUID, then MEM%, then TEMP and POWER. NOTE (why
#: the GPU needs a look) keeps 36 characters before it shrinks, so at 80 columns it says
#: ``XID gpu_reset; throttle sw_power_cap`` whole, and FAN, UUID and SM clock give way for it; in
#: the side-by-side pane (79 wide at 200 columns) MEM% gives way too (MEMORY says it in bytes).
#: Its wordings (``_note``) are kept within those 36 characters: the UTIL column already says
#: ``LOST`` or ``STALE``, and Enter opens the GPU in full.
GPU_COLUMNS = (
    Column("gpu", "GPU", 4, lambda r: r.gpu.index, right=True, style=lambda r: "lost" if r.gpu.lost else "accent"),
    Column(
        "util",
        "UTIL",
        5,
        lambda r: r.gpu.utilization_ratio,
        text=_util,
        right=True,
        style=lambda r: "lost" if r.gpu.lost else "dim" if r.gpu.utilization_ratio is None else None,
    ),
    Column(
        "util_bar",
        "",
        10,
        lambda r: r.gpu.utilization_ratio,
        text=lambda r: text_meter(r.gpu.utilization_ratio, 10),
        style=lambda r: "accent",
        priority=6,
    ),
    Column(
        "mem",
        "MEMORY",
        11,
        lambda r: r.gpu.memory_used_bytes,
        right=True,
        text=lambda r: _na(r, f"{fmt.size(r.gpu.memory_used_bytes)}/{fmt.size(r.gpu.memory_total_bytes)}"),
    ),
    Column(
        "mem_pct",
        "MEM%",
        4,
        lambda r: r.memory_ratio,
        right=True,
        text=lambda r: _na(r, fmt.pct(r.memory_ratio)),
        style=lambda r: level_style(r.memory_ratio),
        priority=3,
    ),
    Column(
        "temp",
        "TEMP",
        5,
        lambda r: r.gpu.temperature_celsius,
        right=True,
        text=lambda r: _na(r, fmt.num(r.gpu.temperature_celsius, 0, "°C")),
        style=lambda r: "bad" if (r.gpu.temperature_celsius or 0) >= 85 else None,
        priority=2,
    ),
    Column(
        "power",
        "POWER",
        9,
        lambda r: r.gpu.power_watts,
        right=True,
        priority=2,
        text=lambda r: _na(r, f"{fmt.num(r.gpu.power_watts, 0)}/{fmt.num(r.gpu.power_limit_watts, 0)} W"),
    ),
    Column(
        "sm",
        "SM CLOCK",
        8,
        lambda r: r.gpu.sm_clock_hertz,
        right=True,
        priority=4,
        text=lambda r: _na(r, fmt.hertz(r.gpu.sm_clock_hertz)),
    ),
    Column(
        "fan",
        "FAN",
        4,
        lambda r: r.gpu.fan_speed_ratio,
        right=True,
        priority=5,
        text=lambda r: _na(r, fmt.pct(r.gpu.fan_speed_ratio)),
    ),
    Column(
        "uuid",
        "UUID",
        10,
        lambda r: r.gpu.uuid,
        text=lambda r: r.uuid_text,
        style=lambda r: "dim",
        priority=4,
        min_width=8,
    ),
    Column("note", "NOTE", 0, _note, style=_note_style, min_width=36),
)


def summary_line(f: NodeFigures | None, width: int) -> Line:
    """The node's GPU figures above its GPUs: count, mean utilisation, memory, power, hottest GPU,
    XIDs of the last hour; a figure over only some GPUs says over how many (partial)."""
    if f is None or not f.gpus:
        return []

    def over(count: int) -> str:
        return f" ({count} of {f.gpus} GPUs read)" if f.partial(count) else ""

    def style(count: int) -> str:
        return "warn" if f.partial(count) else "value"

    lost = f", {f.gpus_lost} LOST" if f.gpus_lost else ""
    hottest = fmt.NA if f.hottest_celsius is None else f"{f.hottest_celsius:.0f}°C g{f.hottest_gpu}"
    pieces: list[tuple[str, str | None, int]] = [
        (f" {f.gpus} GPUs{lost}", "lost" if f.gpus_lost else "title", 0),
        ("  util ", "label", 0),
        (fmt.pct(f.gpu_util_mean) + over(f.util_gpus), style(f.util_gpus), 0),
        ("  memory ", "label", 1),
        (fmt.pct(f.gpu_memory_ratio) + over(f.memory_gpus), style(f.memory_gpus), 1),
        ("  power ", "label", 0),
        (fmt.num(f.power_watts, 0, " W") + over(f.power_gpus), style(f.power_gpus), 0),
        ("  hottest ", "label", 2),
        (hottest + over(f.temperature_gpus), style(f.temperature_gpus), 2),
        ("  XID/1h ", "label", 1),
        (
            f"{f.xids_recent}" + (f" worst {f.xid_severity}" if f.xid_severity else ""),
            "bad" if f.xids_recent else "value",
            1,
        ),
    ]
    return fit(pieces, width)


def gpu_block(gpu: GpuInfo, history: tuple[tuple, tuple], width: int, uuid_text: str | None = None) -> list[Line]:
    """One detailed (nvtop) block for ``gpu`` in ``width`` cells: title with the UUID (whole when
    it fits, else ``uuid_text``), UTIL and MEM meters with sparklines, readings, PCIe and ECC,
    throttle reasons, MIG instances, a blank line."""
    name = fmt.one_line(gpu.name) if gpu.name else fmt.NA
    uuid = gpu.uuid or ""
    head = f" GPU{gpu.index} "
    if len(head) + len(name) + len(uuid) + 4 > width and uuid_text:
        uuid = uuid_text
    title: Line = fit([(head, "title", 0), (f" {name}", "value", 2), (f"  {uuid}", "dim", 1)], width)
    if gpu.lost:
        why = "  NVML reports the GPU fell off the bus: no readings; reset the GPU or reboot the node"
        return [title, fit([(" LOST ", "lost", 0), (why, "bad", 0)], width), []]
    if gpu.unreadable:
        why = f"  every NVML reading fails ({gpu.unreadable}): a failing board; drain and reset it"
        return [title, fit([(" ERROR ", "lost", 0), (why, "bad", 0)], width), []]
    meter = max(16, min(40, width // 2 - 6))
    room = max(0, width - meter - 8)
    util_hist, mem_hist = history
    if gpu.utilization_ratio is None and gpu.mig_enabled:
        util_line: Line = [(" UTIL ", "label"), *bar(None, meter, "N/A (MIG)")]
    else:
        util_line = [(" UTIL ", "label"), *bar(gpu.utilization_ratio, meter)]
    util_line.append((" " + spark(util_hist, room), "spark"))
    mem_ratio = (
        None
        if gpu.memory_used_bytes is None or not gpu.memory_total_bytes
        else gpu.memory_used_bytes / gpu.memory_total_bytes
    )
    mem_line: Line = [
        (" MEM  ", "label"),
        *bar(mem_ratio, meter, f"{fmt.size(gpu.memory_used_bytes)}/{fmt.size(gpu.memory_total_bytes)}"),
        (" " + spark(mem_hist, room), "spark"),
    ]
    temp = gpu.temperature_celsius
    power = f"{fmt.num(gpu.power_watts, 0)}/{fmt.num(gpu.power_limit_watts, 0)} W"
    readings = fit(
        [
            (" TEMP ", "label", 0),
            (fmt.num(temp, 0, "°C"), "bad" if (temp or 0) >= 85 else "value", 0),
            ("  POW ", "label", 0),
            (power, "value", 0),
            ("  SM ", "label", 1),
            (fmt.hertz(gpu.sm_clock_hertz), "value", 1),
            ("  FAN ", "label", 2),
            (fmt.pct(gpu.fan_speed_ratio), "value" if gpu.fan_speed_ratio is not None else "na", 2),
        ],
        width,
    )
    readings = _pairs_only(readings)
    pcie = fit(
        [
            (" PCIe RX ", "label", 0),
            (fmt.rate(gpu.pcie_rx_bytes_per_second), "value", 0),
            ("  TX ", "label", 0),
            (fmt.rate(gpu.pcie_tx_bytes_per_second), "value", 0),
            ("  ECC corrected ", "label", 1),
            (fmt.num(gpu.ecc_corrected_total, 0), "value", 1),
            ("  uncorrected ", "label", 1),
            (fmt.num(gpu.ecc_uncorrected_total, 0), "bad" if gpu.ecc_uncorrected_total else "value", 1),
        ],
        width,
    )
    reasons = gpu.throttle_reasons
    throttle: Line = [
        (" THROTTLE ", "label"),
        (
            fmt.NA if reasons is None else ", ".join(reasons) or "none",
            "na" if reasons is None else "warn" if any(r not in ("gpu_idle",) for r in reasons) else "dim",
        ),
    ]
    lines = [title, util_line, mem_line, readings, _pairs_only(pcie), throttle]
    for mig in gpu.mig_instances:
        lines.append(
            [
                (f"   MIG {mig.index} ", "label"),
                (f"GI {mig.gpu_instance_id} CI {mig.compute_instance_id} ", "dim"),
                (f"{fmt.size(mig.memory_used_bytes)}/{fmt.size(mig.memory_total_bytes)}", "value"),
            ]
        )
    lines.append([])
    return lines


def _pairs_only(line: Line) -> Line:
    """``line`` without a trailing label whose value was left out (a label is never shown alone)."""
    if line and line[-1][1] == "label":
        return line[:-1]
    return line


def detail_lines(gpu: GpuInfo, history: tuple[tuple, tuple], width: int, xids: Sequence[XidEvent] = ()) -> list[Line]:
    """One GPU in full: the detailed block with the whole UUID, then PCI bus and driver, then
    ``xids`` (this GPU's XID events of the last hour, the ones its compact row's NOTE counts), one
    line each, newest first: time, code, name, severity class."""
    lines = gpu_block(gpu, history, width)
    if xids:
        lines.insert(-1, [(" XID/1h ", "label"), (fmt.plural(len(xids), "event"), "bad")])
        for x in sorted(xids, key=lambda e: e.time_unix, reverse=True)[:10]:
            lines.insert(
                -1,
                fit(
                    [
                        (f"   {fmt.clock(x.time_unix)} ", "dim", 0),
                        (f"XID {x.xid} ", "bad", 0),
                        (fmt.one_line(x.name), "value", 0),
                        (f"  {x.severity}", fmt.SEVERITY_STYLE.get(x.severity, "warn"), 1),
                    ],
                    width,
                ),
            )
    lines.insert(1, [(" UUID ", "label"), (gpu.uuid or fmt.NA, "value")])
    lines.insert(
        2,
        [
            (" PCI ", "label"),
            (gpu.pci_bus or fmt.NA, "value"),
            ("  driver ", "label"),
            (gpu.driver_version or fmt.NA, "value"),
        ],
    )
    return lines


class GpuDetailScreen(ModalScreen[None]):
    """One GPU of the Node screen in full (Enter on a line of the compact GPU table)."""

    BINDINGS = [Binding("escape,q,enter", "app.pop_screen", "close")]

    def __init__(self, lines: list[Line]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        box = Lines(id="gpu-detail-lines")
        box.set_lines(self.lines)
        with VerticalScroll(id="help-box"):
            yield box
