"""The ``?`` screen: every key, and what the states and colours mean."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from observe.tui.widgets.lines import Line, Lines

KEYS = (
    ("q", "quit"),
    ("?", "this help (Esc closes it)"),
    ("1 2 3", "Cluster, Run and Alerts screens"),
    ("Enter", "drill down: a node from the Cluster or Alerts screen"),
    ("Esc", "back (or clear the filter)"),
    ("s  F6", "sort by a column; the same column again reverses; I inverts"),
    ("/", "filter rows by text (node name, state, command)"),
    ("r", "refresh now"),
    ("↑ ↓ PgUp PgDn Home End", "move"),
    ("Tab", "next table (Node screen: processes / GPUs)"),
)
STATES = (
    ("ok", "ok", "fresh data from this refresh"),
    ("stale", "warn", "the agent answered with an old snapshot (its collector is stuck)"),
    ("slow", "warn", "no answer within the timeout or the refresh deadline: last data shown with its age"),
    ("unreachable", "bad", "connection refused or failed: last data shown with its age"),
    ("malformed", "bad", "an answer that is not a snapshot (HTTP error, bad JSON, other schema)"),
    ("N/A", "na", "the value could not be read (never shown as 0); N/A (MIG): MIG GPUs report no utilisation"),
    ("LOST", "lost", "NVML reports the GPU fell off the bus: reset or reboot it"),
)


class HelpScreen(ModalScreen[None]):
    """Keys and legend."""

    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        lines: list[Line] = [[(" fsdp-observe top ", "title"), ("  keys follow htop and nvtop", "dim")], []]
        lines += [[(f" {key:<24}", "accent"), (text, "value")] for key, text in KEYS]
        lines += [[], [(" states and marks", "title")]]
        lines += [[(f" {name:<12}", style), (text, "value")] for name, style, text in STATES]
        help_lines = Lines(id="help-lines")
        help_lines.set_lines(lines)
        with VerticalScroll(id="help-box"):
            yield help_lines
