"""PromQL for scaling efficiency across runs, for the training-run dashboard.

The same definition as ``fsdp-observe scaling`` reports::

    E(N) = tokens/s at N / (N/N0 x tokens/s at N0)

over every run in the queried range that shares a ``model`` and ``sharding_strategy``, N0 being
the smallest world size among them (runs tied at N0 are averaged). PromQL has no variables, so
the builder writes the shared sub-expressions out in full. Every result series is one run,
labelled ``run_id``, ``model``, ``sharding_strategy`` and ``world_size``.

- ranks of a run: distinct ``rank`` labels of ``fsdp_train_info`` (a number, unlike the
  ``world_size`` label, which PromQL cannot compute with).
- throughput of a run: the ``quantile``-th value (median by default) of rank 0's
  ``fsdp_train_global_tokens_per_second`` over the range. A median of the per-window figure is
  robust to warm-up windows, so it is close to, but not the same estimator as, the report's
  Δtokens/Δtime after a fixed warm-up.

Series of finished runs are read with ``last_over_time``/``quantile_over_time`` over the range,
so the panel must be an *instant* query (Grafana: Options → Type: Instant) whose range is the
dashboard's (``$__range``). Needs Prometheus 2.26 or newer (``last_over_time``, ``group``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from observe import catalog as c

_RANGE = re.compile(r"^(\$__range|\$\{__range\}|\d+(ms|s|m|h|d|w|y))$")


@dataclass(frozen=True)
class ScalingQueries:
    """Instant-query expressions; each returns one series per run.

    Attributes:
        ranks: the run's number of ranks (N).
        throughput: the run's global tokens/s (tokens per second).
        efficiency: the run's scaling efficiency (ratio, 1.0 at N0; Grafana unit ``percentunit``).
    """

    ranks: str
    throughput: str
    efficiency: str


def scaling_queries(
    matchers: str = "", info_matchers: str = "", range_: str = "$__range", quantile: float = 0.5
) -> ScalingQueries:
    """Build the expressions.

    Args:
        matchers: label matchers every trainer series carries, applied to every selector, e.g.
            ``'namespace=~"$namespace"'`` (no braces). Never ``model`` or
            ``sharding_strategy``: only ``fsdp_train_info`` carries those; use ``info_matchers``.
        info_matchers: further matchers for ``fsdp_train_info`` alone, e.g.
            ``'model=~"$model",sharding_strategy=~"$strategy"'``; runs they exclude drop out.
        range_: the range to read runs from: ``$__range`` in a dashboard, or a duration (``6h``).
        quantile: which quantile over the range stands for a run's throughput (0 < q <= 1).

    Raises:
        ValueError: braces in the matchers, a malformed range, a quantile out of range.
    """
    for name, value in (("matchers", matchers), ("info_matchers", info_matchers)):
        if any(ch in value for ch in "{}"):
            raise ValueError(f"{name}: give label matchers without braces, got {value!r}")
    if not _RANGE.match(range_):
        raise ValueError(f"range_: {range_!r} is neither $__range nor a duration like 6h")
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")

    def sel(name: str, *extra: str) -> str:
        inner = ",".join(m for m in (matchers, *extra) if m)
        return f"{name}{{{inner}}}"

    keys = "run_id, model, sharding_strategy, world_size"
    info = f"last_over_time({sel(c.TRAIN_INFO.name, info_matchers)}[{range_}])"
    ranks = f"count by ({keys}) (count by ({keys}, rank) ({info}))"
    rank0 = sel(c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name, 'rank="0"')
    tps = f"max by (run_id) (quantile_over_time({quantile:g}, {rank0}[{range_}]))"
    throughput = f"{tps} * on (run_id) group_left (model, sharding_strategy, world_size) group by ({keys}) ({info})"
    per_rank = f"({throughput}) / ({ranks})"
    smallest = f"({ranks}) == on (model, sharding_strategy) group_left min by (model, sharding_strategy) ({ranks})"
    baseline = f"avg by (model, sharding_strategy) (({per_rank}) and ({smallest}))"
    # No parenthesis right after group_left: PromQL would read it as group_left's label list.
    efficiency = f"({per_rank}) / on (model, sharding_strategy) group_left {baseline}"
    return ScalingQueries(ranks=ranks, throughput=throughput, efficiency=efficiency)
