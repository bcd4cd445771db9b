"""The Run screen: a training run's phase, progress, loss history (one point per log window),
throughput, MFU, step time and ETA; its verdict as a banner (which rank is stuck, or slow, and
why: ``observe.diagnosis`` over the ranks' ``/metrics`` series); then one row per rank, the
verdict's culprits first: what its training thread does (computing, in a collective, waiting for
data, in a phase; ``!`` stalled), the collective it waits in or the last it issued, its compute
per step against the median rank's (the straggler signal: synchronous ranks share one step time),
its collective and data waits, tokens/s, and its node and GPU. Enter opens a rank: its stack and
collective state, asked once from its ``/debug/state`` (``observe.tui.screens.rank``)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from textual.app import ComposeResult
from textual.binding import Binding

from observe.diagnosis import Verdict
from observe.sources.view import ClusterSnapshot, RankStatus, RunStatus
from observe.tui import fmt
from observe.tui.screens.base import TableScreen
from observe.tui.screens.run_ranks import RANK_COLUMNS, RankRow, median_compute, note, rank_rows, state_text
from observe.tui.widgets.lines import Line, Lines, bar, fit, spark
from observe.tui.widgets.table import VirtualTable

if TYPE_CHECKING:
    from observe.tui.screens.rank import Fetched

#: Banner style per verdict (healthy is quiet: no badge).
VERDICT_STYLE = {"hang": "alarm", "mismatch": "alarm", "stopped": "alarm", "straggler": "caution"}
#: Lines of the verdict banner at most (the rank view shows the whole verdict), below and from
#: ``TALL_ROWS`` terminal rows (below, the header also leaves out its blank line).
BANNER_LINES, BANNER_LINES_TALL, TALL_ROWS = 3, 5, 30


def verdict_lines(run: RunStatus, width: int, most: int = BANNER_LINES) -> list[Line]:
    """The verdict banner in ``width`` cells and at most ``most`` lines: a badge with the verdict
    and its summary, wrapped (a healthy run's in quiet colours, with the rank of most compute
    against the median; no verdict without the ranks' hang series, and why)."""
    label = (" Verdict  ", "label")
    verdict = run.verdict
    if verdict is None:
        return [
            fit(
                [
                    (label[0], "label", 0),
                    ("none", "dim", 0),
                    (
                        ": the ranks export no hang series (collective tracking off: FSDP_OBSERVE_COLLECTIVES=0?)",
                        "dim",
                        1,
                    ),
                ],
                width,
            )
        ]
    if verdict.verdict == "healthy":
        text = _without_word(verdict)
        pieces: list[tuple[str, str | None, int]] = [(label[0], "label", 0), ("healthy", "ok", 0)]
        pieces.append((f"  {text}", "dim", 1))
        top = _most_compute(run)
        if top is not None:
            pieces.append((f"; most compute: rank {top[0]}, {top[1]:.2f}× the median", "dim", 2))
        return [fit(pieces, width)]
    badge = f" {verdict.verdict.upper()} "
    indent = len(label[0])
    room = max(10, width - indent - len(badge) - 1)
    body = textwrap.wrap(_without_word(verdict), room, break_on_hyphens=False) or [""]
    rest = textwrap.wrap(" ".join(body[1:]), max(10, width - indent), break_on_hyphens=False) if len(body) > 1 else []
    style = "bad" if VERDICT_STYLE.get(verdict.verdict) == "alarm" else "warn"
    lines: list[Line] = [[label, (badge, VERDICT_STYLE.get(verdict.verdict, "alarm")), (" " + body[0], style)]]
    for n, part in enumerate(rest[: most - 1]):
        if n == most - 2 and len(rest) > most - 1:
            part = fmt.shorten(part + " " + " ".join(rest[most - 1 :]), max(10, width - indent))
        lines.append([(" " * indent, None), (part, style)])
    return lines


def _without_word(verdict: Verdict) -> str:
    """The summary without its leading ``hang:`` (the badge says it)."""
    head = f"{verdict.verdict}: "
    return verdict.summary[len(head) :] if verdict.summary.startswith(head) else verdict.summary


def _most_compute(run: RunStatus) -> tuple[int, float] | None:
    """``(rank, compute / median)`` of the rank with the most compute per step (2+ ranks)."""
    median = median_compute(run)
    timed = [r for r in run.ranks if r.window_compute_seconds is not None]
    if not median or len(timed) < 2:
        return None
    top = max(timed, key=lambda r: r.window_compute_seconds or 0.0)
    return top.rank, (top.window_compute_seconds or 0.0) / median


def run_lines(snapshot: ClusterSnapshot, run: RunStatus, width: int, height: int = 40) -> list[Line]:
    """The Run screen's header for ``run`` in ``width`` cells on a ``height``-row terminal (the
    rank table follows it)."""
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
    tall = height >= TALL_ROWS
    lines: list[Line] = [fit(title_pieces, width), []] if tall else [fit(title_pieces, width)]
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
    lines += verdict_lines(run, width, BANNER_LINES_TALL if tall else BANNER_LINES)
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
        lines = [[(" no training run seen", "title")]]
        for piece in textwrap.wrap(  # wrapped at words: the fix is at the end of the line
            f"no trainer endpoints: {hint}", max(8, width - 2), break_on_hyphens=False
        ):
            lines.append([(f" {piece}", "dim")])
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


def _host(url: str) -> str | None:
    return urlsplit(url).hostname if url.startswith("http") else None


def node_peers(run: RunStatus, rank: RankStatus) -> list[RankStatus]:
    """The other ranks of ``rank``'s node that answered: those with its node name, or, for a rank
    whose node is not known (an address that never answered), those at its host (a pod's ranks
    share its IP address)."""
    host = _host(rank.source)
    return [
        r
        for r in run.ranks
        if r.rank != rank.rank
        and r.state == "ok"
        and ((rank.node and r.node == rank.node) or (not rank.node and host and _host(r.source) == host))
    ]


class RunScreen(TableScreen):
    """The training run(s) seen; ``n`` shows the next run when there are several; Enter opens a
    rank (its stack and collective state), ``o`` the rank's node."""

    TITLE = "Run"
    BINDINGS = [
        *TableScreen.BINDINGS,
        Binding("n", "next_run", "next run"),
        Binding("o", "open_node", "node"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.index = 0

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield Lines(id="run")
        yield VirtualTable(
            RANK_COLUMNS,
            row_key=lambda r: (r.rank.run_id, r.rank.rank),
            search_text=lambda r: f"{r.rank.rank} {r.rank.node} {r.gpu} {state_text(r.rank)} {note(r)}",
            sort_key="rank",
            empty="no ranks",
            id="ranks",
        )
        yield from self.compose_filter()
        yield from self.compose_footer()

    def action_next_run(self) -> None:
        self.index += 1
        self.update_snapshot(self.top.snapshot)

    @property
    def run(self) -> RunStatus | None:
        """The run shown (``None`` without any)."""
        runs = self.top.snapshot.runs
        return runs[self.index % len(runs)] if runs else None

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
            lines = run_lines(snapshot, run, width, self.app.size.height or 40)
            if len(snapshot.runs) > 1:
                lines.insert(
                    0, [(f" run {self.index % len(snapshot.runs) + 1} of {len(snapshot.runs)} (n: next)", "dim")]
                )
            table.display = True
            table.set_rows(rank_rows(snapshot, run))
        self.query_one("#run", Lines).set_lines(lines)

    def on_virtual_table_selected(self, event: VirtualTable.Selected) -> None:
        self.open_rank(event.row)

    def open_rank(self, row: RankRow, fetched: Fetched | None = None) -> None:
        """Show ``row``'s rank in full (``observe.tui.screens.rank``), its page asked for now
        (or ``fetched`` already)."""
        from observe.tui.screens.rank import RankScreen

        run = self.run
        if run is None:
            return
        self.app.push_screen(
            RankScreen(row.rank, row.gpu, run.verdict, row.culprit, node_peers(run, row.rank), fetched=fetched)
        )

    def action_open_node(self) -> None:
        row = self.table.current_row
        node = row.rank.node if row is not None else ""
        if node and self.top.snapshot.node(node) is not None:
            self.top.open_node(node)
        elif row is not None:
            self.notify(f"no agent data for node {node or '(unknown)'}", timeout=2)
