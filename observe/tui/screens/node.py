"""The Node screen: htop on the left (CPU per core, memory, swap, load, tasks, uptime, processes),
nvtop on the right (one block per GPU: utilisation and memory meters with their history,
temperature, power, SM clock, PCIe, throttle reasons; LOST and N/A (MIG) shown as such)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll

from observe.model import GpuInfo, NodeSnapshot
from observe.sources.view import ClusterSnapshot, NodeStatus
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.screens.cluster import STATE_STYLE
from observe.tui.widgets.lines import Line, Lines, bar, spark
from observe.tui.widgets.table import Column, VirtualTable

#: Above this many cores the CPU meters collapse into one average meter (as the issue asks).
MAX_CORE_METERS = 128


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


def process_rows(snapshot: NodeSnapshot) -> list[ProcessRow]:
    """The node's processes joined with their GPU memory (summed over GPUs) by pid."""
    gpu_mem: dict[int, int | None] = {}
    gpus: dict[int, list[str]] = {}
    for p in snapshot.gpu_processes:
        used = p.used_memory_bytes
        known = gpu_mem.get(p.pid)
        gpu_mem[p.pid] = None if used is None and known is None else (known or 0) + (used or 0)
        gpus.setdefault(p.pid, []).append(str(p.gpu))
    rows = [ProcessRow(p.pid, p.user, p.state, p.cpu_cores, p.memory_ratio, p.cpu_seconds, gpu_mem.get(p.pid),
                       ",".join(gpus.get(p.pid, [])), p.command or p.name) for p in snapshot.processes]
    listed = {p.pid for p in snapshot.processes}
    for p in snapshot.gpu_processes:  # not in the agent's /proc: keep the row, user unknown
        if p.pid not in listed:
            listed.add(p.pid)
            rows.append(ProcessRow(p.pid, p.user, None, None, None, None, gpu_mem.get(p.pid), ",".join(gpus[p.pid]),
                                   p.command or p.name))
    return rows


PROCESS_COLUMNS = (
    Column("pid", "PID", 7, lambda p: p.pid, right=True, style=lambda p: "accent"),
    Column("user", "USER", 9, lambda p: p.user, text=lambda p: p.user or "?",
           style=lambda p: None if p.user else "dim"),
    Column("cpu", "CPU%", 6, lambda p: p.cpu_ratio, right=True,
           text=lambda p: fmt.NA if p.cpu_ratio is None else f"{p.cpu_ratio * 100:.1f}",
           style=lambda p: "dim" if p.cpu_ratio is None else "warn" if p.cpu_ratio >= 0.9 else None),
    Column("mem", "MEM%", 5, lambda p: p.memory_ratio, right=True,
           text=lambda p: fmt.NA if p.memory_ratio is None else f"{p.memory_ratio * 100:.1f}",
           style=lambda p: "dim" if p.memory_ratio is None else None),
    Column("time", "TIME+", 9, lambda p: p.cpu_seconds, text=lambda p: fmt.cpu_time(p.cpu_seconds), right=True),
    Column("gpu_mem", "GPU MEM", 8, lambda p: p.gpu_memory_bytes, right=True,
           text=lambda p: fmt.size(p.gpu_memory_bytes) if p.gpus else "",
           style=lambda p: "accent" if p.gpus else None),
    Column("gpus", "GPU", 4, lambda p: p.gpus or None, text=lambda p: p.gpus),
    Column("command", "COMMAND", 0, lambda p: p.command, text=lambda p: fmt.one_line(p.command)),
)


def host_lines(status: NodeStatus, snapshot: NodeSnapshot | None, width: int) -> list[Line]:
    """htop's header: one meter per core (two columns), Mem, Swp, then Tasks, Load, Uptime."""
    state = status.state
    head: Line = [(f" {status.name} ", "title"), (f" {state} ", STATE_STYLE.get(state, "dim")),
                  (f" {_updated(status.age(fmt.now()))}", "dim" if state == "ok" else "warn")]
    if status.error:
        head.append((f"  {status.error}", "bad"))
    lines = [head]
    if snapshot is None:
        text = " loading this node's snapshot…" if status.figures is not None else " no data from this node yet"
        return lines + [[(text, "dim")]]
    host = snapshot.host
    cores = host.cpu.core_busy_ratios
    meter = max(12, (width - 2) // 2 - 6)
    if cores and len(cores) <= MAX_CORE_METERS:
        half = math.ceil(len(cores) / 2)
        for i in range(half):
            line: Line = [(f"{i:>4} ", "label"), *bar(cores[i], meter)]
            if i + half < len(cores):
                line += [(f" {i + half:>4} ", "label"), *bar(cores[i + half], meter)]
            lines.append(line)
    else:
        label = f"{host.cpu_count} CPUs" if host.cpu_count else "CPU"
        lines.append([(f"{'Avg':>4} ", "label"), *bar(host.cpu.busy_ratio, 2 * meter + 6), (f" {label}", "dim")])
    mem = host.memory
    big = 2 * meter + 6
    lines.append([(" Mem ", "label"), *bar(_ratio(mem.used_bytes, mem.total_bytes), big,
                                            f"{fmt.size(mem.used_bytes)}/{fmt.size(mem.total_bytes)}")])
    lines.append([(" Swp ", "label"), *bar(_ratio(mem.swap_used_bytes, mem.swap_total_bytes), big,
                                            f"{fmt.size(mem.swap_used_bytes)}/{fmt.size(mem.swap_total_bytes)}")])
    running = host.processes_by_state.get("running")
    lines.append([(" Tasks: ", "label"), (f"{host.processes:,}", "value"), (", ", "label"),
                  (f"{host.threads:,} thr", "value"),
                  (f"; {running if running is not None else fmt.NA} running", "label"),
                  ("   Load average: ", "label"),
                  (" ".join(fmt.num(v, 2) for v in (host.load1, host.load5, host.load15)), "value"),
                  ("   Uptime: ", "label"), (fmt.duration(host.uptime_seconds), "value")])
    for notice in snapshot.agent.notices:
        lines.append([(f" ! {fmt.one_line(notice)}", "warn")])
    return lines


def _updated(age: float | None) -> str:
    """``updated now``, ``updated 12s ago``, ``no data yet``."""
    if age is None:
        return "no data yet"
    return "updated now" if age < 1 else f"updated {fmt.duration(age)} ago"


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


def gpu_lines(gpu: GpuInfo, history: tuple[tuple, tuple], width: int) -> list[Line]:
    """One nvtop block for ``gpu``: title, UTIL and MEM meters with sparklines, then the readings."""
    title: Line = [(f" GPU{gpu.index} ", "title"), (f" {fmt.one_line(gpu.name) if gpu.name else fmt.NA}", "value"),
                   (f"  {gpu.uuid or ''}", "dim")]
    if gpu.lost:
        return [title, [(" LOST ", "lost"), ("  NVML reports the GPU fell off the bus: no readings; reset the GPU "
                                               "or reboot the node", "bad")], []]
    meter = max(16, min(40, width // 2 - 6))
    room = max(0, width - meter - 8)
    util_hist, mem_hist = history
    if gpu.utilization_ratio is None and gpu.mig_enabled:
        util_line: Line = [(" UTIL ", "label"), *bar(None, meter, "N/A (MIG)")]
    else:
        util_line = [(" UTIL ", "label"), *bar(gpu.utilization_ratio, meter)]
    util_line.append((" " + spark(util_hist, room), "spark"))
    mem_ratio = _ratio(gpu.memory_used_bytes, gpu.memory_total_bytes)
    mem_line: Line = [(" MEM  ", "label"), *bar(mem_ratio, meter,
                                                f"{fmt.size(gpu.memory_used_bytes)}/{fmt.size(gpu.memory_total_bytes)}"),
                      (" " + spark(mem_hist, room), "spark")]
    temp = gpu.temperature_celsius
    power = f"{fmt.num(gpu.power_watts, 0)}/{fmt.num(gpu.power_limit_watts, 0)} W"
    readings: Line = [(" TEMP ", "label"), (fmt.num(temp, 0, "°C"), "bad" if (temp or 0) >= 85 else "value"),
                      ("  POW ", "label"), (power, "value"),
                      ("  SM ", "label"), (fmt.hertz(gpu.sm_clock_hertz), "value"),
                      ("  FAN ", "label"),
                      (fmt.pct(gpu.fan_speed_ratio), "value" if gpu.fan_speed_ratio is not None else "na")]
    pcie: Line = [(" PCIe ", "label"), ("RX ", "label"), (fmt.rate(gpu.pcie_rx_bytes_per_second), "value"),
                  ("  TX ", "label"), (fmt.rate(gpu.pcie_tx_bytes_per_second), "value"),
                  ("  ECC ", "label"),
                  (f"{fmt.num(gpu.ecc_corrected_total, 0)}/{fmt.num(gpu.ecc_uncorrected_total, 0)}",
                   "bad" if gpu.ecc_uncorrected_total else "value")]
    reasons = gpu.throttle_reasons
    throttle: Line = [(" THROTTLE ", "label"),
                      (fmt.NA if reasons is None else ", ".join(reasons) or "none",
                       "na" if reasons is None else "warn" if any(r not in ("gpu_idle",) for r in reasons) else "dim")]
    lines = [title, util_line, mem_line, readings, pcie, throttle]
    for mig in gpu.mig_instances:
        lines.append([(f"   MIG {mig.index} ", "label"),
                      (f"GI {mig.gpu_instance_id} CI {mig.compute_instance_id} ", "dim"),
                      (f"{fmt.size(mig.memory_used_bytes)}/{fmt.size(mig.memory_total_bytes)}", "value")])
    lines.append([])
    return lines


class NodeScreen(TableScreen):
    """One node, htop and nvtop side by side."""

    TITLE = "Node"

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        with Horizontal(id="node-body"):
            with Vertical(id="htop"):
                yield Lines(id="host")
                yield VirtualTable(PROCESS_COLUMNS, row_key=lambda p: p.pid,
                                   search_text=lambda p: f"{p.pid} {p.user or ''} {p.command or ''}",
                                   sort_key="cpu", reverse=True, empty="processes: loading…", id="processes")
            with VerticalScroll(id="nvtop"):
                yield Lines(id="gpus")
        yield from self.compose_filter()
        yield from self.compose_footer()

    def on_mount(self) -> None:  # TableScreen.on_mount runs next (Textual calls both)
        self.app.set_focus_node(self.node)

    def on_unmount(self) -> None:
        self.app.set_focus_node(None)

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        status = snapshot.node(self.node) or NodeStatus(name=self.node, source="", state="waiting")
        snap = status.snapshot
        width = self.query_one("#htop").size.width or 80
        self.query_one("#host", Lines).set_lines(host_lines(status, snap, width))
        table = self.table
        if snap is not None:
            table.empty = "no processes"
            table.set_rows(process_rows(snap))
        else:
            table.empty = "processes: loading…" if status.figures is not None else "no data from this node yet"
            table.set_rows([])
        gpu_width = self.query_one("#nvtop").size.width or 80
        if snap is None:
            lines: list[Line] = [[(" GPUs: loading…" if status.figures is not None else " GPUs: no data yet", "dim")]]
        elif not snap.gpus:
            reason = snap.agent.sources.get("nvml")
            why = f" {fmt.one_line(reason)}" if reason and reason != "ok" else ""
            lines = [[(" no GPUs", "title")], [(why, "dim")]]
        else:
            history = self.app.poller.history
            lines = [line for gpu in snap.gpus
                     for line in gpu_lines(gpu, history.get(status.name, gpu.index), gpu_width)]
        self.query_one("#gpus", Lines).set_lines(lines)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        event.stop()  # a process has nowhere further to go
