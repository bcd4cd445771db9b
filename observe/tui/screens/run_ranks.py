"""The Run screen's rank table: one row per rank, the verdict's culprits first, with what its
training thread does, its collective, its compute per step against the median rank's (the
straggler signal: synchronous ranks share one step time), its waits, and its node and GPU."""

from __future__ import annotations

from dataclasses import dataclass

from observe.diagnosis import Culprit
from observe.diagnosis.judge import STRAGGLER_RATIO
from observe.diagnosis.verdict import seconds_text
from observe.sources.view import ClusterSnapshot, RankStatus, RunStatus
from observe.tui import fmt
from observe.tui.widgets.table import Column

#: The compute deviation bar's full scale: a rank with twice the median rank's compute per step
#: fills one side, so the verdict's straggler ratio (1.5x) is half of it.
DEVIATION_SCALE = 1.0
#: Cells on each side of the deviation bar's centre line.
DEVIATION_HALF = 6
_EIGHTHS = "▏▎▍▌▋▊▉█"
#: A culprit's mark in the rank table's NOTE column, by ``observe.diagnosis.KINDS``.
CULPRIT_NOTE = {
    "behind": "◀ behind",
    "mismatch": "◀ other op",
    "dead": "◀ gone",
    "unresponsive": "◀ no answer",
    "unobserved": "◀ not asked",
    "straggler": "◀ straggler",
}


def gpu_label(snapshot: ClusterSnapshot, rank: RankStatus) -> str:
    """``GPU 3`` from the rank's ``gpu_uuid`` and its node's agent data; the UUID's tail when the
    node does not list it; ``cpu`` for a rank without a GPU; N/A for a rank never heard from (an
    address that has not answered)."""
    if rank.gpu_uuid is None:
        if rank.device_type is None and rank.step is None:
            return fmt.NA
        return "cpu" if rank.device_type in (None, "cpu") else fmt.NA
    index = snapshot.gpu_index(rank.node, rank.gpu_uuid)
    return f"GPU {index}" if index is not None else "…" + rank.gpu_uuid[-8:]


def deviation_bar(ratio: float | None, half: int = DEVIATION_HALF, scale: float = DEVIATION_SCALE) -> str:
    """``ratio`` (compute / median - 1) as a bar either side of a centre line ``│``: more to the
    right in eighths of a cell, less to the left; ``scale`` fills one side."""
    if ratio is None:
        return " " * (2 * half + 1)
    eighths = round(min(1.0, abs(ratio) / scale) * half * 8)
    full, part = divmod(eighths, 8)
    if ratio >= 0:
        right = ("█" * full + (_EIGHTHS[part - 1] if part else "")).ljust(half)
        return " " * half + "│" + right
    left = ("▐" if part >= 4 else "") + "█" * full
    return left.rjust(half)[-half:] + "│" + " " * half


@dataclass(frozen=True)
class RankRow:
    """One line of the rank table.

    Attributes:
        rank: the rank. gpu: its GPU as shown (``gpu_label``).
        vs_median: its compute per step / the median rank's - 1 (``None`` without one).
        culprit: what the verdict says of it, when it is a culprit.
        order: its place in the table's default order: the culprits first, in the verdict's
            order, then the others (``len(culprits)``).
    """

    rank: RankStatus
    gpu: str
    vs_median: float | None
    culprit: Culprit | None = None
    order: int = 0

    @property
    def straggler(self) -> bool:
        """The verdict names it a straggler."""
        return self.culprit is not None and self.culprit.kind == "straggler"


def median_compute(run: RunStatus) -> float | None:
    """The median rank's compute per step (the lower median, as the verdict takes it)."""
    timed = sorted(r.window_compute_seconds for r in run.ranks if r.window_compute_seconds is not None)
    return timed[(len(timed) - 1) // 2] if timed else None


def rank_rows(snapshot: ClusterSnapshot, run: RunStatus) -> list[RankRow]:
    """The rank table of ``run``."""
    median = median_compute(run)
    culprits = run.verdict.culprits if run.verdict is not None else []
    named = {c.rank: (i, c) for i, c in reversed(list(enumerate(culprits))) if c.rank is not None}
    rest = len(culprits)
    rows = []
    for r in run.ranks:
        compute = r.window_compute_seconds
        vs = None if not median or compute is None else compute / median - 1
        order, culprit = named.get(r.rank, (rest, None))
        rows.append(RankRow(r, gpu_label(snapshot, r), vs, culprit, order))
    return rows


def state_text(r: RankStatus) -> str:
    """What the rank's training thread does (``computing``, ``collective``, ``data``, or its phase
    such as ``checkpointing``), ``!`` before it when its watchdog sees a stall; a failed pull's
    state (``slow``, ``unreachable``) or ``finished`` instead when that is what is known."""
    shown = r.shown_state
    if shown != "ok":
        return shown
    doing = r.phase if r.train_state == "phase" and r.phase else r.train_state
    text = doing or "ok"
    return f"! {text}" if r.stalled else text


def _state_style(row: RankRow) -> str | None:
    r = row.rank
    if r.shown_state != "ok":
        return fmt.STATE_STYLE.get(r.shown_state, "ok")
    if row.culprit is not None or r.stalled:
        return "bad"
    return "accent" if r.train_state == "phase" else None


def collective_text(r: RankStatus) -> str:
    """``in #73 all_gather_single`` while blocked in it (the sequence number first: it is what tells
    the ranks apart in a hang, and stays when the column is cut), else ``issued #72`` (its count
    on its busiest process group), with the group when the rank has several; N/A without series."""
    several = len(r.collectives) > 1
    if r.waiting is not None:
        pg, op, seq = r.waiting
        return f"in #{seq} {op or 'collective'}" + (f" pg {pg}" if several else "")
    if r.collectives:
        pg, enqueued, _ = max(r.collectives, key=lambda g: g[1])
        return f"issued #{enqueued}" + (f" pg {pg}" if several else "")
    return fmt.NA


def _collective_value(r: RankStatus) -> int | None:
    if r.waiting is not None:
        return r.waiting[2]
    return max((g[1] for g in r.collectives), default=None)


def _blocked_text(r: RankStatus) -> str:
    if r.blocked_seconds is None:
        return fmt.NA
    return seconds_text(r.blocked_seconds) if r.blocked_seconds > 0 else ""


def _vs_text(row: RankRow) -> str:
    return fmt.NA if row.vs_median is None else f"{row.vs_median + 1:.2f}×"


def _vs_style(row: RankRow) -> str:
    if row.straggler:
        return "bad"
    return "warn" if row.vs_median is not None and row.vs_median + 1 >= STRAGGLER_RATIO else "dim"


def note(row: RankRow) -> str:
    """The NOTE cell: a culprit's mark (``CULPRIT_NOTE``), else why the rank's pull failed."""
    if row.culprit is not None:
        return CULPRIT_NOTE.get(row.culprit.kind, "◀ culprit")
    return row.rank.error or ""


#: Priorities: RANK, STATE, COMPUTE, VS MEDIAN and NOTE never drop; then, first to last: TOK/S,
#: the deviation bar, DATA WAIT, COLL WAIT, BLOCKED, GPU, NODE, COLLECTIVE (NODE and COLLECTIVE
#: shrink first, and take back the room of dropped columns: COLLECTIVE, then NODE).
RANK_COLUMNS = (
    Column(
        "rank",
        "RANK",
        5,
        lambda r: (r.order, r.rank.rank),
        text=lambda r: str(r.rank.rank),
        right=True,
        style=lambda r: "bad" if r.culprit is not None else "accent",
    ),
    Column(
        "node",
        "NODE",
        18,
        lambda r: r.rank.node or None,
        text=lambda r: r.rank.node or fmt.NA,
        min_width=10,
        priority=2,
        regrow=True,
    ),
    Column("gpu", "GPU", 9, lambda r: r.gpu, priority=3),
    Column("state", "STATE", 13, lambda r: state_text(r.rank), style=_state_style),
    Column(
        "collective",
        "COLLECTIVE",
        26,
        lambda r: _collective_value(r.rank),
        text=lambda r: collective_text(r.rank),
        style=lambda r: "bad" if r.culprit is not None and r.culprit.kind != "straggler" else None,
        min_width=16,
        priority=1,
        regrow=True,
    ),
    Column(
        "blocked",
        "BLOCKED",
        7,
        lambda r: r.rank.blocked_seconds,
        right=True,
        text=lambda r: _blocked_text(r.rank),
        style=lambda r: "warn" if r.rank.stalled else "dim",
        priority=4,
    ),
    Column(
        "compute",
        "COMPUTE",
        8,
        lambda r: r.rank.window_compute_seconds,
        right=True,
        text=lambda r: fmt.step_time(r.rank.window_compute_seconds),
        style=lambda r: "bad" if r.straggler else None,
    ),
    Column("vs", "VS MEDIAN", 9, lambda r: r.vs_median, right=True, text=_vs_text, style=_vs_style),
    Column(
        "vs_bar",
        f"-{DEVIATION_SCALE:.0%} · +{DEVIATION_SCALE:.0%}",
        2 * DEVIATION_HALF + 1,
        lambda r: r.vs_median,
        text=lambda r: deviation_bar(r.vs_median),
        style=lambda r: "bad" if r.straggler else "warn" if _vs_style(r) == "warn" else "ok",
        priority=7,
    ),
    Column(
        "coll_wait",
        "COLL WAIT",
        9,
        lambda r: r.rank.window_collective_wait_seconds,
        right=True,
        text=lambda r: fmt.step_time(r.rank.window_collective_wait_seconds),
        priority=5,
    ),
    Column(
        "wait",
        "DATA WAIT",
        9,
        lambda r: r.rank.data_wait_ratio,
        right=True,
        text=lambda r: fmt.pct(r.rank.data_wait_ratio, 1),
        priority=6,
    ),
    Column(
        "tps",
        "TOK/S",
        8,
        lambda r: r.rank.tokens_per_second,
        right=True,
        text=lambda r: fmt.num(r.rank.tokens_per_second, 0),
        priority=8,
    ),
    Column("note", "NOTE", 0, note, style=lambda r: "bad", min_width=11),
)
