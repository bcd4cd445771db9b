"""The GPU grid: every GPU of every node in one widget, two GPUs per character cell.

Each cell is an upper half block (``▀``) whose foreground is one GPU and whose background is the
next, so a node of 8 GPUs takes 4 cells and 1,024 such nodes (8,192 GPUs) fit a 200x50 terminal;
nodes follow each other in rows, one blank cell apart when the rows fit, touching otherwise. The
colour says the value of the chosen ``Mode`` (utilisation, memory, temperature, XID errors) on a
scale whose colours live in the ``.tcss`` file (component classes ``gpugrid--*``). A node whose
latest pull failed is hatched (``░``) in its state's colour; a node without GPUs or without data
is one dim dot. Only the rows on screen are drawn (Textual's line API).

Keys: arrows move between nodes, PgUp/PgDn/Home/End; Enter (or a double click) posts
``GpuGrid.Selected`` with the node.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from observe.sources.view import NodeFigures, NodeStatus, worst_severity

#: Steps of a colour scale (component classes ``gpugrid--s0`` .. ``gpugrid--s7``).
LEVELS = 8
#: Temperatures mapped onto the scale: 30 °C is its first step, 90 °C its last.
TEMPERATURE_RANGE = (30.0, 90.0)
#: XID severity class -> its cell class (``observe.xid.SEVERITIES``); no event: ``x-none``.
XID_CLASSES = {
    "informational": "x-info",
    "application": "x-app",
    "nvlink_fabric": "x-reset",
    "gpu_reset": "x-reset",
    "unknown": "x-reset",
    "node_reboot": "x-reboot",
}
#: Cells drawn per frame after new data (``GpuGrid._paint_rows``); a bigger grid takes more frames.
CELLS_PER_PAINT = 2400
#: Node states whose data is not fresh: hatched cells of this class.
STATE_CLASSES = {"stale": "warn", "slow": "warn", "unreachable": "bad", "malformed": "bad"}


@dataclass(frozen=True)
class Mode:
    """One way to colour the grid.

    Attributes:
        key: a stable name. title: what the legend calls it. low, high: the legend's ends.
        cells: a node's figures -> one cell class per GPU (``s0``..``s7``, ``heat0``..``heat7``,
            ``x-*``, ``na``, ``lost``).
    """

    key: str
    title: str
    low: str
    high: str
    cells: Callable[[NodeFigures], list[str]]


_NAMES = {prefix: tuple(f"{prefix}{i}" for i in range(LEVELS)) for prefix in ("s", "heat")}


def _ratios(values: Sequence[float | None], lost: Sequence[bool], prefix: str = "s") -> list[str]:
    """One cell class per GPU: its step of the scale ``prefix`` for a 0..1 value (clamped),
    ``na`` for ``None``, ``lost`` for a lost GPU. The hot path of drawing the grid: plain
    arithmetic, no calls per GPU."""
    names = _NAMES[prefix]
    top = LEVELS - 1
    out = []
    for v, gone in zip(values, lost, strict=False):
        if gone:
            out.append("lost")
        elif v is None or v != v:  # None or NaN
            out.append("na")
        else:
            i = int(v * LEVELS)
            out.append(names[top if i > top else 0 if i < 0 else i])
    return out


def _temperatures(f: NodeFigures) -> list[str]:
    low, high = TEMPERATURE_RANGE
    scaled = [None if t is None else (t - low) / (high - low) for t in f.gpu_temperatures]
    return _ratios(scaled, f.gpu_lost, "heat")


def _xids(f: NodeFigures) -> list[str]:
    """A GPU's own XID severity, or the node's events that name no GPU of it, whichever is worse."""
    out = []
    for own, gone in zip(f.gpu_xid_severities, f.gpu_lost, strict=False):
        severity = worst_severity(s for s in (own, f.xid_unattributed_severity) if s)
        out.append("lost" if gone else XID_CLASSES.get(severity or "", "x-none"))
    return out


MODES: tuple[Mode, ...] = (
    Mode("util", "GPU utilisation", "0%", "100%", lambda f: _ratios(f.gpu_util_ratios, f.gpu_lost)),
    Mode("memory", "GPU memory used", "0%", "100%", lambda f: _ratios(f.gpu_memory_ratios, f.gpu_lost)),
    Mode(
        "temperature",
        "GPU temperature",
        f"{TEMPERATURE_RANGE[0]:.0f}°C",
        f"{TEMPERATURE_RANGE[1]:.0f}°C",
        _temperatures,
    ),
    Mode("xid", "XID errors, last hour", "none", "node_reboot", lambda f: _xids(f)),
)
#: Every cell class the grid uses.
CELL_CLASSES = (
    "na",
    "lost",
    "warn",
    "bad",
    "dim",
    "cursor",
    "x-none",
    "x-info",
    "x-app",
    "x-reset",
    "x-reboot",
    *(f"s{i}" for i in range(LEVELS)),
    *(f"heat{i}" for i in range(LEVELS)),
)


def node_cells(node: NodeStatus, mode: Mode) -> list[tuple[str, str, str | None]]:
    """The cells of one node: ``(character, top class, bottom class)`` each (``None``: no GPU
    below)."""
    f = node.figures
    if f is None or f.gpus == 0:
        return [("·", "dim", None)]
    if node.state in STATE_CLASSES:
        return [("░", STATE_CLASSES[node.state], None)] * math.ceil(f.gpus / 2)
    classes = mode.cells(f)
    if len(classes) < f.gpus:
        classes += ["na"] * (f.gpus - len(classes))
    if len(classes) % 2:
        classes.append(None)  # type: ignore[arg-type] # no GPU below the last one
    it = iter(classes)
    return [("▀", top, bottom) for top, bottom in zip(it, it, strict=True)]


def node_width(node: NodeStatus) -> int:
    """Cells one node takes: half its GPUs, rounded up; one for a node without GPUs or data."""
    f = node.figures
    return 1 if f is None or f.gpus == 0 else math.ceil(f.gpus / 2)


def pack(widths: Sequence[int], width: int, gap: int) -> list[list[tuple[int, int]]]:
    """Nodes of ``widths`` cells laid out in rows of ``width`` cells, ``gap`` cells before each:
    ``rows[r] = [(x, node index), ...]``. A node never straddles two rows."""
    rows: list[list[tuple[int, int]]] = [[]]
    x = 0
    for index, w in enumerate(widths):
        if x and x + gap + w > width:
            rows.append([])
            x = 0
        rows[-1].append((x + gap, index))
        x += gap + w
    return rows if rows[0] else []


class GpuGrid(Widget, can_focus=True):
    """Every GPU of ``nodes``, coloured by ``mode``; a cursor on one node."""

    COMPONENT_CLASSES = {f"gpugrid--{name}" for name in CELL_CLASSES}
    BINDINGS = [
        Binding("left,h", "move(-1)", show=False),
        Binding("right,l", "move(1)", show=False),
        Binding("up,k", "row(-1)", show=False),
        Binding("down,j", "row(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "jump(0)", show=False),
        Binding("end", "jump(-1)", show=False),
        Binding("enter", "select", "open", show=False),
    ]

    class Highlighted(Message):
        """The cursor moved to another node."""

        def __init__(self, grid: GpuGrid, node: NodeStatus | None) -> None:
            super().__init__()
            self.grid = grid
            self.node = node

    class Selected(Highlighted):
        """Enter or a double click on a node."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.nodes: tuple[NodeStatus, ...] = ()
        self.mode: Mode = MODES[0]
        self.cursor = 0
        self._top = 0
        self._rows: list[list[tuple[int, int]]] = []
        self._where: list[tuple[int, int]] = []  # node index -> (row, x)
        self._layout_key: tuple[int, int, tuple[int, ...]] | None = None
        self._lines: dict[int, tuple[int, Strip]] = {}  # row -> (width, its drawing) until the data changes
        self._styles: dict[tuple[str, str | None, bool], Style] = {}
        self._widths: tuple[int, ...] = ()  # node_width of each node, per set_nodes
        self._held: NodeStatus | None = None  # the cursor's node kept by ``release``
        self._painting = 0  # which set_nodes the rows being drawn (``_paint_rows``) are of

    # -- data ---------------------------------------------------------------------------------

    def set_nodes(self, nodes: Sequence[NodeStatus], key: Callable[[NodeStatus], str] = lambda n: n.source) -> None:
        """Show ``nodes`` (in this order); the cursor stays on its node (by ``key``)."""
        current = self.current or self._held
        self._held = None
        self.nodes = tuple(nodes)
        self._widths = tuple(node_width(n) for n in self.nodes)
        self._lines = {}
        if current is not None:
            wanted = key(current)
            self.cursor = next((i for i, n in enumerate(self.nodes) if key(n) == wanted), self.cursor)
        self.cursor = max(0, min(self.cursor, len(self.nodes) - 1))
        layout, top = self._layout_key, self._top
        self._relayout()
        self._painting += 1
        if self._layout_key != layout or self._top != top:  # rows moved: all of it at once
            self.refresh()
        else:
            self._paint_rows(0, self._painting)

    def _paint_rows(self, first: int, painting: int) -> None:
        """Draw the rows from ``first`` on, ``CELLS_PER_PAINT`` cells' worth now and the rest after
        this frame is on screen, until all are (or newer data started over). At 4,096 nodes a
        200x50 grid is some 9,000 cells of their own colours; drawn in one frame they held the
        UI's event loop for 30-40 ms (``benchmarks/tui_fanin.py``), in frames of 2,400 cells each
        holds it for a quarter of that, and the whole grid is new within a few frames."""
        if painting != self._painting or not self.is_mounted:
            return
        width, height = self.size.width, self.size.height
        if not width or not height:
            self.refresh()
            return
        rows = max(1, CELLS_PER_PAINT // width)
        self.refresh(Region(0, first, width, min(rows, height - first)))
        if first + rows < height:
            self.call_after_refresh(self._paint_rows, first + rows, painting)

    def release(self) -> None:
        """Drop the nodes and their drawing while the grid is out of sight (its screen is covered),
        keeping the cursor's node: the next ``set_nodes`` puts the cursor back on it."""
        self._held = self.current or self._held
        self.nodes = ()
        self._widths = ()
        self._lines = {}
        self._layout_key = None
        self.refresh()  # and Textual's cached drawing of them

    def set_mode(self, mode: Mode) -> None:
        """Colour by ``mode``."""
        self.mode = mode
        self._lines = {}
        self.refresh()

    @property
    def current(self) -> NodeStatus | None:
        """The node under the cursor."""
        return self.nodes[self.cursor] if 0 <= self.cursor < len(self.nodes) else None

    def rows_below(self) -> int:
        """Rows of nodes below the visible part (scroll with the cursor: PgDn, End); 0 before the
        widget has a size."""
        if not self.size.height:
            return 0
        self._relayout()
        return max(0, len(self._rows) - self._top - max(1, self.size.height))

    def gpus(self) -> int:
        """GPUs shown."""
        return sum(n.figures.gpus for n in self.nodes if n.figures is not None)

    # -- layout -------------------------------------------------------------------------------

    def _relayout(self) -> None:
        width, height = max(1, self.size.width), max(1, self.size.height)
        widths = self._widths
        key = (width, height, widths)
        if key == self._layout_key:
            return
        self._layout_key = key
        self._lines = {}
        rows = pack(widths, width, 1)
        if len(rows) > height:  # touching nodes fit more per row
            tight = pack(widths, width, 0)
            rows = tight if len(tight) < len(rows) else rows
        self._rows = rows
        self._where = [(0, 0)] * len(widths)
        for r, row in enumerate(rows):
            for x, index in row:
                self._where[index] = (r, x)
        self._scroll_to_cursor()

    def on_resize(self) -> None:
        self._relayout()
        self.refresh()

    def _scroll_to_cursor(self) -> None:
        if not self._where:
            self._top = 0
            return
        row = self._where[self.cursor][0]
        height = max(1, self.size.height)
        if row < self._top:
            self._top = row
        elif row >= self._top + height:
            self._top = row - height + 1
        self._top = max(0, min(self._top, max(0, len(self._rows) - height)))

    # -- keys and mouse -------------------------------------------------------------------------

    def _go(self, index: int) -> None:
        if not self.nodes:
            return
        index = max(0, min(len(self.nodes) - 1, index))
        rows = {self._where[i][0] for i in (self.cursor, index) if 0 <= i < len(self._where)}
        for row in rows:  # the rows the cursor leaves and enters are drawn again, alone
            self._lines.pop(row, None)
        top = self._top
        self.cursor = index
        self._scroll_to_cursor()
        if self._top != top:
            self.refresh()
        else:
            for row in rows:
                self.refresh(Region(0, row - top, self.size.width, 1))
        self.post_message(self.Highlighted(self, self.current))

    def action_move(self, delta: int) -> None:
        self._go(self.cursor + delta)

    def action_row(self, delta: int) -> None:
        if not self._where:
            return
        row, x = self._where[self.cursor]
        target = max(0, min(len(self._rows) - 1, row + delta))
        if target != row:
            self._go(min(self._rows[target], key=lambda cell: abs(cell[0] - x))[1])

    def action_page(self, direction: int) -> None:
        for _ in range(max(1, self.size.height)):
            self.action_row(direction)

    def action_jump(self, index: int) -> None:
        self._go(index % len(self.nodes) if self.nodes else 0)

    def action_select(self) -> None:
        if self.current is not None:
            self.post_message(self.Selected(self, self.current))

    def node_at(self, x: int, y: int) -> int | None:
        """The index of the node drawn at cell ``(x, y)`` of the widget, or ``None``."""
        row = self._top + y
        if not 0 <= row < len(self._rows):
            return None
        for start, index in self._rows[row]:
            if start <= x < start + self._widths[index]:
                return index
        return None

    def on_click(self, event: events.Click) -> None:
        index = self.node_at(event.x, event.y)
        if index is not None:
            again = index == self.cursor
            self._go(index)
            if again and event.chain >= 2:
                self.action_select()

    # -- drawing ------------------------------------------------------------------------------

    def _style(self, top: str, bottom: str | None, cursor: bool) -> Style:
        key = (top, bottom, cursor)
        style = self._styles.get(key)
        if style is None:
            fg = self.get_component_rich_style(f"gpugrid--{top}")
            bg = self.get_component_rich_style(f"gpugrid--{bottom}").color if bottom else None
            style = self.rich_style + Style(color=fg.color, bgcolor=bg or self.rich_style.bgcolor)
            if cursor:
                style += self.get_component_rich_style("gpugrid--cursor")
            self._styles[key] = style
        return style

    def notify_style_update(self) -> None:
        self._styles = {}
        self._lines = {}
        super().notify_style_update()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._layout_key is None or self._layout_key[:2] != (max(1, width), max(1, self.size.height)):
            self._relayout()
        row = self._top + y
        base = self.rich_style
        if row >= len(self._rows):
            if row == 0 and not self.nodes:
                return Strip([Segment(" no nodes yet".ljust(width)[:width], base)], width)
            return Strip.blank(width, base)
        cached = self._lines.get(row)
        if cached is not None and cached[0] == width:
            return cached[1]
        # one segment per run of cells of one style, across nodes: few objects for the collector
        runs: list[tuple[Style, list[str]]] = []
        style_of = self._style
        widths, nodes, mode = self._widths, self.nodes, self.mode
        x = 0
        for start, index in self._rows[row]:
            if start > x:
                marker = "▶" if index == self.cursor and start - x == 1 else " " * (start - x)
                gap_style = style_of("cursor", None, False) if marker == "▶" else base
                if runs and runs[-1][0] is gap_style:
                    runs[-1][1].append(marker)
                else:
                    runs.append((gap_style, [marker]))
            cursor = index == self.cursor
            for ch, top, bottom in node_cells(nodes[index], mode):
                cell_style = style_of(top, bottom, cursor)
                if runs and runs[-1][0] is cell_style:
                    runs[-1][1].append(ch)
                else:
                    runs.append((cell_style, [ch]))
            x = start + widths[index]
        segments = [Segment("".join(chars), style) for style, chars in runs]
        if x > width:  # a node wider than the widget (16 GPUs in 7 columns): cut
            strip = Strip(segments).crop(0, width)
        else:
            if x < width:
                segments.append(Segment(" " * (width - x), base))
            strip = Strip(segments, width)  # every character the grid draws is one cell wide
        self._lines[row] = (width, strip)
        return strip
