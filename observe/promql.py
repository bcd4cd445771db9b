"""PromQL text pieces shared by the dashboards, the rules, the TUI and the scaling report.

Prometheus durations (``90s``, ``15m``, ``1h30m``), string literals and label names, with the
grammar of https://prometheus.io/docs/prometheus/latest/querying/basics/#float-literals-and-time-durations.
Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_DURATION = re.compile(r"^(?:(\d+)(ms|s|m|h|d|w|y))+$")
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
#: Seconds per unit; Prometheus' ``y`` is 365 days, ``w`` 7 days.
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def duration_seconds(text: str) -> float:
    """Seconds in a Prometheus duration (``90s``, ``15m``, ``1h30m``, ``500ms``); ``0s`` is 0.

    Raises:
        ValueError: not a Prometheus duration (callers turn it into a ``UserError`` naming
            their field).
    """
    if not isinstance(text, str) or not _DURATION.match(text.strip()):
        raise ValueError(f"{text!r} is not a Prometheus duration like 30s, 15m or 1h30m")
    return sum(int(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(text.strip()))


def is_label_name(text: str) -> bool:
    """Whether ``text`` is a valid Prometheus label name (``[a-zA-Z_][a-zA-Z0-9_]*``)."""
    return bool(_LABEL.match(text))


def string(value: str) -> str:
    """``value`` as a double-quoted PromQL string literal (backslash, quote and newline escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def names_regex(names: Iterable[str]) -> str:
    """``{__name__=~"a|b|c"}``: one selector for several metric names (sorted, for stable text)."""
    return '{__name__=~"' + "|".join(sorted(names)) + '"}'
