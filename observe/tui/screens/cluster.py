"""The Cluster screen: one row per node (state, age, CPU, memory, GPUs, power, XIDs), sortable."""

from __future__ import annotations

from textual.app import ComposeResult

from observe.sources.view import ClusterSnapshot, NodeFigures, NodeStatus
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.widgets.table import Column, VirtualTable

STATE_STYLE = {"ok": "ok", "stale": "warn", "slow": "warn", "unreachable": "bad", "malformed": "bad", "waiting": "dim"}
#: XID severity class -> cell style.
SEVERITY_STYLE = {"node_reboot": "bad", "gpu_reset": "bad", "unknown": "bad", "nvlink_fabric": "bad",
                  "application": "warn", "informational": "dim"}


def _f(node: NodeStatus) -> NodeFigures:
    return node.figures or NodeFigures()


def _util_text(node: NodeStatus) -> str:
    f = _f(node)
    if f.gpu_util_mean is None and f.mig:
        return "N/A (MIG)"
    return fmt.pct(f.gpu_util_mean) if f.gpus or node.figures is None else ""


def _gpus_text(node: NodeStatus) -> str:
    f = _f(node)
    if node.figures is None:
        return fmt.NA
    return f"{f.gpus}" + (f" {f.gpus_lost} LOST" if f.gpus_lost else "")


def _hot_text(node: NodeStatus) -> str:
    f = _f(node)
    if f.hottest_celsius is None:
        return fmt.NA if f.gpus or node.figures is None else ""
    return f"{f.hottest_celsius:.0f}°C g{f.hottest_gpu}"


def _note(node: NodeStatus) -> str:
    if node.error:
        return node.error
    return node.notices[0] if node.notices else ""


def _age(node: NodeStatus) -> float | None:
    return node.age(fmt.now())


def _level(ratio: float | None) -> str | None:
    if ratio is None:
        return "dim"
    return "bad" if ratio >= 0.9 else "warn" if ratio >= 0.75 else None


COLUMNS = (
    Column("node", "NODE", 22, lambda n: n.name, style=lambda n: "accent"),
    Column("state", "STATE", 11, lambda n: n.state, style=lambda n: STATE_STYLE.get(n.state)),
    Column("age", "AGE", 6, _age, text=lambda n: fmt.age(_age(n)), right=True,
           style=lambda n: None if n.state == "ok" else "warn"),
    Column("cpu", "CPU%", 5, lambda n: _f(n).cpu_ratio, text=lambda n: fmt.pct(_f(n).cpu_ratio), right=True,
           style=lambda n: _level(_f(n).cpu_ratio)),
    Column("mem", "MEM%", 5, lambda n: _f(n).memory_ratio, text=lambda n: fmt.pct(_f(n).memory_ratio), right=True,
           style=lambda n: _level(_f(n).memory_ratio)),
    Column("gpus", "GPUS", 8, lambda n: _f(n).gpus, text=_gpus_text, right=True,
           style=lambda n: "lost" if _f(n).gpus_lost else None),
    Column("util", "GPU UTIL", 9, lambda n: _f(n).gpu_util_mean, text=_util_text, right=True,
           style=lambda n: "dim" if _f(n).gpu_util_mean is None else None),
    Column("util_max", "MAX", 5, lambda n: _f(n).gpu_util_max, right=True,
           text=lambda n: fmt.pct(_f(n).gpu_util_max) if _f(n).gpus or n.figures is None else ""),
    Column("gpu_mem", "GMEM%", 5, lambda n: _f(n).gpu_memory_ratio, right=True,
           text=lambda n: fmt.pct(_f(n).gpu_memory_ratio) if _f(n).gpus or n.figures is None else "",
           style=lambda n: _level(_f(n).gpu_memory_ratio)),
    Column("hot", "HOTTEST", 9, lambda n: _f(n).hottest_celsius, text=_hot_text, right=True,
           style=lambda n: "bad" if (_f(n).hottest_celsius or 0) >= 85 else None),
    Column("power", "POWER", 7, lambda n: _f(n).power_watts, right=True,
           text=lambda n: fmt.num(_f(n).power_watts, 0, " W") if _f(n).gpus or n.figures is None else ""),
    Column("xid", "XID/1h", 6, lambda n: _f(n).xids_recent, right=True,
           text=lambda n: str(_f(n).xids_recent) if n.figures else fmt.NA,
           style=lambda n: SEVERITY_STYLE.get(_f(n).xid_severity or "") if _f(n).xids_recent else "dim"),
    Column("note", "NOTE", 0, _note, style=lambda n: "bad" if n.error else "dim"),
)


class ClusterScreen(TableScreen):
    """Every node; Enter opens the Node screen of the row under the cursor."""

    TITLE = "Cluster"

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield VirtualTable(COLUMNS, row_key=lambda n: n.source,
                           search_text=lambda n: f"{n.name} {n.state} {n.source}", sort_key="node",
                           empty="no nodes yet: waiting for the first refresh", id="nodes")
        yield from self.compose_filter()
        yield from self.compose_footer()

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        self.table.set_rows(snapshot.nodes)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        from observe.tui.screens.node import NodeScreen

        self.app.push_screen(NodeScreen(event.row.name))
