"""What every screen shares: the status bar, the footer of keys, a filter box, and sorting."""

from __future__ import annotations

from typing import Protocol, cast

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, OptionList
from textual.widgets.option_list import Option

from observe.sources.view import STATES, ClusterSnapshot
from observe.tui import fmt
from observe.tui.poller import Poller
from observe.tui.widgets.lines import Line, Lines, fit
from observe.tui.widgets.table import VirtualTable

#: Error lines shown under the status bar at most (``e`` shows them all).
STATUS_ERRORS = 3


def status_line(snapshot: ClusterSnapshot, title: str, interval: float, width: int = 200) -> Line:
    """The top bar in ``width`` cells: screen, node count and states (always), then the refresh
    timing and the source's description as room allows (never cut mid-word)."""
    counts: dict[str, int] = {}
    for node in snapshot.nodes:
        counts[node.state] = counts.get(node.state, 0) + 1
    pieces: list[tuple[str, str | None, int]] = [
        (f" {title} ", "title", 0),
        (f" {snapshot.source} ", "dim", 4),
        (f" {fmt.plural(len(snapshot.nodes), 'node')}", "value", 0),
    ]
    for state in STATES:
        if counts.get(state):
            pieces.append(
                (
                    f" {counts[state]:,} {state}",
                    "ok" if state == "ok" else "bad" if state in ("unreachable", "malformed") else "warn",
                    0,
                )
            )
    if snapshot.time_unix:
        cycle = fmt.num(snapshot.cycle_seconds, 2, " s") if snapshot.cycle_seconds is not None else fmt.NA
        ago = fmt.now() - snapshot.time_unix
        pieces.append((f"  every {interval:g} s", "dim", 2))
        pieces.append((f", last took {cycle}", "dim", 3))
        pieces.append((f", {'just now' if ago < 1 else fmt.duration(ago) + ' ago'}", "dim", 1))
    else:
        pieces.append(("  waiting for the first refresh…", "dim", 1))
    return fit(pieces, width)


def error_lines(errors: tuple[str, ...], width: int) -> list[Line]:
    """At most ``STATUS_ERRORS`` lines of ``errors``, each cut at a word boundary; when something
    is left out the last line says ``e`` shows everything."""
    shown = errors[:STATUS_ERRORS]
    cut = len(errors) > len(shown) or any(len(e) + 3 > width for e in shown)
    hint = f"  (e: all {fmt.plural(len(errors), 'message')})" if cut else ""
    lines: list[Line] = []
    for n, error in enumerate(shown):
        tail = hint if n == len(shown) - 1 else ""
        lines.append([(f" ! {fmt.shorten(error, max(8, width - 3 - len(tail)))}", "bad"), (tail, "dim")])
    return lines


class ScreenHost(Protocol):
    """What a screen asks of the app it runs in, beyond Textual's ``App`` (``observe.tui.app.TopApp``
    is the one, and mypy checks it has all of this). Screens name this, not the app, so the app can
    import its screens without the screens importing it back."""

    #: The latest refresh; a screen redraws from it when it comes back into sight.
    snapshot: ClusterSnapshot
    #: The fan-in thread: its refresh ``interval`` (seconds) and the GPUs' recent ``history``.
    poller: Poller

    def drawn(self, screen: Screen) -> None:
        """``screen`` was mounted and drawn for the first time."""

    def open_node(self, node: str) -> None:
        """Show ``node`` on the Node screen, over the screen on top."""

    def set_focus_node(self, node: str | None) -> None:
        """Ask for ``node``'s full snapshot (processes) from now on; ``None`` for summaries only."""


class TopScreen(Screen):
    """A screen redrawn from each ``ClusterSnapshot`` (``update_snapshot``)."""

    @property
    def top(self) -> ScreenHost:
        """The app, as the ``ScreenHost`` it is (its snapshot, poller and the node it shows)."""
        return cast(ScreenHost, self.app)  # every screen here runs in a TopApp (observe.tui.app.make_app)

    TITLE = ""
    BINDINGS = [Binding("escape", "back", "back"), Binding("e", "messages", "messages", show=False)]

    def compose_status(self) -> ComposeResult:
        yield Lines(id="status", classes="status")

    def compose_footer(self) -> ComposeResult:
        yield Footer(compact=True)

    def on_mount(self) -> None:  # a subclass's own on_mount runs first (Textual calls both)
        self.call_after_refresh(self.top.drawn, self)

    def on_screen_resume(self) -> None:
        self.update_snapshot(self.top.snapshot)

    def on_screen_suspend(self) -> None:
        """Another screen covers this one: drop what it holds of the snapshot (``release``), unless
        the cover is a modal (the sort menu, help, a GPU's detail), which shows this screen behind
        it. ``on_screen_resume`` redraws from the latest snapshot."""
        if not isinstance(self.app.screen, ModalScreen):
            self.release()

    def release(self) -> None:
        """Drop per-node data while out of sight. A covered screen's rows would keep a whole
        generation of node objects alive (4,096 at 4,096 nodes) for every full garbage collection to
        walk, holding the GIL (``benchmarks/tui_fanin.py``). Screens with such data override it."""

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        """Redraw from ``snapshot`` (the status bar here; screens add their content)."""
        width = self.size.width or 80
        lines = [status_line(snapshot, self.TITLE, self.top.poller.interval, width)]
        lines += error_lines(snapshot.errors, width)
        self.query_one("#status", Lines).set_lines(lines)

    def on_resize(self) -> None:
        try:
            self.update_snapshot(self.top.snapshot)
        except NoMatches:  # still composing: on_mount draws it
            pass

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide ``back`` (Esc) from the footer on the first screen, where there is nowhere to go back to."""
        if action == "back":
            return len(self.app.screen_stack) > 2
        return True

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()

    def action_messages(self) -> None:
        """Every message of the source (the status bar shows the first few, cut to its width)."""
        from observe.tui.screens.help import MessagesScreen

        self.app.push_screen(MessagesScreen(self.top.snapshot.errors))


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
        self.update_snapshot(self.top.snapshot)

    def release(self) -> None:
        for table in self.query(VirtualTable):
            table.release()

    def action_sort_menu(self) -> None:
        table = self.table

        def chosen(key: str | None) -> None:
            if key is not None:
                table.sort_by(key)

        self.app.push_screen(SortMenu(table), chosen)

    def action_invert(self) -> None:
        self.table.invert()

    def _filtering(self) -> bool:
        try:
            box = self.query_one("#filter", Input)
        except NoMatches:
            return False
        return box.has_class("shown") or bool(box.value)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc also clears a filter, so ``back`` shows on the first screen while one is set."""
        if action == "back" and self._filtering():
            return True
        return super().check_action(action, parameters)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()
        self.refresh_bindings()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.table.set_filter(event.value)
            self.refresh_bindings()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            event.input.remove_class("shown")
            self.table.focus()
            self.refresh_bindings()

    def action_back(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_class("shown") or box.value:
            box.value = ""
            box.remove_class("shown")
            self.table.set_filter("")
            self.table.focus()
            self.refresh_bindings()
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
