"""The Cluster screen: one row per node (state, age, CPU, memory, GPUs, power, XIDs), sortable; the
GPU columns only while some node reports a GPU."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult

from observe.sources.view import ClusterSnapshot, NodeFigures, NodeStatus
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.widgets.table import Column, VirtualTable


def _f(node: NodeStatus) -> NodeFigures:
    return node.figures or NodeFigures()


def mark(text: str, figures: NodeFigures, over: int) -> str:
    """``text`` with ``fmt.PARTIAL`` after it for a figure over only some of ``over`` GPUs; a complete
    figure gets a space instead, so right-aligned numbers line up."""
    return text + (fmt.PARTIAL if figures.partial(over) else " ")


def _gpu_figure(node: NodeStatus, text: str, over: int) -> str:
    """A per-GPU figure's cell: blank on a node without GPUs, ``N/A`` before any data."""
    f = _f(node)
    if node.figures is None:
        return fmt.NA + " "
    if not f.gpus:
        return ""
    return mark(text, f, over)


def _util_text(node: NodeStatus) -> str:
    f = _f(node)
    if f.gpu_util_mean is None and f.mig:
        return "N/A (MIG) "
    return _gpu_figure(node, fmt.pct(f.gpu_util_mean), f.util_gpus)


def _hot_text(node: NodeStatus) -> str:
    f = _f(node)
    text = fmt.NA if f.hottest_celsius is None else f"{f.hottest_celsius:.0f}°C g{f.hottest_gpu}"
    return _gpu_figure(node, text, f.temperature_gpus)


def _note(node: NodeStatus) -> str:
    """The most urgent one line: the pull's error, the node's taint or condition, stale GPUs, a notice."""
    if node.error:
        return node.error
    f = _f(node)
    if f.k8s_note:
        return f.k8s_note
    if f.unreadable_gpus:
        which = ", ".join(map(str, f.unreadable_gpus))
        plural = "s" if len(f.unreadable_gpus) > 1 else ""
        return f"GPU{plural} {which}: no NVML reading ({f.unreadable_why}): a failing board"
    if f.gpus_stale:
        which = ", ".join(map(str, f.stale_gpus))
        return f"GPU{'s' if f.gpus_stale > 1 else ''} {which}: NVML reading stale (a driver call hangs)"
    return node.notices[0] if node.notices else ""


def _note_style(node: NodeStatus) -> str:
    f = _f(node)
    if node.error or f.k8s in ("taint", "fault") or f.unreadable_gpus:
        return "bad"
    return "warn" if f.gpus_stale or f.k8s else "dim"


#: K8S cell -> style: the node carries our taint or condition (bad), or writing them failed (warn).
K8S_STYLE = {"taint": "bad", "fault": "bad", "error": "warn"}


def _age(node: NodeStatus) -> float | None:
    return node.age(fmt.now())


def _level(ratio: float | None) -> str | None:
    if ratio is None:
        return "dim"
    return "bad" if ratio >= 0.9 else "warn" if ratio >= 0.75 else None


def _partial_style(node: NodeStatus, over: int, base: str | None = None) -> str | None:
    return "warn" if _f(node).partial(over) else base


#: Priorities (``observe.tui.widgets.table.column_layout``): NODE, STATE, XID/1h and NOTE never
#: drop; then, first to last, K8S, UTIL MAX and GPU POWER, CPU% and MEM%, AGE and GPU MEM, GPUS
#: and HOT GPU, LOST and UTIL AVG. NODE shrinks to 14 characters first, cut in the middle so its
#: end (a port, a node number) shows. K8S (the node's taint or condition from the agent's node
#: health, a sortable column) goes first because NOTE says the same in words, first
#: (``tainted NodeReboot ...``), so it shows at any width. UTIL MAX (UTIL AVG's spread) and GPU
#: POWER (a sum that says little alone) give way before the host's CPU% and MEM%, which say
#: whether input loading or host memory holds the GPUs back: at 120 columns a fleet with GPUs keeps
#: both. NOTE keeps 24 characters before columns drop, so a pull's reason (``connection refused``,
#: ``no answer within 2.0 s``, ``host name not found``) shows whole at 80 columns beside STATE's
#: ``unreachable`` or ``slow``: HOT GPU gives way for it there (Enter opens the node in full).
COLUMNS = (
    Column("node", "NODE", 22, lambda n: n.name, style=lambda n: "accent", min_width=14, cut_middle=True),
    Column("state", "STATE", 11, lambda n: n.state, style=lambda n: fmt.STATE_STYLE.get(n.state)),
    Column(
        "age",
        "AGE",
        6,
        _age,
        text=lambda n: fmt.age(_age(n)),
        right=True,
        style=lambda n: None if n.state == "ok" else "warn",
        priority=3,
    ),
    Column(
        "cpu",
        "CPU%",
        5,
        lambda n: _f(n).cpu_ratio,
        text=lambda n: fmt.pct(_f(n).cpu_ratio),
        right=True,
        style=lambda n: _level(_f(n).cpu_ratio),
        priority=4,
    ),
    Column(
        "mem",
        "MEM%",
        5,
        lambda n: _f(n).memory_ratio,
        text=lambda n: fmt.pct(_f(n).memory_ratio),
        right=True,
        style=lambda n: _level(_f(n).memory_ratio),
        priority=4,
    ),
    Column(
        "gpus",
        "GPUS",
        5,
        lambda n: _f(n).gpus,
        right=True,
        text=lambda n: fmt.NA if n.figures is None else str(_f(n).gpus),
        priority=2,
    ),
    Column(
        "lost",
        "LOST",
        5,
        lambda n: _f(n).gpus_lost,
        right=True,
        text=lambda n: str(_f(n).gpus_lost) if _f(n).gpus_lost else "",
        style=lambda n: "lost" if _f(n).gpus_lost else None,
        priority=1,
    ),
    Column("k8s", "K8S", 5, lambda n: _f(n).k8s, style=lambda n: K8S_STYLE.get(_f(n).k8s), priority=6),
    Column(
        "util",
        "UTIL AVG",
        10,
        lambda n: _f(n).gpu_util_mean,
        text=_util_text,
        right=True,
        style=lambda n: "dim" if _f(n).gpu_util_mean is None else _partial_style(n, _f(n).util_gpus),
        priority=1,
        min_width=8,
    ),
    Column(
        "util_max",
        "UTIL MAX",
        8,
        lambda n: _f(n).gpu_util_max,
        right=True,
        text=lambda n: _gpu_figure(n, fmt.pct(_f(n).gpu_util_max), _f(n).util_gpus),
        style=lambda n: _partial_style(n, _f(n).util_gpus),
        priority=5,
    ),
    Column(
        "gpu_mem",
        "GPU MEM",
        7,
        lambda n: _f(n).gpu_memory_ratio,
        right=True,
        text=lambda n: _gpu_figure(n, fmt.pct(_f(n).gpu_memory_ratio), _f(n).memory_gpus),
        style=lambda n: _partial_style(n, _f(n).memory_gpus, _level(_f(n).gpu_memory_ratio)),
        priority=3,
    ),
    Column(
        "hot",
        "HOT GPU",
        9,
        lambda n: _f(n).hottest_celsius,
        text=_hot_text,
        right=True,
        style=lambda n: "bad" if (_f(n).hottest_celsius or 0) >= 85 else _partial_style(n, _f(n).temperature_gpus),
        priority=2,
    ),
    Column(
        "power",
        "GPU POWER",
        9,
        lambda n: _f(n).power_watts,
        right=True,
        text=lambda n: _gpu_figure(n, fmt.num(_f(n).power_watts, 0, " W"), _f(n).power_gpus),
        style=lambda n: _partial_style(n, _f(n).power_gpus),
        priority=5,
    ),
    Column(
        "xid",
        "XID/1h",
        7,
        lambda n: _f(n).xids_recent,
        right=True,
        text=lambda n: str(_f(n).xids_recent) if n.figures else fmt.NA,
        style=lambda n: fmt.SEVERITY_STYLE.get(_f(n).xid_severity or "") if _f(n).xids_recent else "dim",
    ),
    Column("note", "NOTE", 0, _note, style=_note_style, min_width=24),
)
#: The GPU columns, left out while no node shown reports a GPU (a CPU-only cluster, the demo): their
#: room goes to MEM% and NOTE, as the Node screen leaves out its GPU columns on a node without GPUs.
GPU_COLUMN_KEYS = ("gpus", "lost", "util", "util_max", "gpu_mem", "hot", "power")
CPU_COLUMNS = tuple(c for c in COLUMNS if c.key not in GPU_COLUMN_KEYS)


def columns_for(nodes: Sequence[NodeStatus]) -> tuple[Column, ...]:
    """``COLUMNS`` when some node reports a GPU (lost ones count), else ``CPU_COLUMNS``; with no
    node answered yet, ``COLUMNS`` (nothing is known to be GPU-less)."""
    answered = [n.figures for n in nodes if n.figures is not None]
    if not answered or any(f.gpus or f.gpus_lost for f in answered):
        return COLUMNS
    return CPU_COLUMNS


class ClusterScreen(TableScreen):
    """Every node; Enter opens the Node screen of the row under the cursor."""

    TITLE = "Cluster"

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield VirtualTable(
            COLUMNS,
            row_key=lambda n: n.source,
            search_text=lambda n: f"{n.name} {n.state} {n.source}",
            sort_key="node",
            empty="no nodes yet: waiting for the first refresh",
            id="nodes",
        )
        yield from self.compose_filter()
        yield from self.compose_footer()

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        table = self.table
        if snapshot.time_unix and not snapshot.nodes:
            table.empty = "no nodes: " + (
                "the source reported problems (above; e shows them in full)"
                if snapshot.errors
                else "no agents given or found"
            )
        columns = columns_for(snapshot.nodes)
        if [c.key for c in table.columns] != [c.key for c in columns]:
            table.set_columns(columns)
        table.set_rows(snapshot.nodes)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        self.top.open_node(event.row.name)
