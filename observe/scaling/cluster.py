"""Cluster mode: read finished runs from Prometheus' HTTP API and measure them like local runs.

For each run id:

1. Rank 0's raw ``fsdp_train_step`` samples over ``lookback`` (one range-selector query) give
   the scrape at which the run first stood at or past the warm-up (``t_w``) and its last
   scrape (``t_e``), and the scrape interval (median gap).
2. Start snapshot: every snapshot series of the run as of ``t_w`` (instant queries).
3. End snapshot: ``last_over_time(series[t_e + 2 intervals - t_w])`` at ``t_e`` + 2 intervals,
   so every rank's final scrape counts even after Prometheus marked the series stale.
4. ``observe.scaling.figures.measure`` turns them into figures, exactly as in local mode.

Warm-up exclusion is as fine as the scrape interval: a rank's start is its last scrape at or
before ``t_w``. Run the trainer with ``--metrics-linger`` of two scrape intervals or more so the
final scrape sees the last step. API: https://prometheus.io/docs/prometheus/latest/querying/api/
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from observe import catalog as c
from observe.errors import UserError
from observe.promapi import PrometheusAPI
from observe.promql import string as promql_string
from observe.promtext import Sample
from observe.scaling.figures import SizeFigures, measure
from observe.scaling.snapshot import SNAPSHOT_SAMPLE_NAMES, rank_snapshots

__all__ = ["RunNotFound", "RunWindow", "find_window", "read_run", "samples_at"]


class RunNotFound(LookupError):
    """Prometheus holds no trainer series for a run id in the look-back window."""


@dataclass(frozen=True)
class RunWindow:
    """When a run was scraped: rank 0's first scrape past the warm-up, its last, the interval."""

    start: float
    end: float
    interval: float


def find_window(api: PrometheusAPI, run_id: str, warmup_steps: int, lookback: float, now: float) -> RunWindow:
    """Locate a run's measured window from rank 0's raw ``fsdp_train_step`` samples.

    Raises:
        RunNotFound: no samples for the run within ``lookback`` before ``now``.
        UserError: fewer than two scrapes past the warm-up (``--warmup-steps``).
    """
    selector = f'{c.TRAIN_STEP.name}{{run_id={promql_string(run_id)},rank="0"}}[{math.ceil(lookback)}s]'
    _, result = api.query(selector, now)
    if not result:
        raise RunNotFound(run_id)
    values = max(result, key=lambda series: len(series["values"]))["values"]  # duplicates: the fullest
    points = [(float(t), float(v)) for t, v in values]
    first = next((i for i, (_, step) in enumerate(points) if step >= warmup_steps), None)
    if first is None or points[-1][1] <= points[first][1]:
        raise UserError(
            "--warmup-steps",
            f"run {run_id}: Prometheus holds no step after the warm-up to measure "
            f"(last step {points[-1][1]:.0f}, warm-up {warmup_steps})",
            "lower --warmup-steps or scrape more often",
        )
    gaps = [b - a for (a, _), (b, _) in zip(points, points[1:], strict=False)]
    return RunWindow(start=points[first][0], end=points[-1][0], interval=statistics.median(gaps))


def samples_at(api: PrometheusAPI, run_id: str, at: float, last_over: float | None = None) -> list[Sample]:
    """Every snapshot series of ``run_id`` as of ``at``.

    With ``last_over`` (seconds), each series' last sample within that range before ``at``
    (``last_over_time``), which also finds series Prometheus has already marked stale.
    """
    out = []
    for name in SNAPSHOT_SAMPLE_NAMES:
        selector = f"{name}{{run_id={promql_string(run_id)}}}"
        expr = selector if last_over is None else f"last_over_time({selector}[{math.ceil(last_over)}s])"
        _, result = api.query(expr, at)
        for series in result:
            labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
            out.append(Sample(name, labels, float(series["value"][1])))
    return out


def read_run(api: PrometheusAPI, run_id: str, warmup_steps: int, lookback: float, now: float) -> SizeFigures:
    """Figures of one finished (or running) run, read from Prometheus.

    Raises:
        RunNotFound: no series for ``run_id``.
        observe.promapi.PrometheusError: a query failed.
        UserError, MeasureError: the run cannot be measured.
    """
    window = find_window(api, run_id, warmup_steps, lookback, now)
    start = rank_snapshots(samples_at(api, run_id, window.start))
    end_at = window.end + 2 * window.interval
    end = rank_snapshots(samples_at(api, run_id, end_at, last_over=end_at - window.start))
    return measure(run_id, start, end)
