"""PromQL shapes that keep a panel readable and fast at 1,024 nodes, 8,192 GPUs and ranks.

A panel that draws one line per GPU or rank returns thousands of series and freezes the browser.
The dashboards therefore draw, per panel, a bounded set:

- ``stable_top``: the ``k`` series that were highest (or lowest) *over the whole dashboard range*,
  chosen once with ``@ end()`` (Prometheus 2.33+), drawn over the whole range. A plain
  ``topk(k, x)`` in a range query picks its k at every step, so with 8,192 near-equal ranks the
  union over a few hundred steps is hundreds of series.
- ``spread``: the minimum, median and maximum across the selected series, for the fleet view.
- ``count_or_zero``: a count that is 0 when the source reports but nothing matches, and absent
  (Grafana's "No data") when the source reports nothing, never a reassuring 0 for missing data.
"""

from __future__ import annotations

import re

_SELECTOR = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*(\{[^{}]*\})?$")


def stable_top(
    k: int,
    expr: str,
    by: str,
    *,
    bottom: bool = False,
    reducer: str = "avg",
    window: str = "$__range",
    pick_from: str | None = None,
    rank_by: str | None = None,
) -> str:
    """``expr`` limited to the ``k`` series whose ``reducer`` over ``window`` was highest.

    Args:
        k: how many series to keep (1..50).
        expr: the per-step expression the panel draws (one series per GPU, rank, ...).
        by: the labels identifying one series of ``expr``, e.g. ``"node, gpu"``.
        bottom: keep the lowest instead (``bottomk``: the least busy GPUs, the slowest tokens/s).
        reducer: a ``<reducer>_over_time`` function (``avg``, ``max``, ``min``, ``sum``), or
            ``increase`` for a counter (the most added in the window).
        window: the range the choice is made over (the dashboard's ``$__range``).
        pick_from: a plain selector to rank by instead of ``expr`` (same ``by`` labels): a
            subquery over ``expr`` evaluates it at every step of the range for every series,
            which at 8,192 series is seconds; a selector's range is one pass over its samples.
        rank_by: the whole ranking expression, already ``@ end()`` (e.g. a range function of a
            selector joined to a recorded series), for when neither fits.

    Returns:
        ``expr and on (by) topk(k, avg_over_time(expr[window] @ end()))``; a subquery when
        neither ``pick_from`` nor ``expr`` is a plain selector.
    """
    source = pick_from or expr
    over = f"{source}[{window}]" if _SELECTOR.match(source) else f"({source})[{window}:]"
    function = reducer if reducer == "increase" else f"{reducer}_over_time"
    pick = f"{'bottomk' if bottom else 'topk'}({k}, {rank_by or f'{function}({over} @ end())'})"
    return f"({expr})\nand on ({by})\n{pick}"


def spread(expr: str, by: str = "") -> list[tuple[str, str]]:
    """(expression, legend) of the minimum, median and maximum of ``expr`` across its series,
    optionally per group ``by`` (e.g. ``"namespace, run_id"``). Give a plain selector: the
    aggregation drops the labels anyway, so no ``label_replace`` need run per series and step."""
    group = f" by ({by})" if by else ""
    prefix = "".join(f"{{{{{label.strip()}}}}} " for label in by.split(",") if label.strip())
    return [
        (f"min{group} ({expr})", f"{prefix}min"),
        (f"quantile{group} (0.5, {expr})", f"{prefix}median"),
        (f"max{group} ({expr})", f"{prefix}max"),
    ]


def count_or_zero(matching: str, source: str) -> str:
    """``count(matching)``, or 0 where ``source`` has series but none match; absent without ``source``."""
    return f"count({matching}) or on () (0 * count({source}))"
