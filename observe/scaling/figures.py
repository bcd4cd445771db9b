"""The arithmetic of a scaling report: two snapshots per rank → one size's figures → the report.

For each rank, a *start* snapshot taken once the rank is past the warm-up steps and an *end*
snapshot after its last step. Everything is a difference between the two, on the rank's own
counters and clock, so nothing is timed from outside:

- tokens/s of a rank = Δ labelled tokens ÷ Δ ``last_step_timestamp`` (the rank's clock at the
  end of the first and the last measured step); global tokens/s = the sum over ranks.
- step time mean = Δ histogram sum ÷ Δ count, pooled over ranks; p50/p95 from the pooled
  Δ buckets as ``histogram_quantile`` does, unless exact per-step times are supplied.
- data-wait share = Δ data-wait seconds ÷ Δ step seconds, pooled over ranks.
- peak memory per rank = the end snapshot's peak gauge (a high-water mark, not a sample).

Scaling efficiency (the definition stated in every report):
``E(N) = tokens/s at N ÷ (N/N₀ × tokens/s at N₀)``, N₀ the smallest world size measured. The
same formula serves weak scaling (ideal: throughput grows with N at a fixed per-rank batch) and
strong scaling (ideal: a fixed global batch finishes N/N₀ times faster).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from observe.scaling.snapshot import HistogramState, RankSnapshot

EFFICIENCY_DEFINITION = (
    "scaling efficiency E(N) = tokens/s at N / (N/N0 x tokens/s at N0), "
    "N0 = the smallest world size measured; tokens are labelled tokens, summed over ranks"
)
SCHEMA = "fsdp-observe/scaling-report/v1"
HISTOGRAM_QUANTILES = "fsdp_train_step_seconds buckets, pooled over ranks (as histogram_quantile)"


class MeasureError(Exception):
    """The snapshots cannot give figures (missing ranks, nothing measured, a restart)."""


@dataclass(frozen=True)
class RankFigures:
    """One rank between its start and end snapshots.

    Attributes:
        rank, node: the rank's labels.
        steps: steps measured (Δ ``fsdp_train_steps_total``).
        tokens: labelled tokens processed in them.
        samples: sequences processed in them.
        seconds: Δ ``fsdp_train_last_step_timestamp_seconds`` (the rank's own clock).
        tokens_per_second: ``tokens / seconds``.
        memory_peak_bytes: the rank's peak memory (bytes), or ``None`` when not exported.
    """

    rank: int
    node: str | None
    steps: float
    tokens: float
    samples: float
    seconds: float
    tokens_per_second: float
    memory_peak_bytes: float | None


@dataclass
class SizeFigures:
    """One world size (one run) measured after its warm-up.

    Attributes:
        world_size: ranks in the run (``fsdp_train_info``'s ``world_size``).
        nodes: distinct ``node`` labels among its ranks.
        run_id: the run's ``run_id``.
        step_from, step_to: rank 0's last completed step at the start and end snapshots; the
            steps measured are ``step_from + 1 .. step_to``.
        finished: whether the end snapshot is at the run's planned last step.
        per_rank_batch_size: sequences per rank per step (mean over ranks).
        global_batch_size: sequences per step over all ranks.
        global_tokens_per_second: labelled tokens/s summed over ranks.
        tokens_per_second_per_rank: ``global_tokens_per_second / world_size``.
        step_seconds_mean, step_seconds_p50, step_seconds_p95: step time (seconds).
        step_time_quantiles_from: how p50/p95 were obtained.
        data_wait_ratio: share of step time spent waiting for data (0..1).
        memory_peak_bytes_max: the largest per-rank peak (bytes), ``None`` when not exported.
        memory_source: what the memory figures measure.
        window_start_unix, window_end_unix: rank 0's clock at the first and last measured step
            boundaries (Unix seconds).
        ranks: per-rank figures.
        scaling_efficiency: filled in by ``build_report``.
        info: ``fsdp_train_info`` labels of rank 0 (model, sharding_strategy, ...).
    """

    world_size: int
    nodes: int
    run_id: str
    step_from: int
    step_to: int
    finished: bool
    per_rank_batch_size: float
    global_batch_size: float
    global_tokens_per_second: float
    tokens_per_second_per_rank: float
    step_seconds_mean: float
    step_seconds_p50: float | None
    step_seconds_p95: float | None
    step_time_quantiles_from: str
    data_wait_ratio: float | None
    memory_peak_bytes_max: float | None
    memory_source: str | None
    window_start_unix: float | None
    window_end_unix: float | None
    ranks: list[RankFigures]
    scaling_efficiency: float | None = None
    info: dict[str, str] = field(default_factory=dict)


def measure(
    run_id: str,
    start: Mapping[int, RankSnapshot],
    end: Mapping[int, RankSnapshot],
    step_seconds_exact: Sequence[float] | None = None,
) -> SizeFigures:
    """Figures of one run from each rank's start and end snapshots.

    Args:
        run_id: the run's id (for messages and the report).
        start, end: ``{rank: RankSnapshot}`` after the warm-up and after the last step.
        step_seconds_exact: per-step wall times (seconds) of the measured steps, when the
            trainer logged every step; then p50/p95 are exact (numpy's linear percentile, as
            the trainer's end record) instead of estimated from histogram buckets.

    Raises:
        MeasureError: a rank is missing from either snapshot or from the run's world size, no
            step was completed between the snapshots, or a counter went backwards (restart).
    """
    if 0 not in end or 0 not in start:
        raise MeasureError(f"run {run_id}: rank 0 has no metrics")
    info = dict(end[0].info or start[0].info)
    world_size = int(info.get("world_size", len(end)))
    missing = sorted(set(range(world_size)) - (set(start) & set(end)))
    if missing:
        raise MeasureError(
            f"run {run_id}: no metrics from rank(s) {_ranks(missing)} of {world_size}; "
            "every rank's /metrics must be scraped"
        )
    ranks, pooled = [], None
    data_wait = 0.0
    for r in range(world_size):
        s, e = start[r], end[r]
        steps = e.steps_total - s.steps_total
        if min(steps, e.labelled_tokens - s.labelled_tokens, e.samples - s.samples) < 0:
            raise MeasureError(
                f"run {run_id}: rank {r}'s counters went backwards between the two "
                "snapshots (the process restarted); measure a run without restarts"
            )
        if steps <= 0 or s.last_step_timestamp is None or e.last_step_timestamp is None:
            raise MeasureError(
                f"run {run_id}: rank {r} completed no step after the warm-up "
                f"(step {s.step:.0f} at both snapshots); run more steps or lower --warmup-steps"
            )
        seconds = e.last_step_timestamp - s.last_step_timestamp
        if seconds <= 0:
            raise MeasureError(f"run {run_id}: rank {r}'s step clock did not advance")
        tokens = e.labelled_tokens - s.labelled_tokens
        try:
            delta = e.step_seconds.minus(s.step_seconds)
        except ValueError as exc:
            raise MeasureError(f"run {run_id}: rank {r}: {exc}") from None
        pooled = delta if pooled is None else _add(pooled, delta)
        data_wait += e.data_wait_seconds - s.data_wait_seconds
        ranks.append(
            RankFigures(r, e.node, steps, tokens, e.samples - s.samples, seconds, tokens / seconds, e.memory_peak_bytes)
        )
    global_tps = sum(rf.tokens_per_second for rf in ranks)
    assert pooled is not None  # world_size >= 1 ranks were pooled above
    p50: float | None
    p95: float | None
    if step_seconds_exact:
        p50, p95 = _percentiles(step_seconds_exact)
        quantiles_from = "per-step wall times from the trainer's JSON log (exact)"
    else:
        p50, p95 = pooled.quantile(0.5), pooled.quantile(0.95)
        quantiles_from = HISTOGRAM_QUANTILES
    memories = [rf.memory_peak_bytes for rf in ranks]
    known = [m for m in memories if m is not None]
    per_rank_batch = statistics.fmean(rf.samples / rf.steps for rf in ranks)
    planned = end[0].planned_steps
    return SizeFigures(
        world_size=world_size,
        nodes=len({rf.node for rf in ranks}),
        run_id=run_id,
        step_from=int(start[0].step),
        step_to=int(end[0].step),
        finished=planned is not None and end[0].step >= planned,
        per_rank_batch_size=per_rank_batch,
        global_batch_size=sum(rf.samples / rf.steps for rf in ranks),
        global_tokens_per_second=global_tps,
        tokens_per_second_per_rank=global_tps / world_size,
        step_seconds_mean=pooled.sum / pooled.count if pooled.count else float("nan"),
        step_seconds_p50=p50,
        step_seconds_p95=p95,
        step_time_quantiles_from=quantiles_from,
        data_wait_ratio=data_wait / pooled.sum if pooled.sum > 0 else None,
        memory_peak_bytes_max=max(known) if len(known) == len(memories) else None,
        memory_source=end[0].memory_source if None not in memories else None,
        window_start_unix=start[0].last_step_timestamp,
        window_end_unix=end[0].last_step_timestamp,
        ranks=ranks,
        info=info,
    )


@dataclass
class ScalingReport:
    """A scaling report: sizes sorted by world size, each with its efficiency.

    Attributes:
        mode: ``local`` (runs started here) or ``cluster`` (read from Prometheus).
        scaling: ``weak`` (same per-rank batch), ``strong`` (same global batch) or ``mixed``.
        baseline_world_size: N₀, the smallest world size measured.
        warmup_steps: steps excluded at the start of every run.
        sizes: one entry per run, by world size.
        model, sharding_strategy, mixed_precision, device_type: shared by every run.
        memory_source: what the memory figures measure (``None`` when not exported).
        notes: caveats worth reading next to the figures.
        created_unix: when the report was built.
    """

    mode: str
    scaling: str
    baseline_world_size: int
    warmup_steps: int
    sizes: list[SizeFigures]
    model: str | None
    sharding_strategy: str | None
    mixed_precision: str | None
    device_type: str | None
    memory_source: str | None
    notes: list[str] = field(default_factory=list)
    created_unix: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        """The report as ``report.json`` holds it (plain JSON types; see docs/scaling.md)."""
        return {"schema": SCHEMA, "efficiency_definition": EFFICIENCY_DEFINITION, **asdict(self)}


class ReportError(Exception):
    """The runs cannot be compared (different model or strategy)."""


def scaling_efficiency(
    tokens_per_second: float, world_size: int, baseline_tokens_per_second: float, baseline_world_size: int
) -> float | None:
    """``tokens/s at N ÷ (N/N₀ × tokens/s at N₀)``; ``None`` when the baseline is 0."""
    ideal = world_size / baseline_world_size * baseline_tokens_per_second
    return tokens_per_second / ideal if ideal > 0 else None


def build_report(
    mode: str, sizes: list[SizeFigures], warmup_steps: int, notes: list[str] | None = None
) -> ScalingReport:
    """Sort ``sizes`` by world size, fill in each one's scaling efficiency, name the scaling.

    When several runs share the smallest world size, their mean tokens/s is the baseline.

    Raises:
        ReportError: no sizes, or runs that differ in model or sharding strategy.
    """
    if not sizes:
        raise ReportError("no runs to report")
    sizes = sorted(sizes, key=lambda s: (s.world_size, s.run_id))
    for key in ("model", "sharding_strategy"):
        values = {s.info.get(key) for s in sizes}
        if len(values) > 1:
            listed = ", ".join(f"{s.run_id}: {s.info.get(key)}" for s in sizes)
            raise ReportError(
                f"the runs differ in {key} ({listed}); compare runs that share model and sharding strategy"
            )
    n0 = sizes[0].world_size
    baseline = statistics.fmean(s.global_tokens_per_second for s in sizes if s.world_size == n0)
    for s in sizes:
        s.scaling_efficiency = scaling_efficiency(s.global_tokens_per_second, s.world_size, baseline, n0)
    first = sizes[0].info
    sources = {s.memory_source for s in sizes}
    return ScalingReport(
        mode=mode,
        scaling=_scaling_kind(sizes),
        baseline_world_size=n0,
        warmup_steps=warmup_steps,
        sizes=sizes,
        model=first.get("model"),
        sharding_strategy=first.get("sharding_strategy"),
        mixed_precision=first.get("mixed_precision"),
        device_type=first.get("device_type"),
        memory_source=sources.pop() if len(sources) == 1 else None,
        notes=list(notes or []),
    )


def _scaling_kind(sizes: list[SizeFigures]) -> str:
    """``weak`` when every run has the same per-rank batch, ``strong`` the same global batch."""
    if len({round(s.per_rank_batch_size, 6) for s in sizes}) == 1:
        return "weak"
    if len({round(s.global_batch_size, 6) for s in sizes}) == 1:
        return "strong"
    return "mixed"


def _add(a: HistogramState, b: HistogramState) -> HistogramState:
    return HistogramState(
        tuple((bound, n + m) for (bound, n), (_, m) in zip(a.buckets, b.buckets, strict=False)),
        a.sum + b.sum,
        a.count + b.count,
    )


def _percentiles(values: Sequence[float]) -> tuple[float, float]:
    import numpy as np

    p50, p95 = np.percentile(np.asarray(values, dtype=float), [50, 95]).tolist()
    return p50, p95


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
