"""The ``?`` screen (every key, and what the states and marks mean) and the ``e`` screen (every
message of the source in full)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from observe.tui.fmt import one_line
from observe.tui.widgets.lines import Line, Lines

#: Every key of every screen (``tests/tui/test_edges.py``, ``test_help_lists_every_key_a_footer_shows``,
#: checks that each binding a footer shows is here).
KEYS = (
    ("q  Ctrl-C", "quit"),
    ("?", "this help (Esc closes it)"),
    ("1 2 3 4", "Cluster, Run, Alerts and GPU grid screens"),
    ("Enter", "drill down: the node of a row or of a grid cell; a GPU in full; a rank in full (Run screen)"),
    ("Esc", "back (or clear the filter)"),
    ("s  F6  I", "sort by a column (a menu); the same column again reverses; I inverts"),
    ("/", "filter rows by text (node name, state, command)"),
    ("r", "refresh now (a rank's view: ask its stack again)"),
    ("e", "every message of the source in full (the status bar cuts them)"),
    ("c", "Node screen: GPUs compact (a line each) or detailed (with history)"),
    ("m", "GPU grid: colour by utilisation, memory, temperature or XID errors"),
    ("n", "Run screen: the next run, when there are several"),
    ("o", "Run screen: the node of the rank under the cursor"),
    ("Tab", "next table (Node screen: processes / GPUs)"),
    ("↑ ↓ ← → PgUp PgDn Home End", "move"),
)
STATES = (
    ("ok", "ok", "fresh data from this refresh"),
    ("stale", "warn", "the agent answered with an old snapshot (its collector is stuck)"),
    ("slow", "warn", "no answer within the timeout or the refresh deadline: last data shown with its age"),
    ("unreachable", "bad", "connection refused or failed: last data shown with its age"),
    ("malformed", "bad", "an answer that is not a snapshot (HTTP error, bad JSON, other schema)"),
    ("finished", "ok", "a rank whose run is over (its last figures; it may have stopped serving since)"),
    ("N/A", "na", "the value could not be read (never shown as 0); N/A (MIG): MIG GPUs report no utilisation"),
    ("*", "warn", "partial: a sum or mean over only the GPUs that could be read (a lost GPU, an N/A reading)"),
    ("LOST", "lost", "NVML reports the GPU fell off the bus: reset or reboot it"),
    ("HANG", "alarm", "Run screen's verdict: which rank the others wait for, in which collective, and why"),
    ("STRAGGLER", "caution", "a rank computing 1.5x the median rank's time per step, the excess over 10 % of a step"),
    ("! state", "bad", "Run screen: the rank's watchdog sees no progress (stalled)"),
    ("◀ behind", "bad", "a culprit: behind, other op, gone, no answer (alive, holding the GIL), straggler"),
)


def help_lines(width: int = 106) -> list[Line]:
    """The help screen's text, each explanation wrapped at word boundaries to ``width`` columns
    (continuation lines indented under the explanation, so nothing is cut at 80x24)."""
    import textwrap

    def entries(rows: tuple[tuple[str, str, str], ...], column: int) -> list[Line]:
        out: list[Line] = []
        for name, style, text in rows:
            parts = textwrap.wrap(text, max(20, width - column - 1)) or [""]
            out.append([(f" {name:<{column - 1}}", style), (parts[0], "value")])
            out += [[(" " * column, "value"), (part, "value")] for part in parts[1:]]
        return out

    lines: list[Line] = [[(" fsdp-observe top ", "title"), ("  keys follow htop and nvtop", "dim")], []]
    lines += entries(tuple((key, "accent", text) for key, text in KEYS), 28)
    lines += [[], [(" states and marks", "title")]]
    lines += entries(STATES, 13)
    return lines


def box_text_width(app_width: int) -> int:
    """Columns of text inside ``#help-box`` (``top.tcss``: 110 wide, at most 95 % of the terminal,
    less its border and scroll bar)."""
    return min(110, app_width * 95 // 100) - 4


class HelpScreen(ModalScreen[None]):
    """Keys and legend."""

    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        help_lines_widget = Lines(id="help-lines")
        help_lines_widget.set_lines(help_lines(box_text_width(self.app.size.width or 80)))
        with VerticalScroll(id="help-box"):
            yield help_lines_widget

    def on_resize(self) -> None:
        self.query_one("#help-lines", Lines).set_lines(help_lines(box_text_width(self.app.size.width or 80)))


class MessagesScreen(ModalScreen[None]):
    """Every message of the source, each in full (wrapped at word boundaries)."""

    BINDINGS = [Binding("escape,q,e", "app.pop_screen", "close")]

    def __init__(self, messages: tuple[str, ...]) -> None:
        super().__init__()
        self.messages = messages

    def compose(self) -> ComposeResult:
        import textwrap

        lines: list[Line] = [[(" messages ", "title"), ("  Esc closes", "dim")], []]
        width = max(20, box_text_width(self.app.size.width or 80))
        if not self.messages:
            lines.append([("   no messages", "dim")])
        for message in self.messages:
            for n, part in enumerate(textwrap.wrap(one_line(message), width - 4) or [""]):
                lines.append([(" ! " if n == 0 else "   ", "bad"), (part, "value")])
        box = Lines(id="messages-lines")
        box.set_lines(lines)
        with VerticalScroll(id="help-box"):
            yield box
