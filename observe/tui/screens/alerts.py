"""The Alerts screen: XID events across the cluster, newest first, with the catalogue's meaning and
NVIDIA's recommended action (``observe.xid``); Enter opens the event's node."""

from __future__ import annotations

import textwrap

from textual.app import ComposeResult

from observe.model import XidEvent
from observe.sources.view import ClusterSnapshot
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.widgets.lines import Line, Lines
from observe.tui.widgets.table import Column, VirtualTable
from observe.xid import lookup

#: Priorities: TIME, NODE, XID and MEANING never drop (the event under the cursor is in full
#: below); then, first to last: ACTION, GPU, SEVERITY. NODE shrinks to 12 characters first.
COLUMNS = (
    Column("time", "TIME", 11, lambda x: x.time_unix, text=lambda x: fmt.clock(x.time_unix)),
    Column("node", "NODE", 20, lambda x: x.node, style=lambda x: "accent", min_width=12),
    Column(
        "gpu", "GPU", 4, lambda x: x.gpu, text=lambda x: fmt.NA if x.gpu is None else str(x.gpu), right=True, priority=2
    ),
    Column("xid", "XID", 5, lambda x: x.xid, right=True, style=lambda x: fmt.SEVERITY_STYLE.get(x.severity)),
    Column(
        "severity", "SEVERITY", 13, lambda x: x.severity, style=lambda x: fmt.SEVERITY_STYLE.get(x.severity), priority=1
    ),
    Column("meaning", "MEANING", 0, lambda x: x.name, text=lambda x: fmt.one_line(x.name), min_width=24),
    Column("action", "ACTION", 60, lambda x: x.action, text=lambda x: fmt.one_line(x.action), priority=3, min_width=30),
)


def detail_lines(event: XidEvent | None, width: int = 80) -> list[Line]:
    """The event under the cursor in full: meaning, action, where, the kernel's line; each wrapped
    at word boundaries to ``width`` columns (continuations under the value), never cut."""
    if event is None:
        return [[(" no XID events in the kernel logs of the nodes shown", "dim")]]
    info = lookup(event.xid)
    where = f"node {event.node}, GPU {fmt.NA if event.gpu is None else event.gpu}"
    if event.gpu_uuid:
        where += f" ({event.gpu_uuid})"
    if event.pci_bus:
        where += f", PCI {event.pci_bus}"
    head, severity = f" XID {event.xid} ", f"  [{event.severity}]"
    names = textwrap.wrap(fmt.one_line(event.name or info.name), max(20, width - len(head) - 2)) or [""]
    lines: list[Line] = [[(head, "title"), (f" {names[0]}", "value")]]
    lines += [[(" " * len(head), "label"), (f" {name}", "value")] for name in names[1:]]
    if sum(len(text) for text, _ in lines[-1]) + len(severity) > width:
        lines.append([(" " * len(head), "label")])
    lines[-1].append((severity, fmt.SEVERITY_STYLE.get(event.severity, "dim")))
    fields = [(" where   ", where, "value"), (" action  ", fmt.one_line(event.action or info.action), "warn")]
    if event.process or event.pid is not None:
        fields.append((" process ", f"{fmt.one_line(event.process or '?')} (pid {event.pid})", "value"))
    if event.raw or event.message:
        fields.append((" kernel  ", fmt.one_line(event.raw or event.message), "dim"))
    for label, value, style in fields:
        parts = textwrap.wrap(value, max(20, width - len(label) - 1), break_on_hyphens=False) or [""]
        lines.append([(label, "label"), (parts[0], style)])
        lines += [[(" " * len(label), "label"), (part, style)] for part in parts[1:]]
    return lines


class AlertsScreen(TableScreen):
    """Every XID event the agents report."""

    TITLE = "Alerts"

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield VirtualTable(
            COLUMNS,
            row_key=lambda x: (x.node, x.time_unix, x.xid, x.pci_bus, x.raw),
            search_text=lambda x: f"{x.node} {x.xid} {x.severity} {x.name} {x.raw}",
            sort_key="time",
            reverse=True,
            empty="no XID events",
            id="xids",
        )
        yield Lines(id="xid-detail")
        yield from self.compose_filter()
        yield from self.compose_footer()

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        self.table.set_rows(snapshot.xid_events())
        self._detail()

    def _detail(self) -> None:
        self.query_one("#xid-detail", Lines).set_lines(detail_lines(self.table.current_row, self.app.size.width or 80))

    def on_virtual_table_highlighted(self, _: VirtualTable.Highlighted) -> None:
        self._detail()

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        self.top.open_node(event.row.node)
