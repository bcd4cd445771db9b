"""The Node screen: htop (CPU per core, memory, swap, load, tasks, uptime, processes) and nvtop (the
node's GPUs, ``observe.tui.screens.gpus``).

Layout follows the terminal: from ``SIDE_BY_SIDE_WIDTH`` columns htop and nvtop stand side by side;
narrower, the GPUs go below the process table, full width. GPUs are a compact table (one line per
GPU: 8 and 16 GPUs fit a 120x40 terminal) or detailed blocks with history; ``c`` switches, and by
default the detailed blocks are used only where every GPU's block fits. A node without GPUs gives
the GPU pane's room back to the process table.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen

from observe.model import NodeSnapshot
from observe.sources.view import XID_WINDOW_SECONDS, ClusterSnapshot, NodeStatus, events_of_gpu, k8s_health
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.screens.gpus import (
    BLOCK_ROWS,
    GPU_COLUMNS,
    GpuDetailScreen,
    GpuRow,
    detail_lines,
    gpu_block,
    gpu_rows,
    summary_line,
    uuid_tails,
)
from observe.tui.widgets.lines import Line, Lines, bar, fit, spark
from observe.tui.widgets.table import Column, VirtualTable

#: Above this many cores the CPU meters collapse into one average meter and a strip of cores.
MAX_CORE_METERS = 128
#: From this many columns htop and nvtop stand side by side.
SIDE_BY_SIDE_WIDTH = 160
#: The narrowest a core meter gets (``  12 [||||   45.0%]``'s meter part).
CORE_METER_MIN = 12
#: htop's one-letter process states (``observe.model.ProcessInfo.state``).
STATE_LETTERS = {"running": "R", "sleeping": "S", "disk_sleep": "D", "stopped": "T", "zombie": "Z", "idle": "I"}


@dataclass(frozen=True)
class ProcessRow:
    """One line of the process table (a process, or a GPU process the agent cannot see in /proc)."""

    pid: int
    user: str | None
    state: str | None
    cpu_ratio: float | None  # htop's CPU% / 100 (1.5 = one and a half cores)
    memory_ratio: float | None
    cpu_seconds: float | None
    gpu_memory_bytes: int | None
    gpus: str
    command: str | None
    rss_bytes: int | None = None

    @property
    def state_letter(self) -> str:
        """htop's S column: R, S, D, T, Z, I; ``?`` when unknown."""
        return STATE_LETTERS.get(self.state or "", "?")


def process_rows(snapshot: NodeSnapshot) -> list[ProcessRow]:
    """The node's processes joined with their GPU memory (summed over GPUs) by pid."""
    gpu_mem: dict[int, int | None] = {}
    gpus: dict[int, list[str]] = {}
    for p in snapshot.gpu_processes:
        used = p.used_memory_bytes
        known = gpu_mem.get(p.pid)
        gpu_mem[p.pid] = None if used is None and known is None else (known or 0) + (used or 0)
        gpus.setdefault(p.pid, []).append(str(p.gpu))
    rows = [
        ProcessRow(
            p.pid,
            p.user,
            p.state,
            p.cpu_cores,
            p.memory_ratio,
            p.cpu_seconds,
            gpu_mem.get(p.pid),
            ",".join(gpus.get(p.pid, [])),
            p.command or p.name,
            p.rss_bytes,
        )
        for p in snapshot.processes
    ]
    listed = {p.pid for p in snapshot.processes}
    for p in snapshot.gpu_processes:  # not in the agent's /proc: keep the row, user unknown
        if p.pid not in listed:
            listed.add(p.pid)
            rows.append(
                ProcessRow(
                    p.pid,
                    p.user,
                    None,
                    None,
                    None,
                    None,
                    gpu_mem.get(p.pid),
                    ",".join(gpus[p.pid]),
                    p.command or p.name,
                )
            )
    return rows


#: The process table: PID, CPU% and COMMAND never drop, and COMMAND (program and script by their base
#: names, as htop shortens them) shrinks last (to 24 characters before any column is dropped); then,
#: first to last: TIME+, MEM% and GPU, USER (after shrinking to 6), S, RES and GPU MEM. htop's RES is
#: resident memory, S the one-letter state.
PROCESS_COLUMNS = (
    Column("pid", "PID", 7, lambda p: p.pid, right=True, style=lambda p: "accent"),
    Column(
        "user",
        "USER",
        9,
        lambda p: p.user,
        text=lambda p: p.user or "?",
        style=lambda p: None if p.user else "dim",
        priority=3,
        min_width=6,
    ),
    Column(
        "state",
        "S",
        1,
        lambda p: p.state_letter,
        style=lambda p: "ok" if p.state == "running" else "bad" if p.state in ("zombie", "disk_sleep") else None,
        priority=2,
    ),
    Column(
        "cpu",
        "CPU%",
        6,
        lambda p: p.cpu_ratio,
        right=True,
        text=lambda p: fmt.NA if p.cpu_ratio is None else f"{p.cpu_ratio * 100:.1f}",
        style=lambda p: "dim" if p.cpu_ratio is None else "warn" if p.cpu_ratio >= 0.9 else None,
    ),
    Column(
        "mem",
        "MEM%",
        5,
        lambda p: p.memory_ratio,
        right=True,
        text=lambda p: fmt.NA if p.memory_ratio is None else f"{p.memory_ratio * 100:.1f}",
        style=lambda p: "dim" if p.memory_ratio is None else None,
        priority=4,
    ),
    Column(
        "res",
        "RES",
        6,
        lambda p: p.rss_bytes,
        right=True,
        text=lambda p: fmt.size(p.rss_bytes),
        style=lambda p: "dim" if p.rss_bytes is None else None,
        priority=1,
    ),
    Column(
        "time", "TIME+", 9, lambda p: p.cpu_seconds, text=lambda p: fmt.cpu_time(p.cpu_seconds), right=True, priority=5
    ),
    Column(
        "gpu_mem",
        "GPU MEM",
        7,
        lambda p: p.gpu_memory_bytes,
        right=True,
        text=lambda p: fmt.size(p.gpu_memory_bytes) if p.gpus else "",
        style=lambda p: "accent" if p.gpus else None,
        priority=1,
    ),
    Column("gpus", "GPU", 4, lambda p: p.gpus or None, text=lambda p: p.gpus, priority=4),
    Column(
        "command",
        "COMMAND",
        0,
        lambda p: p.command,
        text=lambda p: fmt.one_line(fmt.short_command(p.command)),
        min_width=24,
    ),
)
#: The process table of a node without GPUs: no GPU MEM and GPU columns.
CPU_PROCESS_COLUMNS = tuple(c for c in PROCESS_COLUMNS if c.key not in ("gpu_mem", "gpus"))


def core_rows_budget(height: int) -> int:
    """Rows the per-core CPU meters may take on a screen ``height`` rows high (a quarter of what
    is left after the bars, at least one)."""
    return max(1, (height - 10) // 4)


def cpu_lines(cores: tuple[float, ...], busy: float | None, cpu_count: int, width: int, rows: int) -> list[Line]:
    """htop's CPU meters in ``width`` cells and at most ``rows`` rows: one meter per core in as
    many columns as the rows need, while a meter keeps ``CORE_METER_MIN`` cells; otherwise (or
    above ``MAX_CORE_METERS`` cores) one average meter and a strip with a mark per core."""
    if cores and len(cores) <= MAX_CORE_METERS:
        columns = max(2 if len(cores) > 1 else 1, math.ceil(len(cores) / rows))
        cell = (width - 1) // columns
        if cell - 6 >= CORE_METER_MIN or columns <= 2 and cell - 6 >= 8:
            per_column = math.ceil(len(cores) / columns)
            lines = []
            for i in range(per_column):
                line: Line = []
                for c in range(columns):
                    core = i + c * per_column
                    if core < len(cores):
                        line += [(f"{core:>4} ", "label"), *bar(cores[core], cell - 6), (" ", None)]
                lines.append(line)
            return lines
    label = f"{cpu_count or len(cores)} CPUs" if cpu_count or cores else "CPU"
    meter = max(12, min(60, width - 20))
    lines = [[(f"{'Avg':>4} ", "label"), *bar(busy, meter), (f" {label}", "dim")]]
    if cores:
        room = max(8, width - 7)
        strip = spark(cores, len(cores))
        for start in range(0, len(strip), room):
            lines.append([(" cores " if start == 0 else "       ", "label"), (strip[start : start + room], "spark")])
    return lines


def host_lines(status: NodeStatus, snapshot: NodeSnapshot | None, width: int, height: int = 50) -> list[Line]:
    """htop's header in ``width`` cells for a screen ``height`` rows high: the node's name, state and
    age; CPU meters (``cpu_lines``); Mem and Swp meters side by side; tasks, load and uptime; the
    agent's notices; ``GPUs: none`` with NVML's reason on a node without GPUs."""
    state = status.state
    head: Line = fit(
        [
            (f" {status.name} ", "title", 0),
            (f" {state} ", fmt.STATE_STYLE.get(state, "dim"), 0),
            (f" {_updated(status.age(fmt.now()))}", "dim" if state == "ok" else "warn", 1),
            (f"  {status.error}" if status.error else "", "bad", 0),
        ],
        width,
    )
    lines = [head]
    if snapshot is None:
        text = " loading this node's snapshot…" if status.figures is not None else " no data from this node yet"
        return lines + [[(text, "dim")]]
    host = snapshot.host
    lines += cpu_lines(host.cpu.core_busy_ratios, host.cpu.busy_ratio, host.cpu_count, width, core_rows_budget(height))
    mem = host.memory
    half = max(14, (width - 12) // 2)
    lines.append(
        [
            (" Mem ", "label"),
            *bar(
                _ratio(mem.used_bytes, mem.total_bytes), half, f"{fmt.size(mem.used_bytes)}/{fmt.size(mem.total_bytes)}"
            ),
            ("  Swp ", "label"),
            *bar(
                _ratio(mem.swap_used_bytes, mem.swap_total_bytes),
                half,
                f"{fmt.size(mem.swap_used_bytes)}/{fmt.size(mem.swap_total_bytes)}",
            ),
        ]
    )
    running = host.processes_by_state.get("running")
    lines.append(
        fit(
            [
                (" Tasks: ", "label", 0),
                (f"{host.processes:,}", "value", 0),
                (f", {host.threads:,} thr", "value", 3),
                (f"; {running if running is not None else fmt.NA} running", "label", 2),
                ("  Load average: ", "label", 0),
                (" ".join(fmt.num(v, 2) for v in (host.load1, host.load5, host.load15)), "value", 0),
                ("  Uptime: ", "label", 1),
                (fmt.duration(host.uptime_seconds), "value", 1),
            ],
            width,
        )
    )
    k8s = k8s_health(snapshot.node_health)
    if k8s:
        lines.append(
            [
                (" K8s ", "label"),
                (fmt.shorten(k8s["k8s_note"], max(8, width - 5)), "warn" if k8s["k8s"] == "error" else "bad"),
            ]
        )
    for notice in snapshot.agent.notices:  # two lines at most, wrapped at words: the fix is at the end
        pieces = textwrap.wrap(fmt.one_line(notice), max(8, width - 3), break_on_hyphens=False) or [""]
        if len(pieces) > 2:
            pieces = [pieces[0], fmt.shorten(" ".join(pieces[1:]), max(8, width - 3))]
        lines += [[(" ! " if n == 0 else "   ", "warn"), (piece, "warn")] for n, piece in enumerate(pieces)]
    if not snapshot.gpus:
        reason = snapshot.agent.sources.get("nvml")
        why = (
            f" ({fmt.one_line(reason)})"
            if reason and reason != "ok" and reason not in " ".join(snapshot.agent.notices)
            else ""
        )
        lines.append([(" GPUs: ", "label"), ("none", "dim"), (fmt.shorten(why, max(0, width - 12)), "dim")])
    return lines


def _updated(age: float | None) -> str:
    """``updated now``, ``updated 12s ago``, ``no data yet``."""
    if age is None:
        return "no data yet"
    return "updated now" if age < 1 else f"updated {fmt.duration(age)} ago"


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


class NodeScreen(TableScreen):
    """One node: htop and nvtop, side by side or stacked (``SIDE_BY_SIDE_WIDTH``); ``c`` switches
    the GPUs between compact lines and detailed blocks."""

    TITLE = "Node"
    BINDINGS = [*TableScreen.BINDINGS, Binding("c", "toggle_gpu_view", "compact/detail")]

    def __init__(self, node: str = "") -> None:
        super().__init__()
        self.node = node
        #: ``None`` chooses: detailed blocks only where all of them fit; ``True``/``False`` by ``c``.
        self.compact: bool | None = None
        self._gpu_count = -1

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        with Horizontal(id="node-body"):
            with Vertical(id="htop"):
                yield Lines(id="host")
                yield VirtualTable(
                    PROCESS_COLUMNS,
                    row_key=lambda p: p.pid,
                    search_text=lambda p: f"{p.pid} {p.user or ''} {p.command or ''}",
                    sort_key="cpu",
                    reverse=True,
                    empty="processes: loading…",
                    id="processes",
                )
            with Vertical(id="nvtop"):
                yield Lines(id="gpu-summary")
                yield VirtualTable(
                    GPU_COLUMNS, row_key=lambda r: r.gpu.index, sort_key="gpu", empty="GPUs: loading…", id="gpu-table"
                )
                with VerticalScroll(id="gpu-blocks"):
                    yield Lines(id="gpus")
        yield from self.compose_filter()
        yield from self.compose_footer()

    @property
    def table(self) -> VirtualTable:
        """The table sorting and filtering act on: the GPU table while it has the focus, else
        the process table."""
        focused = self.focused
        if isinstance(focused, VirtualTable) and focused.id == "gpu-table":
            return focused
        return self.query_one("#processes", VirtualTable)

    def show_node(self, node: str) -> None:
        """Show ``node`` from now on (the app keeps one Node screen: ``TopApp.open_node``). Sort,
        filter and the compact/detail choice stay; the cursor starts at the top of another node."""
        if node != self.node:
            self.node = node
            self._gpu_count = -1
            for table in self.query(VirtualTable):
                table.forget_cursor()

    def on_screen_resume(self) -> None:  # TopScreen's runs next and draws (Textual calls both)
        self.top.set_focus_node(self.node)  # this node's full snapshot (processes) from now on

    def on_screen_suspend(self) -> None:  # TopScreen's runs next and releases
        """Covered by a screen that is not a modal, or popped: summaries only again (behind a
        modal, a GPU's detail, this node's figures still show)."""
        if not isinstance(self.app.screen, ModalScreen):
            self.top.set_focus_node(None)

    def on_unmount(self) -> None:
        self.top.set_focus_node(None)

    def action_toggle_gpu_view(self) -> None:
        self.compact = not self._is_compact(self._gpu_count)
        self.update_snapshot(self.top.snapshot)

    def _side_by_side(self) -> bool:
        return (self.size.width or 80) >= SIDE_BY_SIDE_WIDTH

    def _is_compact(self, gpus: int) -> bool:
        if self.compact is not None:
            return self.compact
        height = (self.size.height or 24) - 2
        room = height if self._side_by_side() else height // 2
        return gpus * BLOCK_ROWS > room

    def _arrange(self, gpus: int, compact: bool) -> None:
        """Lay the panes out for this terminal and this node (classes read by top.tcss)."""
        body = self.query_one("#node-body")
        wide = self._side_by_side()
        body.set_class(wide, "wide")
        body.set_class(not wide, "stacked")
        body.set_class(gpus == 0, "no-gpus")
        body.set_class(compact, "compact")
        nvtop = self.query_one("#nvtop")
        if not wide:
            height = (self.size.height or 24) - 2
            want = (gpus + 2) if compact else gpus * BLOCK_ROWS + 1
            nvtop.styles.height = max(3, min(want + 1, height // 2))
        else:
            nvtop.styles.height = "1fr"

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        status = snapshot.node(self.node) or NodeStatus(name=self.node, source="", state="waiting")
        snap = status.snapshot
        gpus = len(snap.gpus) if snap is not None else (status.figures.gpus if status.figures else 0)
        compact = self._is_compact(gpus)
        self._gpu_count = gpus
        self._arrange(gpus, compact)
        wide = self._side_by_side()
        width = self.size.width or 80
        htop_width = (width * 3 // 5 if gpus else width) if wide else width
        self.query_one("#host", Lines).set_lines(host_lines(status, snap, htop_width, self.size.height or 24))
        table = self.query_one("#processes", VirtualTable)
        columns = list(PROCESS_COLUMNS if gpus else CPU_PROCESS_COLUMNS)
        if [c.key for c in table.columns] != [c.key for c in columns]:
            table.set_columns(columns)
        if snap is not None:
            table.empty = "no processes"
            table.set_rows(process_rows(snap))
        else:
            table.empty = "processes: loading…" if status.figures is not None else "no data from this node yet"
            table.set_rows([])
        gpu_width = width - htop_width - 1 if wide else width
        self.query_one("#gpu-summary", Lines).set_lines([summary_line(status.figures, gpu_width)])
        gpu_table = self.query_one("#gpu-table", VirtualTable)
        severities = status.figures.gpu_xid_severities if status.figures else ()
        gpu_table.set_rows(gpu_rows(snap.gpus, severities) if snap is not None else [])
        if snap is None:
            gpu_table.empty = " GPUs: loading…" if status.figures is not None else " GPUs: no data yet"
        if not compact and snap is not None:
            history = self.top.poller.history
            tails = uuid_tails([g.uuid for g in snap.gpus])
            lines = [
                line
                for gpu, tail in zip(snap.gpus, tails, strict=False)
                for line in gpu_block(gpu, history.get(status.name, gpu.index), gpu_width, tail)
            ]
            self.query_one("#gpus", Lines).set_lines(lines)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        event.stop()
        row = event.row
        if isinstance(row, GpuRow):  # a GPU in full: the whole UUID, PCI bus, driver, history
            history = self.top.poller.history.get(self.node, row.gpu.index)
            width = min(100, (self.size.width or 80) - 8)
            status = self.top.snapshot.node(self.node) if self.top.snapshot else None
            recent = [x for x in (status.xid_events if status else ()) if fmt.now() - x.time_unix <= XID_WINDOW_SECONDS]
            xids = events_of_gpu(row.gpu, recent)
            self.app.push_screen(GpuDetailScreen(detail_lines(row.gpu, history, width, xids)))
