"""A table that costs the same with 10 rows or 10,000: htop's process list as a Textual widget.

Only the rows on screen are formatted, each time they are drawn (Textual's line API); a refresh
replaces the row objects and re-sorts them (one ``list.sort``), nothing else. Rows are any
objects; each ``Column`` knows how to read a sort value from a row and how to show it. Cell
styles are names of component classes (``table--ok``, ``table--bad``, ...) whose colours live in
the ``.tcss`` file. Text is drawn as plain segments, never parsed as markup.

Keys: up/down/page up/page down/home/end move the cursor; Enter posts ``VirtualTable.Selected``.
The cursor stays on the same row (by key) across refreshes and re-sorts.

Narrow terminals: columns have a ``priority`` and a ``min_width``; when they do not fit, the table
first shrinks the fill column to its ``min_width``, then shrinks the other shrinkable columns to
theirs, then drops columns, the highest ``priority`` number first (``0`` never drops), and only
then shrinks the fill column further (``column_layout``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

#: Cell style names a column's ``style`` may return (component classes ``table--<name>``).
STYLES = ("ok", "warn", "bad", "dim", "accent", "lost")


@dataclass(frozen=True)
class Column:
    """One column.

    Attributes:
        key: a stable name (for sorting by it). title: the header text.
        width: characters; ``0`` means "take the room that is left" (one column at most).
        value: row -> the value sorted on (``None`` sorts last whichever the direction).
        text: row -> the cell text (default: ``str(value)``).
        style: row -> a style name from ``STYLES`` or ``None``.
        right: right-align (numbers).
        priority: ``0`` never dropped; on a narrow terminal columns with higher numbers are
            dropped first (ties: the rightmost first).
        min_width: the column may shrink to this many characters before any column is dropped
            (default: ``width``; for the fill column, the room it keeps before others drop).
        regrow: when columns were dropped, this column widens back (towards ``width``) with the
            room they left before the fill column takes it (the lowest ``priority`` first); columns
            that would drop after the first such column drop early when that gives it its whole
            ``width``.
        cut_middle: a cell too long is cut in the middle (``127.0…1:21999``), keeping its end,
            where names and addresses differ (a port, a node's number); else at the end.
    """

    key: str
    title: str
    width: int
    value: Callable[[Any], Any]
    text: Callable[[Any], str] | None = None
    style: Callable[[Any], str | None] | None = None
    right: bool = False
    priority: int = 0
    min_width: int | None = None
    regrow: bool = False
    cut_middle: bool = False

    @property
    def least(self) -> int:
        """The narrowest this column gets before columns are dropped."""
        return self.min_width if self.min_width is not None else (self.width or 8)


def cut_cell(text: str, width: int, middle: bool = False) -> str:
    """``text`` cut to ``width`` characters with ``…``: at the end, or with ``middle`` in the middle,
    keeping the longer part at the end (``127.0.0.1:21999`` at 14 -> ``127.0…1:21999``)."""
    if len(text) <= width:
        return text
    if not middle or width < 5:
        return text[: max(0, width - 1)] + "…"
    tail = (width - 1) // 2 + (width - 1) % 2
    head = width - 1 - tail
    return text[:head] + "…" + text[len(text) - tail :]


#: The fill column never gets narrower than this, whatever the terminal.
FILL_FLOOR = 4


def column_layout(columns: Sequence[Column], total: int) -> list[tuple[Column, int]]:
    """The columns shown in ``total`` characters and their widths (one space between columns).

    Order of giving way: the fill column (``width == 0``) shrinks to its ``min_width``; other
    columns shrink to their ``min_width``; columns are dropped, highest ``priority`` first
    (``0`` never); a ``regrow`` column widens back with the room left (the lowest ``priority``
    first), and when that room is not enough for the first one's whole ``width``, the columns that
    would drop after it (higher ``priority``, not ``regrow``) drop too, highest first, if that gives
    it its whole width (a cut name costs more than a figure the screen can spare); the fill column shrinks to
    ``FILL_FLOOR``. The fill column takes what is left.
    """
    shown = list(columns)
    widths = {id(c): (c.least if c.width == 0 else c.width) for c in shown}

    def used() -> int:
        return sum(widths[id(c)] for c in shown) + max(0, len(shown) - 1)

    excess = used() - total
    for column in sorted(
        (c for c in shown if c.width and c.least < c.width), key=lambda c: (-c.priority, -shown.index(c))
    ):
        if excess <= 0:
            break
        cut = min(excess, widths[id(column)] - column.least)
        widths[id(column)] -= cut
        excess -= cut
    while used() > total:
        droppable = [c for c in shown if c.priority > 0]
        if not droppable:
            break
        drop = max(droppable, key=lambda c: (c.priority, shown.index(c)))
        shown.remove(drop)
    regrow = sorted((c for c in shown if c.regrow and c.width), key=lambda c: c.priority)
    for column in regrow:
        widths[id(column)] += max(0, min(total - used(), column.width - widths[id(column)]))
        short = column.width - widths[id(column)] if column is regrow[0] else 0
        spare = total - used()
        given: list[Column] = []
        for other in sorted(
            (c for c in shown if c.priority > column.priority and not c.regrow and c.width),
            key=lambda c: (-c.priority, -shown.index(c)),
        ):
            if spare >= short:
                break
            given.append(other)
            spare += widths[id(other)] + 1
        if short > 0 and spare >= short:
            for other in given:
                shown.remove(other)
            widths[id(column)] = column.width
    fill = next((c for c in shown if c.width == 0), None)
    if fill is not None:
        others = sum(widths[id(c)] for c in shown if c is not fill) + max(0, len(shown) - 1)
        widths[id(fill)] = max(FILL_FLOOR, total - others)
    return [(c, widths[id(c)]) for c in shown]


class _RowMessage(Message):
    """A message about one row of a ``VirtualTable``."""

    def __init__(self, table: VirtualTable, row: Any) -> None:
        super().__init__()
        self.table = table
        self.row = row

    @property
    def control(self) -> VirtualTable:
        return self.table


class VirtualTable(Widget, can_focus=True):
    """A sortable, filterable table drawing only its visible rows.

    Args:
        columns: the columns, left to right.
        row_key: row -> a key identifying it across refreshes (the cursor follows it).
        search_text: row -> the text ``/`` filters on.
        sort_key: the column sorted on at first; reverse: descending at first.
    """

    COMPONENT_CLASSES = {
        "table--header",
        "table--sorted",
        "table--cursor",
        "table--empty",
        *(f"table--{name}" for name in STYLES),
    }
    BINDINGS = [
        Binding("up,k", "cursor(-1)", "up", show=False),
        Binding("down,j", "cursor(1)", "down", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "cursor_to(0)", show=False),
        Binding("end", "cursor_to(-1)", show=False),
        Binding("enter", "select", "open", show=False),
    ]

    cursor = reactive(0, always_update=True, repaint=True)

    class Highlighted(_RowMessage):
        """The cursor moved to another row (or the rows under it changed)."""

    class Selected(_RowMessage):
        """Enter (or a double click) on a row."""

    def __init__(
        self,
        columns: Sequence[Column],
        row_key: Callable[[Any], Any],
        search_text: Callable[[Any], str] | None = None,
        sort_key: str | None = None,
        reverse: bool = False,
        empty: str = "nothing to show",
        *,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.columns = list(columns)
        self.row_key = row_key
        self.search_text = search_text
        self.sort_key = sort_key or self.columns[0].key
        self.reverse = reverse
        self.filter = ""
        self.empty = empty
        self._all: list[Any] = []
        self.rows: list[Any] = []
        self._held_key: Any = None  # the cursor's row key kept by ``release``
        self._top = 0
        self._styles: dict[str, Style] = {}
        self._layouts: dict[int, list[tuple[Column, int]]] = {}

    # -- data -----------------------------------------------------------------------------------

    def set_rows(self, rows: Sequence[Any]) -> None:
        """Replace the rows (re-sorted and re-filtered; the cursor stays on its row)."""
        self._all = list(rows)
        self._apply()

    def release(self) -> None:
        """Drop the rows while the table is out of sight (its screen is covered), keeping the
        cursor's row key: the next ``set_rows`` puts the cursor back on that row. Rows of a
        covered screen would otherwise stay alive for the garbage collector to walk (at 4,096
        nodes, a whole generation of node objects per covered screen)."""
        current = self.current_row
        if current is not None:
            self._held_key = self.row_key(current)
        self._all = []
        self.rows = []
        self.refresh()  # and Textual's cached drawing of them

    def forget_cursor(self) -> None:
        """The next rows start with the cursor on the first row (they are another node's)."""
        self._held_key = None
        self.cursor = 0
        self._top = 0

    def set_columns(self, columns: Sequence[Column]) -> None:
        """Replace the columns (the sort column stays when it is still there)."""
        self.columns = list(columns)
        self._layouts = {}
        if self._column(self.sort_key) is None:
            self.sort_key = self.columns[0].key
        self._apply()

    def sort_by(self, key: str, reverse: bool | None = None) -> None:
        """Sort on column ``key``; choosing the current column again flips the direction."""
        if reverse is None:
            reverse = (not self.reverse) if key == self.sort_key else self._default_reverse(key)
        self.sort_key, self.reverse = key, reverse
        self._apply()

    def invert(self) -> None:
        """Flip the sort direction (htop's ``I``)."""
        self.sort_by(self.sort_key, not self.reverse)

    def set_filter(self, text: str) -> None:
        """Keep only rows whose search text contains ``text`` (case-insensitive); ``""`` shows all."""
        self.filter = text.lower()
        self._apply()

    def _default_reverse(self, key: str) -> bool:
        column = self._column(key)
        return bool(column and column.right)  # numbers: biggest first, as htop does

    def _column(self, key: str) -> Column | None:
        return next((c for c in self.columns if c.key == key), None)

    def _apply(self) -> None:
        current = self.current_row
        current_key = self._held_key if current is None else self.row_key(current)
        self._held_key = None
        rows = self._all
        if self.filter and self.search_text is not None:
            needle = self.filter
            rows = [r for r in rows if needle in self.search_text(r).lower()]
        column = self._column(self.sort_key)
        if column is not None:
            value = column.value
            present = [r for r in rows if value(r) is not None]
            absent = [r for r in rows if value(r) is None]
            try:
                present.sort(key=value, reverse=self.reverse)
            except TypeError:  # mixed types in a column: compare their text
                present.sort(key=lambda r: str(value(r)), reverse=self.reverse)
            rows = present + absent
        self.rows = list(rows)
        index = 0
        if current_key is not None:
            index = next(
                (i for i, r in enumerate(self.rows) if self.row_key(r) == current_key),
                min(self.cursor, len(self.rows) - 1),
            )
        self.cursor = max(0, min(index, len(self.rows) - 1))
        self._scroll_to_cursor()
        self.refresh()

    @property
    def current_row(self) -> Any:
        """The row under the cursor, or ``None``."""
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    # -- cursor -------------------------------------------------------------------------------

    def watch_cursor(self) -> None:
        self.post_message(self.Highlighted(self, self.current_row))

    @property
    def _body_height(self) -> int:
        return max(1, self.size.height - 1)

    def _scroll_to_cursor(self) -> None:
        height = self._body_height
        if self.cursor < self._top:
            self._top = self.cursor
        elif self.cursor >= self._top + height:
            self._top = self.cursor - height + 1
        self._top = max(0, min(self._top, max(0, len(self.rows) - height)))

    def action_cursor(self, delta: int) -> None:
        if self.rows:
            self.cursor = max(0, min(len(self.rows) - 1, self.cursor + delta))
            self._scroll_to_cursor()

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * self._body_height)

    def action_cursor_to(self, index: int) -> None:
        if self.rows:
            self.cursor = index % len(self.rows)
            self._scroll_to_cursor()

    def action_select(self) -> None:
        if self.current_row is not None:
            self.post_message(self.Selected(self, self.current_row))

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.action_cursor(3)
        event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.action_cursor(-3)
        event.stop()

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 0
            for column, width in self.column_widths(self.size.width):
                if x <= event.x < x + width + 1:
                    self.sort_by(column.key)
                    return
                x += width + 1
            return
        index = self._top + event.y - 1
        if 0 <= index < len(self.rows):
            if index == self.cursor and event.chain >= 2:
                self.action_select()
            self.cursor = index

    def on_resize(self) -> None:
        self._scroll_to_cursor()

    # -- drawing ------------------------------------------------------------------------------

    def column_widths(self, total: int) -> list[tuple[Column, int]]:
        """The columns shown at ``total`` characters and their widths (``column_layout``, cached)."""
        layout = self._layouts.get(total)
        if layout is None:
            layout = self._layouts[total] = column_layout(self.columns, total)
        return layout

    @property
    def shown_columns(self) -> list[Column]:
        """The columns drawn at the table's current width."""
        return [c for c, _ in self.column_widths(self.size.width or 80)]

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        layout = self.column_widths(width)
        if y == 0:
            return self._header(layout, width)
        index = self._top + y - 1
        if index >= len(self.rows):
            if index == 0:
                style = self._style("empty")
                return Strip([Segment(f" {self.empty}".ljust(width)[:width], style)], width)
            return Strip.blank(width, self.rich_style)
        row = self.rows[index]
        base = self.rich_style
        selected = index == self.cursor
        cursor_style = self._style("cursor") if selected else None
        segments = []
        last = len(layout) - 1
        for n, (column, cell_width) in enumerate(layout):
            try:
                value = column.value(row)
                text = column.text(row) if column.text else ("" if value is None else str(value))
                style_name = column.style(row) if column.style else None
            except Exception:  # noqa: BLE001 - one odd value must not take the screen down
                text, style_name = "?", "bad"
            if len(text) > cell_width:
                text = cut_cell(text, cell_width, column.cut_middle)
            text = text.rjust(cell_width) if column.right else text.ljust(cell_width)
            style = base + self._style(style_name) if style_name else base
            if cursor_style is not None:
                style = style + cursor_style
            segments.append(Segment(text, style))
            if n < last:
                segments.append(Segment(" ", cursor_style or base))
        return Strip(segments).adjust_cell_length(width, cursor_style or base)

    def _header(self, layout: list[tuple[Column, int]], width: int) -> Strip:
        header = self._style("header")
        sorted_style = self._style("sorted")
        segments = []
        last = len(layout) - 1
        for n, (column, cell_width) in enumerate(layout):
            title = column.title
            if column.key == self.sort_key:  # the arrow stays when the title is cut
                title = f"{title[: max(0, cell_width - 1)]}{'▼' if self.reverse else '▲'}"
            title = title[:cell_width]
            title = title.rjust(cell_width) if column.right else title.ljust(cell_width)
            segments.append(Segment(title, sorted_style if column.key == self.sort_key else header))
            if n < last:
                segments.append(Segment(" ", header))
        return Strip(segments).adjust_cell_length(width, header)

    def _style(self, name: str) -> Style:
        """The rich style of component class ``table--<name>`` (cached until the CSS changes)."""
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(f"table--{name}")
        return style

    def notify_style_update(self) -> None:
        self._styles = {}
        super().notify_style_update()
