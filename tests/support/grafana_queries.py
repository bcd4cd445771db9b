"""Run a generated dashboard's queries the way Grafana sends them: variables at "All" and
Grafana's built-in intervals interpolated (``$name`` and ``${name}``)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator


def variable_values(board: dict, span: float, node: str, step: float, scrape: float) -> dict[str, str]:
    """Each query variable as "All" (its allValue; ``node`` for one without "All"), and Grafana's
    built-in intervals for a range of ``span`` seconds at ``step`` with scrapes every ``scrape``."""
    values = {v["name"]: v.get("allValue", node) for v in board["templating"]["list"] if v["type"] == "query"}
    rate_interval = max(step + scrape, 4 * scrape)  # Grafana: max($__interval + scrape, 4 x scrape)
    values.update(__rate_interval=f"{rate_interval:g}s", __interval=f"{step:g}s", __range=f"{math.ceil(span)}s")
    return values


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's interpolation of ``$name`` and ``${name}`` (``$1`` of label_replace is left alone)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), expr)


def panel_queries(board: dict) -> Iterator[tuple[str, dict]]:
    """``("uid / panel title / refId", target)`` for every query of every panel."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield f"{board['uid']} / {panel['title']} / {target['refId']}", target
