"""One rank's training counters at one instant, from a ``/metrics`` scrape or from Prometheus.

Both sources reduce to ``Sample(name, labels, value)`` with the sample names of the exposition
format (``fsdp_train_labelled_tokens_total``, ``fsdp_train_step_seconds_bucket`` ...), so local
and cluster mode build their figures with the same code. Names come from ``observe.catalog``.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from observe import catalog as c
from observe.promtext import Sample

#: Where a rank's peak memory comes from, best first: the CUDA allocator's peak on GPU ranks,
#: else the process's resident-set high-water mark (CPU ranks).
MEMORY_SOURCES: tuple[tuple[c.Metric, str], ...] = (
    (c.TRAIN_DEVICE_MEMORY_PEAK, "device peak allocated (CUDA caching allocator)"),
    (c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK, "process peak resident set size (VmHWM)"),
)

#: Every sample name a snapshot reads; cluster mode queries exactly these.
SNAPSHOT_SAMPLE_NAMES: tuple[str, ...] = (
    c.TRAIN_INFO.name,
    c.TRAIN_STEP.name,
    c.TRAIN_PLANNED_STEPS.name,
    c.TRAIN_STEPS.name,
    c.TRAIN_LAST_STEP_TIMESTAMP.name,
    c.TRAIN_LABELLED_TOKENS.name,
    c.TRAIN_SAMPLES.name,
    c.TRAIN_STEP_SECONDS.name + "_bucket",
    c.TRAIN_STEP_SECONDS.name + "_sum",
    c.TRAIN_STEP_SECONDS.name + "_count",
    c.TRAIN_DATA_WAIT_SECONDS.name + "_sum",
    *(metric.name for metric, _ in MEMORY_SOURCES),
)


@dataclass(frozen=True)
class HistogramState:
    """A cumulative histogram at one instant.

    Attributes:
        buckets: ``(upper bound, cumulative count)`` pairs sorted by bound, ``+inf`` last.
        sum: sum of observations (seconds for the step-time histogram).
        count: number of observations.
    """

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def minus(self, earlier: HistogramState) -> HistogramState:
        """The observations made between ``earlier`` and this state (same bucket layout).

        Raises:
            ValueError: the layouts differ, or a count went backwards (the process restarted).
        """
        if [b for b, _ in self.buckets] != [b for b, _ in earlier.buckets]:
            raise ValueError("histogram bucket layouts differ between the two instants")
        buckets = tuple((b, n - m) for (b, n), (_, m) in zip(self.buckets, earlier.buckets, strict=False))
        if any(n < 0 for _, n in buckets) or self.count < earlier.count:
            raise ValueError("histogram counts went backwards (the process restarted)")
        return HistogramState(buckets, self.sum - earlier.sum, self.count - earlier.count)

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile, estimated as Prometheus' ``histogram_quantile`` does.

        Linear interpolation inside the bucket that holds rank ``q * count``; the lowest
        bucket starts at 0; a rank in the ``+Inf`` bucket returns the highest finite bound
        (promql/quantile.go, Prometheus 2.x). ``None`` when there are no observations.
        """
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if len(self.buckets) < 2 or not math.isinf(self.buckets[-1][0]):
            return None
        total = self.buckets[-1][1]
        if total <= 0:
            return None
        rank = q * total
        counts = [n for _, n in self.buckets]
        b = min(bisect.bisect_left(counts[:-1], rank), len(self.buckets) - 1)
        if b == len(self.buckets) - 1:
            return self.buckets[-2][0]
        upper, count = self.buckets[b]
        lower, below = (0.0, 0.0) if b == 0 else self.buckets[b - 1]
        if upper <= 0 and b == 0:
            return upper
        in_bucket = count - below
        if in_bucket <= 0:
            return upper
        return lower + (upper - lower) * (rank - below) / in_bucket


@dataclass(frozen=True)
class RankSnapshot:
    """What one rank's own metrics said at one instant.

    Attributes:
        rank: the ``rank`` label.
        node: the ``node`` label.
        step: last completed step (``fsdp_train_step``).
        planned_steps: the step the run is configured to reach.
        steps_total, labelled_tokens, samples: counters (steps, tokens, sequences).
        last_step_timestamp: Unix time, on the rank's own clock, at which ``step`` completed.
        step_seconds: the step-time histogram.
        data_wait_seconds: sum of the data-wait histogram (seconds).
        memory_peak_bytes: peak memory of the rank (bytes) per ``memory_source``, or ``None``.
        memory_source: which of ``MEMORY_SOURCES`` it came from.
        info: labels of ``fsdp_train_info`` (model, sharding_strategy, world_size, ...).
    """

    rank: int
    node: str | None
    step: float
    planned_steps: float | None
    steps_total: float
    labelled_tokens: float
    samples: float
    last_step_timestamp: float | None
    step_seconds: HistogramState
    data_wait_seconds: float
    memory_peak_bytes: float | None = None
    memory_source: str | None = None
    info: Mapping[str, str] = field(default_factory=dict)


def rank_snapshots(samples: Iterable[Sample]) -> dict[int, RankSnapshot]:
    """Group samples by their ``rank`` label into snapshots.

    Samples without a ``rank`` label, or of names a snapshot does not read, are ignored. A rank
    whose step, counters or step-time histogram are missing is left out (it has not started).

    Returns:
        ``{rank: RankSnapshot}``.
    """
    by_rank: dict[int, dict[str, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        if s.name in SNAPSHOT_SAMPLE_NAMES and "rank" in s.labels:
            by_rank[int(s.labels["rank"])][s.name].append(s)
    out = {}
    for rank, named in by_rank.items():
        snapshot = _snapshot(rank, named)
        if snapshot is not None:
            out[rank] = snapshot
    return dict(sorted(out.items()))


def _snapshot(rank: int, named: dict[str, list[Sample]]) -> RankSnapshot | None:
    def one(name: str) -> float | None:
        found = named.get(name)
        return found[0].value if found else None

    def need(name: str) -> float:  # one of ``required``, present once past the check below
        return named[name][0].value

    hist = c.TRAIN_STEP_SECONDS.name
    required = (
        c.TRAIN_STEP.name,
        c.TRAIN_STEPS.name,
        c.TRAIN_LABELLED_TOKENS.name,
        c.TRAIN_SAMPLES.name,
        hist + "_bucket",
        hist + "_sum",
        hist + "_count",
        c.TRAIN_DATA_WAIT_SECONDS.name + "_sum",
    )
    if any(name not in named for name in required):
        return None
    # One count per bound, even if a series arrived twice (two scrape jobs for one pod).
    buckets = sorted({float(s.labels["le"]): s.value for s in reversed(named[hist + "_bucket"])}.items())
    memory, source = None, None
    for metric, description in MEMORY_SOURCES:
        if one(metric.name) is not None:
            memory, source = one(metric.name), description
            break
    any_sample = next(iter(named.values()))[0]
    info = named.get(c.TRAIN_INFO.name)
    return RankSnapshot(
        rank=rank,
        node=any_sample.labels.get("node"),
        step=need(c.TRAIN_STEP.name),
        planned_steps=one(c.TRAIN_PLANNED_STEPS.name),
        steps_total=need(c.TRAIN_STEPS.name),
        labelled_tokens=need(c.TRAIN_LABELLED_TOKENS.name),
        samples=need(c.TRAIN_SAMPLES.name),
        last_step_timestamp=one(c.TRAIN_LAST_STEP_TIMESTAMP.name),
        step_seconds=HistogramState(tuple(buckets), need(hist + "_sum"), need(hist + "_count")),
        data_wait_seconds=need(c.TRAIN_DATA_WAIT_SECONDS.name + "_sum"),
        memory_peak_bytes=memory,
        memory_source=source,
        info={k: v for k, v in info[0].labels.items() if k in c.TRAIN_INFO.labels} if info else {},
    )
