"""One rank in full (Enter on the Run screen's rank table): what its series say, what the verdict
says of it, and its stack and collective state, asked once from its ``/debug/state`` page.

The page is fetched in a worker on the app's event loop (an asyncio request with a timeout: the UI
never waits on it); ``r`` asks again. A rank that does not answer is shown with why: ``timeout``
(its process is alive and its Python threads do not run: its training thread holds the GIL) or
``refused`` (nothing listens: its process is gone). For such a rank, the other ranks of its node
are asked in turn: each reports, from the run's dump folder, whether the rank's process is alive
and what its GIL watch wrote (the stack that holds the GIL), which is shown instead.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from observe.diagnosis import Culprit, RankEvidence, Unreached, Verdict
from observe.diagnosis.judge import frame_text, gil_stack, library_file
from observe.diagnosis.verdict import ranks_text, seconds_text
from observe.sources.forensics import STATE_TIMEOUT, fetch_state, state_url
from observe.sources.view import RankStatus
from observe.tui import fmt
from observe.tui.screens.help import box_text_width
from observe.tui.widgets.lines import Line, Lines, fit

#: Peers of an unanswering rank asked for what they know of it, at most.
PEERS_ASKED = 3
#: Seconds to wait for a page (``diagnose``'s wait: a rank blocked in a collective answers in
#: milliseconds; one that has not in this time will not).
PAGE_TIMEOUT = STATE_TIMEOUT
#: Why a rank's page did not come, by ``Unreached.reason``.
WHY = {
    "timeout": "its process is alive but its Python threads do not run: its training thread holds the GIL",
    "refused": "nothing listens there: its process is gone",
}


@dataclass(frozen=True)
class Fetched:
    """What the rank view got: the rank's page (``state``), or why not, and what a peer of its
    node says of it when it did not answer (``peer``: that peer's rank; ``report``: its entry)."""

    state: RankEvidence | Unreached
    at_unix: float
    peer: int | None = None
    report: dict | None = None


def culprit_text(c: Culprit) -> str:
    """What the verdict says of a culprit, one sentence (the waiting ranks counted past 8)."""
    what = f"{c.op or 'collective'} #{c.seq}" if c.seq is not None else "the collective"
    on = f" on process group {c.pg}" if c.pg else ""
    verb = "waits" if len(c.waiting_ranks) == 1 else "wait"
    crowd = f"; {ranks_text(c.waiting_ranks)} {verb} in {what}{on}" if c.waiting_ranks else ""
    if c.kind == "behind":
        return f"behind: it has not entered {what}{on} for {seconds_text(c.seconds)}" + (
            f"; {ranks_text(c.waiting_ranks)} {verb} in it" if c.waiting_ranks else ""
        )
    if c.kind == "mismatch":
        return f"mismatch: it issued {what}{on} while {c.note or 'the others issued another op'}"
    if c.kind == "straggler":
        return (
            f"straggler: it computes {seconds_text(c.seconds)} per step against a median of "
            f"{seconds_text(c.median_compute_seconds)} (+{seconds_text(c.excess_seconds)}); the others wait for it"
        )
    if c.kind == "dead":
        return f"gone: {c.note or 'its process is not running'}{crowd}"
    if c.kind == "unresponsive":
        return f"does not answer: {c.note or 'no answer'}{crowd}"
    return f"{c.kind}: {c.note or ''}{crowd}"


def _wrap(text: str, width: int, style: str | None, indent: int) -> list[Line]:
    import textwrap

    parts = textwrap.wrap(text, max(10, width - indent), break_on_hyphens=False) or [""]
    return [[(" " * indent, None), (p, style)] for p in parts]


def _field(label: str, text: str, width: int, style: str | None = "value") -> list[Line]:
    lines = _wrap(text, width, style, 11)
    lines[0][0] = (f" {label:<10}", "label")
    return lines


def series_lines(
    rank: RankStatus, gpu: str, culprit: Culprit | None, verdict: Verdict | None, width: int
) -> list[Line]:
    """The rank as its ``/metrics`` series and the run's verdict show it."""
    local = rank.local_rank if rank.local_rank is not None else fmt.NA
    lines: list[Line] = [
        fit(
            [
                (f" rank {rank.rank} ", "title", 0),
                (f"  node {rank.node or fmt.NA}  {gpu}", "value", 0),
                (f"  local rank {local}", "value", 1),
            ],
            width,
        ),
        [(f" run {rank.run_id}  ·  Esc closes, r asks again", "dim")],
        [],
    ]
    if culprit is not None:  # what the verdict says of it, then who else it names
        lines += _field("culprit", culprit_text(culprit), width, "warn" if culprit.kind == "straggler" else "bad")
    elif verdict is not None:
        style = "ok" if verdict.verdict == "healthy" else "warn" if verdict.verdict == "straggler" else "bad"
        lines += _field("verdict", verdict.summary, width, style)
    if verdict is not None:
        for detail in verdict.details[:4]:  # each cut: one can list thousands of addresses
            lines += _wrap(fmt.shorten(detail, 3 * width), width, "dim", 11)
    doing = rank.phase if rank.train_state == "phase" else rank.train_state
    state = f"{doing or fmt.NA} (pull: {rank.shown_state}{': ' + rank.error if rank.error else ''})"
    if rank.stalled:
        state += f"; stalled: no progress past the watchdog's {seconds_text(rank.stall_threshold_seconds)}"
    lines += _field("state", state, width)
    if rank.step is not None or rank.phase:
        lines += _field("step", f"{fmt.num(rank.step, 0)}  (phase {rank.phase or fmt.NA})", width)
    if rank.collectives:
        groups = "; ".join(f"pg {pg}: issued {n}, completed {done}" for pg, n, done in rank.collectives)
        lines += _field("groups", groups, width)
    if rank.waiting is not None:
        pg, op, seq = rank.waiting
        lines += _field("blocked", f"in {op} #{seq} on pg {pg} for {seconds_text(rank.blocked_seconds)}", width, "warn")
    if rank.window_step_seconds is None and rank.window_compute_seconds is None:
        return lines
    split = (
        f"compute {fmt.step_time(rank.window_compute_seconds)}, collective wait "
        f"{fmt.step_time(rank.window_collective_wait_seconds)}, data wait {fmt.step_time(rank.data_wait_seconds)}, "
        f"step {fmt.step_time(rank.window_step_seconds)} (last log window)"
    )
    lines += _field("per step", split, width)
    return lines


def frame_line(where: str, width: int) -> str:
    """``file:line in function`` in ``width`` cells, a long path cut from its left (``…/pkg/mod.py:7
    in f``): the file's name and the function are what tell frames apart."""
    where = fmt.one_line(where)
    return where if len(where) <= width else "…" + where[-(width - 1) :]


def stack_lines(stack: Sequence[str] | Sequence[tuple[str, int, str, str]], width: int) -> list[Line]:
    """A stack, innermost frame last: the user's frames bright, Python's and packages' dim, each
    frame's code on a line of its own below it."""
    lines: list[Line] = []
    for frame in stack:
        if isinstance(frame, str):
            where, code = frame, ""
            path = frame.rsplit(":", 2)[0]
        else:
            where, code, path = frame_text((frame[0], frame[1], frame[2], "")), frame[3], frame[0]
        style = "dim" if library_file(path) else "value"
        lines.append([("   ", None), (frame_line(where, max(10, width - 4)), style)])
        if code:
            lines.append(
                [("       ", None), (fmt.one_line(code, max(10, width - 8)), "accent" if style == "value" else "dim")]
            )
    return lines or [[("   (no Python frame)", "dim")]]


def page_lines(fetched: Fetched | None, url: str | None, width: int) -> list[Line]:
    """What the rank's ``/debug/state`` (or a peer's report of it) says."""
    if url is None:
        return [
            [],
            [(" stack", "title")],
            *_wrap(
                "not asked: this view reads Prometheus, which has no stacks. Where the ranks can be reached, "
                "fsdp-observe top --trainer URL (or diagnose --trainer URL) shows them.",
                width,
                "dim",
                1,
            ),
        ]
    if fetched is None:
        return [[], [(" stack", "title")], [(f" asking {state_url(url)} …", "dim")]]
    state, at, url = fetched.state, fmt.clock(fetched.at_unix), state_url(url)
    if isinstance(state, RankEvidence):
        lines: list[Line] = [
            [],
            fit([(" stack", "title", 0), (f"  from {url} at {at}", "dim", 0), (", innermost last", "dim", 1)], width),
        ]
        if state.blocked is not None:
            b = state.blocked
            shapes = " ".join(str(list(s)) for s in b.shapes)
            lines += _field(
                "blocked",
                f"in {b.label()} on pg {b.pg} for {seconds_text(state.blocked_seconds)} {shapes}",
                width,
                "warn",
            )
        for pg, c in sorted(state.last_issued.items()):
            shapes = " ".join(str(list(s)) for s in c.shapes)
            lines += _field("last", f"{c.label()} on pg {pg} {shapes}".rstrip(), width)
        return lines + stack_lines(state.stack, width)
    lines = [[], fit([(" stack", "title", 0), (f"  asked {url} at {at}", "dim", 0)], width)]
    lines += _wrap(f"no answer ({state.reason}: {state.detail}): {WHY.get(state.reason, 'it failed')}", width, "bad", 1)
    report = fetched.report
    if report is None:
        if fetched.peer is None:
            lines += _wrap("no other rank of its node answered for it", width, "dim", 1)
        return lines
    alive = report.get("alive")
    pid = report.get("pid", "?")
    said = "alive" if alive else "not running" if alive is False else "of unknown state"
    lines += _wrap(f"rank {fetched.peer} of the same node reports its process (pid {pid}) {said}", width, "value", 1)
    gil = report.get("gil_stacks")
    if gil:
        lines.append([(" its GIL watch saw the training thread at, innermost last:", "label")])
        lines += stack_lines(gil_stack(str(gil), report.get("thread")), width)
    elif alive:
        lines += _wrap("its GIL watch wrote nothing (yet)", width, "dim", 1)
    return lines


class RankScreen(ModalScreen[None]):
    """One rank in full; its ``/debug/state`` fetched once on opening (``r``: again).

    Args:
        rank: the rank's status (its ``source`` is the URL its ``/metrics`` came from).
        gpu: its GPU as the table shows it. verdict, culprit: the run's verdict, and what it says of
            this rank. peers: the other ranks of its node that answered (asked about it when it
            does not answer itself).
    """

    BINDINGS = [Binding("escape,q,enter", "app.pop_screen", "close"), Binding("r", "fetch", "ask again")]

    def __init__(
        self,
        rank: RankStatus,
        gpu: str,
        verdict: Verdict | None,
        culprit: Culprit | None,
        peers: Sequence[RankStatus] = (),
        fetched: Fetched | None = None,
        timeout: float | None = None,
    ) -> None:
        super().__init__()
        self.timeout = PAGE_TIMEOUT if timeout is None else timeout
        self.rank = rank
        self.gpu = gpu
        self.verdict = verdict
        self.culprit = culprit
        self.peers = [p for p in peers if p.source.startswith("http")]
        self.url = rank.source if rank.source.startswith("http") else None
        self.fetched = fetched

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Lines(id="rank-lines")

    def on_mount(self) -> None:
        self.draw()
        if self.fetched is None:
            self.action_fetch()

    def on_resize(self) -> None:
        self.draw()

    def draw(self) -> None:
        """Redraw from what is known now."""
        width = box_text_width(self.app.size.width or 80)
        lines = series_lines(self.rank, self.gpu, self.culprit, self.verdict, width)
        lines += page_lines(self.fetched, self.url, width)
        self.query_one("#rank-lines", Lines).set_lines(lines)

    def action_fetch(self) -> None:
        if self.url is not None:
            self.fetched = None
            self.draw()
            self.fetch()

    @work(exclusive=True, group="rank-state")
    async def fetch(self) -> None:
        """Ask the rank's page; when it does not answer, its node's other ranks what they know of it."""
        assert self.url is not None
        state = await fetch_state(self.url, self.timeout)
        fetched = Fetched(state, time.time())
        if isinstance(state, Unreached):
            for peer in self.peers[:PEERS_ASKED]:
                answer = await fetch_state(peer.source, self.timeout)
                if isinstance(answer, RankEvidence):
                    report = answer.peers.get(self.rank.rank)
                    fetched = Fetched(state, fetched.at_unix, peer.rank, report)
                    if report is not None:
                        break
        self.fetched = fetched
        self.draw()
