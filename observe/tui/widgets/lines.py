"""Lines of styled pieces (meters, sparklines, labels) drawn with Textual's line API.

A line is a list of ``(text, style)`` pieces; ``style`` names a component class
(``lines--<style>``) whose colours live in the ``.tcss`` file, so no data is ever parsed as
markup. ``bar`` and ``spark`` build the htop/nvtop-style pieces.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

from observe.tui.fmt import NA

Piece = tuple[str, "str | None"]
Line = list[Piece]
#: Style names a piece may carry.
STYLES = (
    "label",
    "value",
    "low",
    "mid",
    "high",
    "empty",
    "na",
    "ok",
    "warn",
    "bad",
    "dim",
    "accent",
    "lost",
    "alarm",
    "caution",
    "title",
    "spark",
    # the GPU grid's legend (``observe.tui.widgets.grid``): its scales and XID classes
    *(f"s{i}" for i in range(8)),
    *(f"heat{i}" for i in range(8)),
    "x-none",
    "x-info",
    "x-app",
    "x-reset",
    "x-reboot",
    "g-na",
    "g-lost",
)
_SPARKS = "▁▂▃▄▅▆▇█"


def level(ratio: float | None) -> str:
    """``low`` below 50 %, ``mid`` below 80 %, else ``high``; ``na`` for ``None``."""
    if ratio is None:
        return "na"
    return "low" if ratio < 0.5 else "mid" if ratio < 0.8 else "high"


def bar(ratio: float | None, width: int, text: str | None = None, style: str | None = None, outside: int = 0) -> Line:
    """An htop meter ``[|||||     45%]`` of ``width`` cells; ``text`` is written inside at the right.

    ``None`` draws an empty meter reading ``N/A`` (or ``text``). With ``outside`` > 0 the text goes
    after the meter instead, right-aligned in that many cells (bars that are compared with each
    other, where a label inside would hide the difference).
    """
    if outside:
        label = text if text is not None else (NA if ratio is None else f"{ratio * 100:.1f}%")
        return [
            *bar(ratio, width - outside, "", style),
            (label.rjust(outside)[:outside], "value" if ratio is not None else "na"),
        ]
    inner = max(1, width - 2)
    label = text if text is not None else (NA if ratio is None else f"{ratio * 100:.1f}%")
    label = label[:inner]
    filled = 0 if ratio is None else round(max(0.0, min(1.0, ratio)) * inner)
    body = ("|" * filled).ljust(inner)
    body = body[: inner - len(label)] + label if label else body
    fill_style = style or level(ratio)
    if ratio is None:
        return [("[", "label"), (body, "na"), ("]", "label")]
    return [("[", "label"), (body[:filled], fill_style), (body[filled:], "value"), ("]", "label")]


def spark(values: Sequence[float | None], width: int, top: float | None = 1.0) -> str:
    """The last ``width`` values as a sparkline (``▁``..``█``; a gap for ``None``), scaled to ``top``
    (``None``: to the values' range)."""
    values = list(values)[-width:]
    known = [v for v in values if v is not None]
    if not known:
        return " " * len(values)
    low, high = (0.0, top) if top is not None else (min(known), max(known))
    span = (high - low) or 1.0
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(_SPARKS[max(0, min(len(_SPARKS) - 1, int((v - low) / span * (len(_SPARKS) - 1) + 0.5)))])
    return "".join(out)


def width_of(line: Line) -> int:
    """Cells ``line`` takes (one per character: the TUI writes no wide characters)."""
    return sum(len(text) for text, _ in line)


def fit(pieces: Sequence[tuple[str, str | None, int]], width: int) -> Line:
    """The pieces ``(text, style, priority)`` that fit in ``width`` cells, in their order: pieces
    with the highest priority number are left out first (``0``: kept), a run of neighbouring
    pieces of one priority (a label and its value) together, the rightmost run first. A kept piece
    that still does not fit is cut at a word boundary (``observe.tui.fmt.shorten``), never mid-word."""
    from observe.tui.fmt import shorten

    kept = list(pieces)
    while sum(len(t) for t, _, _ in kept) > width and any(p > 0 for _, _, p in kept):
        end = max(range(len(kept)), key=lambda i: (kept[i][2], i)) + 1
        start = end - 1
        while start > 0 and kept[start - 1][2] == kept[end - 1][2]:
            start -= 1
        del kept[start:end]
    line: Line = []
    room = width
    for text, style, _ in kept:
        if room <= 0:
            break
        if len(text) > room:
            lead = len(text) - len(text.lstrip(" "))
            text = " " * min(lead, room) + shorten(text.strip(" "), room - min(lead, room))
        line.append((text, style))
        room -= len(text)
    return line


class Lines(Widget):
    """Draws ``set_lines`` content, one list of pieces per line (cut to the widget's width)."""

    COMPONENT_CLASSES = {f"lines--{name}" for name in STYLES}

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.lines: list[Line] = []
        self._styles: dict[str, Style] = {}

    def set_lines(self, lines: list[Line]) -> None:
        """Replace the content."""
        height_changed = len(lines) != len(self.lines)
        self.lines = lines
        self.refresh(layout=height_changed)

    def notify_style_update(self) -> None:
        self._styles = {}
        super().notify_style_update()

    def _style(self, name: str | None) -> Style:
        base = self.rich_style
        if name is None:
            return base
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = base + self.get_component_rich_style(f"lines--{name}")
        return style

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        segments = [Segment(text, self._style(name)) for text, name in self.lines[y] if text]
        return Strip(segments).crop(0, width).adjust_cell_length(width, self.rich_style)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.lines)

    def get_content_width(self, container: Size, viewport: Size) -> int:
        return max((sum(len(t) for t, _ in line) for line in self.lines), default=0)
