"""What every screen shares: the status bar, the footer of keys, a filter box, and sorting."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, OptionList
from textual.widgets.option_list import Option

from observe.sources.view import ClusterSnapshot
from observe.tui import fmt
from observe.tui.widgets.lines import Line, Lines
from observe.tui.widgets.table import VirtualTable

if TYPE_CHECKING:
    from observe.tui.app import TopApp


def status_line(snapshot: ClusterSnapshot, title: str, interval: float) -> Line:
    """The top bar: screen, source, node states, refresh interval, last refresh's duration and age."""
    counts: dict[str, int] = {}
    for node in snapshot.nodes:
        counts[node.state] = counts.get(node.state, 0) + 1
    pieces: Line = [(f" {title} ", "title"), (f" {snapshot.source} ", "dim")]
    pieces.append((f" {len(snapshot.nodes)} nodes", "value"))
    for state in ("ok", "stale", "slow", "unreachable", "malformed", "waiting"):
        if counts.get(state):
            pieces.append((f" {counts[state]} {state}", "ok" if state == "ok" else "bad" if state in
                           ("unreachable", "malformed") else "warn"))
    if snapshot.time_unix:
        cycle = fmt.num(snapshot.cycle_seconds, 2, " s") if snapshot.cycle_seconds is not None else fmt.NA
        ago = fmt.now() - snapshot.time_unix
        pieces.append((f"  every {interval:g} s, last took {cycle}, "
                       f"{'just now' if ago < 1 else fmt.duration(ago) + ' ago'}", "dim"))
    else:
        pieces.append(("  waiting for the first refresh…", "dim"))
    return pieces


class TopScreen(Screen):
    """A screen redrawn from each ``ClusterSnapshot`` (``update_snapshot``)."""

    TITLE = ""
    BINDINGS = [Binding("escape", "back", "back")]

    if TYPE_CHECKING:  # every screen of this package runs in a TopApp (observe.tui.app.make_app)
        app: TopApp

    def compose_status(self) -> ComposeResult:
        yield Lines(id="status", classes="status")

    def compose_footer(self) -> ComposeResult:
        yield Footer()

    def on_screen_resume(self) -> None:
        self.update_snapshot(self.app.snapshot)

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        """Redraw from ``snapshot`` (the status bar here; screens add their content)."""
        lines = [status_line(snapshot, self.TITLE, self.app.poller.interval)]
        lines += [[(f" ! {error}", "bad")] for error in snapshot.errors[:3]]
        self.query_one("#status", Lines).set_lines(lines)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()


class TableScreen(TopScreen):
    """A screen around one ``VirtualTable``: ``s``/F6 sort menu, ``I`` invert, ``/`` filter."""

    BINDINGS = [
        Binding("s,f6", "sort_menu", "sort"),
        Binding("I", "invert", "invert", show=False),
        Binding("slash", "filter", "filter"),
        Binding("escape", "back", "back"),
    ]

    def compose_filter(self) -> ComposeResult:
        yield Input(placeholder="filter: type to narrow, Enter keeps it, Esc clears", id="filter")

    @property
    def table(self) -> VirtualTable:
        return self.query_one(VirtualTable)

    def on_mount(self) -> None:
        self.table.focus()
        self.update_snapshot(self.app.snapshot)

    def action_sort_menu(self) -> None:
        table = self.table

        def chosen(key: str | None) -> None:
            if key is not None:
                table.sort_by(key)

        self.app.push_screen(SortMenu(table), chosen)

    def action_invert(self) -> None:
        self.table.invert()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.table.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.remove_class("shown")
            self.table.focus()

    def action_back(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_class("shown") or box.value:
            box.value = ""
            box.remove_class("shown")
            self.table.set_filter("")
            self.table.focus()
            return
        super().action_back()


class SortMenu(ModalScreen[str | None]):
    """htop's "Sort by" menu: the table's columns; the current one is highlighted."""

    BINDINGS = [Binding("escape,q", "dismiss_none", "close")]

    def __init__(self, table: VirtualTable) -> None:
        super().__init__()
        self.table = table

    def compose(self) -> ComposeResult:
        options = [Option(f"{c.title or c.key}", id=c.key) for c in self.table.columns]
        menu = OptionList(*options, id="sort-menu")
        menu.border_title = "Sort by"
        with Vertical(id="sort-box"):
            yield menu

    def on_mount(self) -> None:
        menu = self.query_one(OptionList)
        keys = [c.key for c in self.table.columns]
        menu.highlighted = keys.index(self.table.sort_key) if self.table.sort_key in keys else 0
        menu.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
