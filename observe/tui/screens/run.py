"""The Run screen: a training run's phase, progress, loss history (one point per log window),
throughput, MFU, step time and ETA; then one row per rank: its step time against the median rank's
(a straggler from ``STRAGGLER_RATIO`` on), its data wait as a share of the step (as the trainer's
log writes it), tokens/s, state, and its node and GPU (Enter opens the node)."""

from __future__ import annotations

import statistics
import textwrap
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding

from observe.sources.view import STRAGGLER_RATIO, ClusterSnapshot, RankStatus, RunStatus
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.screens.gpus import text_meter
from observe.tui.widgets.lines import Line, Lines, bar, fit, spark
from observe.tui.widgets.table import Column, VirtualTable

#: The step-time deviation bar's full scale: a rank this much slower (or faster) than the median
#: fills one side, so 1 % is a sliver and the 5 % straggler threshold a quarter.
DEVIATION_SCALE = 0.20
#: Cells on each side of the deviation bar's centre line.
DEVIATION_HALF = 6
_EIGHTHS = "▏▎▍▌▋▊▉█"


def gpu_label(snapshot: ClusterSnapshot, rank: RankStatus) -> str:
    """``GPU 3`` from the rank's ``gpu_uuid`` and its node's agent data; the UUID's tail when the
    node does not list it; ``cpu`` for a rank without a GPU."""
    if rank.gpu_uuid is None:
        return "cpu" if rank.device_type in (None, "cpu") else fmt.NA
    index = snapshot.gpu_index(rank.node, rank.gpu_uuid)
    return f"GPU {index}" if index is not None else "…" + rank.gpu_uuid[-8:]


def deviation_bar(ratio: float | None, half: int = DEVIATION_HALF, scale: float = DEVIATION_SCALE) -> str:
    """``ratio`` (step time / median - 1) as a bar either side of a centre line ``│``: slower to the
    right in eighths of a cell, faster to the left; ``scale`` fills one side."""
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
        vs_median: its step time / the median rank's - 1 (``None`` without a step time).
        straggler: the slowest rank and at least ``STRAGGLER_RATIO`` slower than the median.
    """

    rank: RankStatus
    gpu: str
    vs_median: float | None
    straggler: bool


def rank_rows(snapshot: ClusterSnapshot, run: RunStatus) -> list[RankRow]:
    """The rank table of ``run``."""
    timed = [r.window_step_seconds for r in run.ranks if r.window_step_seconds is not None]
    median = statistics.median(timed) if timed else None
    straggler = run.straggler
    marked = straggler.rank if straggler is not None and straggler.significant else None
    rows = []
    for r in run.ranks:
        vs = (
            None
            if median is None or not median or r.window_step_seconds is None
            else r.window_step_seconds / median - 1
        )
        rows.append(RankRow(r, gpu_label(snapshot, r), vs, r is marked))
    return rows


def _note(row: RankRow) -> str:
    if row.straggler:
        return "◀ straggler"
    return row.rank.error or ""


#: Priorities: RANK, STEP TIME, VS MEDIAN, STATE and NOTE never drop; then, first to last: the
#: data-wait bar, the deviation bar, TOK/S, GPU, NODE (after shrinking to 10), DATA WAIT.
RANK_COLUMNS = (
    Column("rank", "RANK", 5, lambda r: r.rank.rank, right=True, style=lambda r: "accent"),
    Column(
        "node",
        "NODE",
        18,
        lambda r: r.rank.node or None,
        text=lambda r: r.rank.node or fmt.NA,
        min_width=10,
        priority=3,
    ),
    Column("gpu", "GPU", 9, lambda r: r.gpu, priority=3),
    Column(
        "step",
        "STEP TIME",
        9,
        lambda r: r.rank.window_step_seconds,
        right=True,
        text=lambda r: fmt.step_time(r.rank.window_step_seconds),
        style=lambda r: "bad" if r.straggler else None,
    ),
    Column(
        "vs",
        "VS MEDIAN",
        9,
        lambda r: r.vs_median,
        right=True,
        text=lambda r: fmt.NA if r.vs_median is None else f"{r.vs_median * 100:+.1f}%",
        style=lambda r: "bad" if r.straggler else "warn" if (r.vs_median or 0) >= STRAGGLER_RATIO else "dim",
    ),
    Column(
        "vs_bar",
        f"-{DEVIATION_SCALE:.0%} · +{DEVIATION_SCALE:.0%}",
        2 * DEVIATION_HALF + 1,
        lambda r: r.vs_median,
        text=lambda r: deviation_bar(r.vs_median),
        style=lambda r: "bad" if r.straggler else "warn" if (r.vs_median or 0) >= STRAGGLER_RATIO else "ok",
        priority=5,
    ),
    Column(
        "wait",
        "DATA WAIT",
        9,
        lambda r: r.rank.data_wait_ratio,
        right=True,
        text=lambda r: fmt.pct(r.rank.data_wait_ratio, 1),
        priority=2,
    ),
    Column(
        "wait_bar",
        "",
        8,
        lambda r: r.rank.data_wait_ratio,
        text=lambda r: text_meter(r.rank.data_wait_ratio, 8),
        style=lambda r: "warn",
        priority=6,
    ),
    Column(
        "tps",
        "TOK/S",
        8,
        lambda r: r.rank.tokens_per_second,
        right=True,
        text=lambda r: fmt.num(r.rank.tokens_per_second, 0),
        priority=4,
    ),
    Column("state", "STATE", 11, lambda r: r.rank.shown_state, style=lambda r: fmt.STATE_STYLE.get(r.rank.shown_state)),
    Column("note", "NOTE", 0, _note, style=lambda r: "bad", min_width=10),
)


def run_lines(snapshot: ClusterSnapshot, run: RunStatus, width: int) -> list[Line]:
    """The Run screen's header for ``run`` in ``width`` cells (the rank table follows it)."""
    first = run.ranks[0] if run.ranks else None
    phase = run.phase
    title_pieces: list[tuple[str, str | None, int]] = [(f" run {run.run_id or '(no run_id)'} ", "title", 0)]
    if phase:
        title_pieces.append((f" {phase} ", "ok" if phase in ("finished", "training") else "warn", 0))
    if first is not None:
        title_pieces += [
            (f"  model {first.model or fmt.NA}", "value", 1),
            (f"  world size {run.world_size or fmt.NA}", "value", 1),
            (f"  {first.device_type or ''}", "dim", 2),
        ]
    step, planned = run.step, run.planned_steps
    progress = None if step is None or not planned else step / planned
    meter = max(12, min(60, width - 50))
    eta = "done" if run.finished else fmt.duration(run.eta_seconds)
    lines: list[Line] = [fit(title_pieces, width), []]
    lines.append(
        [
            (" Step     ", "label"),
            (f"{fmt.num(step, 0)} / {fmt.num(planned, 0)} ", "value"),
            *bar(progress, meter),
            ("  ETA ", "label"),
            (eta, "value"),
        ]
    )
    losses = [loss for _, loss in run.loss_history]
    windows = f"  {fmt.plural(len(losses), 'log window')}" if losses else "  no history yet"
    lines.append(
        [
            (" Loss     ", "label"),
            (f"{fmt.num(run.loss, 4)} ", "value"),
            (spark(losses, max(8, width - 40), top=None), "spark"),
            (windows, "dim"),
        ]
    )
    lines.append(
        fit(
            [
                (" Tokens/s ", "label", 0),
                (fmt.num(run.global_tokens_per_second, 0), "value", 0),
                ("   MFU ", "label", 0),
                (fmt.pct(run.mfu_ratio, 1), "value" if run.mfu_ratio is not None else "na", 0),
                ("   Step time ", "label", 0),
                (fmt.step_time(run.step_seconds), "value", 0),
                ("  (slowest rank, last log window)", "dim", 1),
            ],
            width,
        )
    )
    straggler = run.straggler
    if straggler is not None and straggler.significant:
        r = straggler.rank
        lines.append(
            fit(
                [
                    (" Straggler ", "label", 0),
                    (f"rank {r.rank}", "bad", 0),
                    (f" on node {r.node or fmt.NA} {gpu_label(snapshot, r)}", "value", 0),
                    (f"  {straggler.slower_ratio * 100:+.1f}% step time vs the median rank", "warn", 1),
                ],
                width,
            )
        )
    elif straggler is not None:
        lines.append(
            fit(
                [
                    (" Straggler ", "label", 0),
                    ("none", "ok", 0),
                    (
                        f"  (slowest rank {straggler.rank.rank} {straggler.slower_ratio * 100:+.1f}%, "
                        f"below {STRAGGLER_RATIO:.0%})",
                        "dim",
                        1,
                    ),
                ],
                width,
            )
        )
    return lines


def no_run_lines(snapshot: ClusterSnapshot, width: int) -> list[Line]:
    """Why there is no run: no trainer endpoints given (and how to give some), or endpoints given
    that do not answer (with their errors), or Prometheus without trainer series."""
    if snapshot.trainers is None:
        lines: list[Line] = [
            [(" no training run seen", "title")],
            [(" Prometheus has no fsdp_train_* series: are the trainer pods scraped?", "dim")],
        ]
    elif snapshot.trainers == 0:
        hint = snapshot.trainer_hint or (
            "give trainer endpoints (--trainer URL), --kube to find trainer pods, or --prometheus"
        )
        lines = [[(" no training run seen", "title")], [(" no trainer endpoints: ", "dim"), (hint, "dim")]]
    else:
        if any(e.startswith("training exited") for e in snapshot.errors):  # the demo's training (RunWatch)
            lines = [[(" no training run seen: the training process exited", "title")]]
        else:
            lines = [
                [(" no training run seen", "title")],
                [
                    (
                        f" {fmt.plural(snapshot.trainers, 'trainer endpoint')} given; none answers with "
                        "fsdp_train_* series yet:",
                        "warn",
                    )
                ],
            ]
        problems: list[Line] = []
        for error in (e for e in snapshot.errors if e.startswith(("trainer ", "training "))):
            for n, piece in enumerate(textwrap.wrap(error, max(8, width - 4), break_on_hyphens=False)):
                problems.append([(" ! " if n == 0 else "   ", "bad"), (piece, "bad")])  # wrapped: the why is at the end
        lines += problems[:20]
    return [fit([(text, style, 0) for text, style in line], width) for line in lines]


class RunScreen(TableScreen):
    """The training run(s) seen; ``n`` shows the next run when there are several."""

    TITLE = "Run"
    BINDINGS = [*TableScreen.BINDINGS, Binding("n", "next_run", "next run")]

    def __init__(self) -> None:
        super().__init__()
        self.index = 0

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield Lines(id="run")
        yield VirtualTable(
            RANK_COLUMNS,
            row_key=lambda r: (r.rank.run_id, r.rank.rank),
            search_text=lambda r: f"{r.rank.rank} {r.rank.node} {r.gpu} {r.rank.shown_state}",
            sort_key="rank",
            empty="no ranks",
            id="ranks",
        )
        yield from self.compose_filter()
        yield from self.compose_footer()

    def action_next_run(self) -> None:
        self.index += 1
        self.update_snapshot(self.top.snapshot)

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        width = self.size.width or 120
        table = self.table
        lines: list[Line]
        if not snapshot.runs:
            lines = (
                no_run_lines(snapshot, width) if snapshot.time_unix else [[(" waiting for the first refresh…", "dim")]]
            )
            table.display = False
            table.set_rows([])
        else:
            run = snapshot.runs[self.index % len(snapshot.runs)]
            lines = run_lines(snapshot, run, width)
            if len(snapshot.runs) > 1:
                lines.insert(
                    0, [(f" run {self.index % len(snapshot.runs) + 1} of {len(snapshot.runs)} (n: next)", "dim")]
                )
            table.display = True
            table.set_rows(rank_rows(snapshot, run))
        self.query_one("#run", Lines).set_lines(lines)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        node = event.row.rank.node
        if node and self.top.snapshot.node(node) is not None:
            self.top.open_node(node)
