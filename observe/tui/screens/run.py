"""The Run screen: a training run's progress, loss history, throughput, MFU, step time, ETA, and one
step-time and data-wait bar per rank with the straggler marked and tied to its node and GPU."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll

from observe.sources.view import ClusterSnapshot, RankStatus, RunStatus
from observe.tui import fmt
from observe.tui.screens.base import TopScreen
from observe.tui.screens.cluster import STATE_STYLE
from observe.tui.widgets.lines import Line, Lines, bar, spark


def gpu_label(snapshot: ClusterSnapshot, rank: RankStatus) -> str:
    """``GPU 3`` from the rank's ``gpu_uuid`` and its node's agent data; the UUID alone when the node
    does not list it; ``cpu`` for a rank without a GPU."""
    if rank.gpu_uuid is None:
        return "cpu" if rank.device_type in (None, "cpu") else fmt.NA
    index = snapshot.gpu_index(rank.node, rank.gpu_uuid)
    return f"GPU {index}" if index is not None else rank.gpu_uuid


def run_lines(snapshot: ClusterSnapshot, run: RunStatus, width: int) -> list[Line]:
    """The whole Run screen for ``run``."""
    first = run.ranks[0] if run.ranks else None
    title: Line = [(f" run {run.run_id or '(no run_id)'} ", "title")]
    if first is not None:
        title += [(f"  model {first.model or fmt.NA}", "value"), (f"  world size {run.world_size or fmt.NA}", "value"),
                  (f"  {first.device_type or ''}", "dim")]
    step, planned = run.step, run.planned_steps
    progress = None if step is None or not planned else step / planned
    meter = max(20, min(60, width - 50))
    lines: list[Line] = [title, []]
    lines.append([(" Step     ", "label"), (f"{fmt.num(step, 0)} / {fmt.num(planned, 0)} ", "value"),
                  *bar(progress, meter), ("  ETA ", "label"), (fmt.duration(run.eta_seconds), "value")])
    losses = [loss for _, loss in run.loss_history]
    lines.append([(" Loss     ", "label"), (f"{fmt.num(run.loss, 4)} ", "value"),
                  (spark(losses, max(10, width - 40), top=None), "spark"),
                  (f"  {len(losses)} point{'s' * (len(losses) != 1)}" if losses else "  no history yet", "dim")])
    lines.append([(" Tokens/s ", "label"), (fmt.num(run.global_tokens_per_second, 0), "value"),
                  ("   MFU ", "label"), (fmt.pct(run.mfu_ratio, 1), "value" if run.mfu_ratio is not None else "na"),
                  ("   Step time ", "label"), (fmt.step_time(run.step_seconds), "value")])
    straggler = run.straggler
    if straggler is not None:
        r = straggler.rank
        label, style = (" Straggler ", "bad") if straggler.significant else (" Slowest   ", "value")
        lines.append([(label, "label"), (f"rank {r.rank}", style),
                      (f" on node {r.node or fmt.NA} {gpu_label(snapshot, r)}", "value"),
                      (f"  {straggler.slower_ratio * 100:+.1f}% step time vs the median rank", "warn" if
                       straggler.significant else "dim")])
    lines.append([])
    step_max = max((r.window_step_seconds or 0.0 for r in run.ranks), default=0.0) or None
    meter = max(16, min(36, (width - 44) // 2))
    lines.append([(f" {'RANK':>4} {'NODE':<18} {'GPU':<8} ", "label"), ("STEP TIME".ljust(meter + 1), "label"),
                  ("DATA WAIT".ljust(meter + 1), "label"), ("  TOK/S  STATE", "label")])
    for r in run.ranks:
        mark = straggler if straggler is not None and r is straggler.rank else None
        step_ratio = None if r.window_step_seconds is None or not step_max else r.window_step_seconds / step_max
        wait = r.data_wait_seconds
        wait_ratio = None if wait is None or not step_max else wait / step_max
        line: Line = [(f" {r.rank:>4} ", "accent"), (f"{fmt.one_line(r.node or fmt.NA, 18):<18} ", "value"),
                      (f"{gpu_label(snapshot, r)[:8]:<8} ", "value"),
                      *bar(step_ratio, meter, fmt.step_time(r.window_step_seconds),
                           "high" if mark is not None and mark.significant else "low", outside=8),
                      (" ", None), *bar(wait_ratio, meter, fmt.step_time(wait), "mid", outside=8),
                      (f" {fmt.num(r.tokens_per_second, 0):>7} ", "value"), (r.state, STATE_STYLE.get(r.state, "dim"))]
        if mark is not None and mark.significant:
            line.append((f"  ◀ straggler +{mark.slower_ratio * 100:.1f}%", "bad"))
        elif mark is not None:
            line.append((f"  ◀ slowest +{mark.slower_ratio * 100:.1f}%", "dim"))
        if r.error:
            line.append((f"  {r.error}", "bad"))
        lines.append(line)
    return lines


class RunScreen(TopScreen):
    """The training run(s) seen; ``n`` shows the next run when there are several."""

    TITLE = "Run"
    BINDINGS = [Binding("n", "next_run", "next run"), Binding("escape", "back", "back")]

    def __init__(self) -> None:
        super().__init__()
        self.index = 0

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        with VerticalScroll(id="run-body"):
            yield Lines(id="run")
        yield from self.compose_footer()

    def on_mount(self) -> None:
        self.update_snapshot(self.app.snapshot)

    def action_next_run(self) -> None:
        self.index += 1
        self.update_snapshot(self.app.snapshot)

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        width = self.size.width or 120
        if not snapshot.runs:
            lines: list[Line] = [[(" no training run seen", "title")],
                                 [(" give trainer endpoints (--trainer URL), --kube to find trainer pods, or "
                                   "--prometheus", "dim")]]
        else:
            run = snapshot.runs[self.index % len(snapshot.runs)]
            lines = run_lines(snapshot, run, width)
            if len(snapshot.runs) > 1:
                lines.insert(0, [(f" run {self.index % len(snapshot.runs) + 1} of {len(snapshot.runs)} (n: next)",
                                  "dim")])
        self.query_one("#run", Lines).set_lines(lines)
