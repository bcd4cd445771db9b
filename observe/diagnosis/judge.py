"""The verdict on a run, judged from its ranks' evidence alone (no I/O): who stopped, where, and why.

The rules, in order (the first that applies decides):

1. **Finished.** Every rank that answered ended its training loop (or is ``finished``): healthy.
2. **Moving.** No rank's watchdog sees a stall: healthy, unless one rank's compute per step (step
   time - data wait - collective wait, the last log window's mean) exceeds ``ratio`` x the ranks'
   median *and* the excess is more than ``share`` of the median step time: that rank is a straggler.
   Synchronous ranks share one step time, so step time cannot name a straggler; the compute split can.
3. **Stalled, with ranks waiting in a collective.** On each process group, the ranks that issued
   fewer collectives than the group's most are behind; of those, the ones not themselves waiting in a
   collective are the culprits (the others wait on them). A rank that did not answer while the others
   wait is a culprit too: ``dead`` when nothing listens at its address or its pod's other ranks see
   its process gone, ``unresponsive`` when its process is alive (its training thread holds the GIL:
   its pod's other ranks serve what its GIL watch wrote). When every rank issued as many collectives
   but not the same op at the last sequence number, the ranks outside the majority's op are the
   culprits (``mismatch``; Flight Recorder's analyser takes one rank as the reference instead and
   can blame the wrong ones).
4. **Stalled, nobody in a collective:** ``stopped``; the stacks say where (data loading, user code).

A culprit that is checkpointing or validating while the others wait for it is a pause, not a hang
(rank 0 saving or uploading while the others sit in a barrier): healthy, with a detail line.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from urllib.parse import urlsplit

from observe.diagnosis.evidence import Collective, RankEvidence, Unreached
from observe.diagnosis.verdict import Culprit, Verdict, ranks_text, seconds_text

#: A straggler's compute per step is above ``STRAGGLER_RATIO`` x the median ...
STRAGGLER_RATIO = 1.5
#: ... and the excess is above this share of the median step time (so noise on a tiny compute
#: share, a few ms on a 400 ms step, never names one).
STRAGGLER_SHARE = 0.1
#: ... and the excess is over this many seconds per step: below it lies what a shared host's
#: scheduler adds to one rank's compute for a while (a CFS time slice is 3-24 ms; seen: a healthy
#: rank's median compute 14 ms against its peer's 9 ms, for a minute, on a loaded 2-core machine
#: with 30 ms steps). A fine-tuning step of a Llama-family model takes seconds, where
#: ``STRAGGLER_SHARE`` is the larger bar and this one changes nothing.
STRAGGLER_MIN_EXCESS_SECONDS = 0.05
#: Phases in which a rank that others wait for is pausing them, not hanging them.
PAUSING_PHASES = ("checkpointing", "validating")
_LIBRARY = re.compile(r"/(site-packages|dist-packages|lib/python3\.\d+)/|^<")


def frame_text(frame: tuple[str, int, str, str]) -> str:
    """``file:line in function: code``."""
    file, line, function, code = frame
    return f"{file}:{line} in {function}" + (f": {code}" if code else "")


def library_file(path: str) -> bool:
    """Whether ``path`` is one of Python's or an installed package's files (or ``<frozen ...>``),
    not the user's code."""
    return _LIBRARY.search(path.replace("\\", "/")) is not None


def user_frame(stack: Sequence[tuple[str, int, str, str]]) -> tuple[str, int, str, str] | None:
    """The innermost frame outside Python's and installed packages' files, else the innermost."""
    for frame in reversed(stack):
        if not library_file(frame[0]):
            return frame
    return stack[-1] if stack else None


def _where(stack: Sequence[tuple[str, int, str, str]]) -> str | None:
    frame = user_frame(stack)
    return None if frame is None else frame_text(frame)


def _lower_median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _locate(r: RankEvidence) -> dict[str, object]:
    return {"pod": r.pod or None, "node": r.node or None, "gpu_index": r.gpu_index, "gpu_uuid": r.gpu_uuid}


def _place(c: Culprit) -> str:
    parts = [f"pod {c.pod}" if c.pod else "", f"node {c.node}" if c.node and c.node != c.pod else ""]
    if c.gpu_index is not None or c.gpu_uuid:
        parts.append(
            f"GPU {c.gpu_index if c.gpu_index is not None else '?'}" + (f" {c.gpu_uuid}" if c.gpu_uuid else "")
        )
    text = ", ".join(p for p in parts if p)
    return f" ({text})" if text else ""


def judge(
    ranks: Sequence[RankEvidence],
    unreached: Sequence[Unreached] = (),
    straggler_ratio: float = STRAGGLER_RATIO,
    straggler_share: float = STRAGGLER_SHARE,
    straggler_min_excess: float = STRAGGLER_MIN_EXCESS_SECONDS,
) -> Verdict:
    """The run's verdict from the ranks that answered (``ranks``) and those that did not (``unreached``).

    All ranks should belong to one run (``observe.diagnosis.by_run`` splits several). A rank that
    is not stalled is a straggler when its compute per step is over ``straggler_ratio`` x the run's
    lower median rank's, by more than ``straggler_share`` of the run's median step time and more
    than ``straggler_min_excess`` seconds.
    """
    ranks = sorted(ranks, key=lambda r: r.rank)
    run_id = Counter(r.run_id for r in ranks).most_common(1)[0][0] if ranks else ""
    sizes = [r.world_size for r in ranks if r.world_size]
    world = max(sizes) if sizes else (len(ranks) + len(unreached) or None)
    unreached = identify(ranks, unreached, world)
    seen = len(ranks)
    base = {"run_id": run_id, "ranks_seen": seen, "world_size": world}
    if not ranks:
        culprits = [_unreached_culprit(u, None, []) for u in unreached]
        summary = (
            f"stopped: no rank answered ({len(unreached)} address(es): "
            + (", ".join(sorted({u.reason for u in unreached})) or "none given")
            + ")"
        )
        return Verdict("stopped", summary, culprits=culprits, **base)  # type: ignore[arg-type]
    if all(r.loop_ended or r.phase == "finished" for r in ranks):
        step = max(r.step for r in ranks)
        return Verdict("healthy", f"healthy: the training loop has ended (step {step}) on all {seen} rank(s)", **base)  # type: ignore[arg-type]
    stalled = [r for r in ranks if r.stalled]
    if not stalled:
        verdict = _straggler(ranks, straggler_ratio, straggler_share, straggler_min_excess, base)
        if unreached:
            verdict.details.append(
                f"not answering: {', '.join(u.address for u in unreached)} (the others still make progress)"
            )
        return verdict
    return _stalled(ranks, unreached, world, base)


def identify(ranks: Sequence[RankEvidence], unreached: Sequence[Unreached], world: int | None) -> list[Unreached]:
    """Give each unreached address its rank where the answering ranks' peers or the missing ranks tell."""
    out: list[Unreached] = []
    peers: dict[int, dict] = {}
    for r in ranks:
        for rank, info in r.peers.items():
            peers.setdefault(rank, {**info, "pod": r.pod, "node": r.node})
    answered = {r.rank for r in ranks}
    for u in unreached:
        if u.rank is None:
            port = urlsplit(u.address if "//" in u.address else f"//{u.address}").port
            match = [k for k, v in peers.items() if k not in answered and port is not None and v.get("port") == port]
            if len(match) == 1:
                info = peers[match[0]]
                u = Unreached(
                    u.address, u.reason, u.detail, match[0], str(info.get("node") or ""), str(info.get("pod") or "")
                )
        out.append(u)
    missing = sorted(set(range(world or 0)) - answered - {u.rank for u in out if u.rank is not None})
    nameless = [i for i, u in enumerate(out) if u.rank is None]
    if len(nameless) == len(missing) == 1:
        u = out[nameless[0]]
        out[nameless[0]] = Unreached(u.address, u.reason, u.detail, missing[0], u.node, u.pod)
    return out


def _unreached_culprit(
    u: Unreached, waited: Collective | None, waiting: list[int], peer: dict | None = None
) -> Culprit:
    alive = None if peer is None else peer.get("alive")
    gil = None if peer is None else peer.get("gil_stacks")
    thread = None if peer is None else peer.get("thread")
    if alive is False or (alive is None and u.reason == "refused"):
        kind = "dead"
        note = "its process is not running" if alive is False else f"nothing answers at {u.address} ({u.reason})"
    else:
        kind = "unresponsive"
        if peer is not None and peer.get("process_state") in ("T", "t"):
            note = "its process is stopped (SIGSTOP, a debugger, a frozen cgroup)"
        elif alive or u.reason == "timeout":
            note = "its process is alive but its Python threads do not run: its training thread holds the GIL"
        else:
            note = f"it does not answer at {u.address} ({u.reason}{': ' + u.detail if u.detail else ''})"
    stack = gil_stack(gil, thread) if gil else []
    return Culprit(
        rank=u.rank,
        kind=kind,
        pod=u.pod or None,
        node=u.node or None,
        pg=waited.pg if waited else None,
        seq=waited.seq if waited else None,
        op=waited.op if waited else None,
        shapes=[list(s) for s in waited.shapes] if waited else [],
        waiting_ranks=waiting,
        stack=stack,
        where=_gil_where(stack),
        note=note,
    )


def gil_stack(text: str, thread: str | None = None) -> list[str]:
    """The training thread's frames (``thread``: faulthandler's ``0x…`` id; default the last thread
    listed) from the last dump in ``text``, innermost last, ``file:line in function``."""
    dumps = re.split(r"(?m)^Timeout \(", text)
    threads = re.split(r"\n\s*\n(?=(?:Current thread|Thread) 0x)", dumps[-1].strip())
    main = next((t for t in threads if thread and f"hread {thread} " in t.split("(most recent", 1)[0]), threads[-1])
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', main)
    return [f"{f}:{n} in {fn}" for f, n, fn in reversed(frames)]


def _gil_where(stack: list[str]) -> str | None:
    for line in reversed(stack):
        if not _LIBRARY.search(line.split(":", 1)[0]):
            return line
    return stack[-1] if stack else None


def _waited(ranks: Sequence[RankEvidence], pg: str | None = None, seq: int | None = None) -> Collective | None:
    """The collective the waiting ranks wait in (on ``pg`` at ``seq`` when given), op where known."""
    for r in ranks:
        b = r.blocked
        if b is not None and (pg is None or b.pg == pg) and (seq is None or b.seq == seq):
            return b
    if pg is not None and seq is not None:
        for r in ranks:
            last = r.last_issued.get(pg)
            if last is not None and last.seq == seq:
                return last
        return Collective(pg, seq)
    return None


def _blocked(r: RankEvidence) -> bool:
    """Its training thread is blocked in a collective's wait, as fsdp-observe's wrapper saw."""
    return r.state == "collective" or r.blocked is not None


def _is_waiting(r: RankEvidence) -> bool:
    """Blocked, or stalled with a collective it issued not completed: a wait the wrapper cannot see
    (DDP's reducer waits in C++; on NCCL the host does not block in ``Work.wait``)."""
    return _blocked(r) or (r.stalled and any(g.completed < g.enqueued for g in r.groups.values()))


def _stalled(ranks: list[RankEvidence], unreached: list[Unreached], world: int | None, base: dict) -> Verdict:
    waiting = [r for r in ranks if _is_waiting(r)]
    waiting_ranks = [r.rank for r in waiting]
    seconds = max([r.blocked_seconds for r in waiting] + [r.stalled_seconds or 0.0 for r in ranks])
    by_rank = {r.rank: r for r in ranks}
    if not waiting:
        return _stopped(ranks, unreached, seconds, base)
    culprits: list[Culprit] = []
    peers = {k: v for r in ranks for k, v in r.peers.items()}
    waited = _waited(waiting)
    for u in unreached:
        culprits.append(_unreached_culprit(u, waited, waiting_ranks, peers.get(u.rank) if u.rank is not None else None))
    behind = _behind(ranks)
    roots = [(r, c) for r, c in behind if not _blocked(r)] or behind
    for r, coll in roots:
        culprits.append(
            Culprit(
                rank=r.rank,
                kind="behind",
                **_locate(r),  # type: ignore[arg-type]
                pg=coll.pg,
                seq=coll.seq,
                op=coll.op,
                shapes=[list(s) for s in coll.shapes],
                seconds=seconds,
                waiting_ranks=[w.rank for w in waiting if w.blocked is None or w.blocked.pg == coll.pg],
                stack=[frame_text(f) for f in r.stack],
                where=_where(r.stack),
                note=f"in phase {r.phase}" if r.phase != "training" else None,
            )
        )
    if not culprits:
        culprits, majority = _mismatch(ranks, seconds)
        if culprits:
            line = _mismatch_line(culprits, majority)
            return Verdict("mismatch", line, culprits=culprits, details=_wait_details(waiting), **base)
    if (
        culprits
        and all(c.kind == "behind" and c.rank is not None and by_rank[c.rank].phase in PAUSING_PHASES for c in culprits)
        and not unreached
    ):
        phases = ", ".join(f"rank {c.rank} {by_rank[c.rank].phase}" for c in culprits if c.rank is not None)
        return Verdict(
            "healthy",
            f"healthy: paused for {seconds_text(seconds)} while {phases}; {ranks_text(waiting_ranks)} wait for it",
            details=_wait_details(waiting),
            **base,
        )
    if not culprits:
        missing = sorted(set(range(world or 0)) - {r.rank for r in ranks})
        culprits = [
            Culprit(
                rank=m,
                kind="unobserved",
                op=waited.op if waited else None,
                seq=waited.seq if waited else None,
                pg=waited.pg if waited else None,
                waiting_ranks=waiting_ranks,
                note="not among the addresses asked",
            )
            for m in missing
        ]
    summary = _hang_line(culprits, waiting_ranks, waited, seconds)
    return Verdict("hang", summary, culprits=culprits, details=_wait_details(waiting), **base)


def _behind(ranks: list[RankEvidence]) -> list[tuple[RankEvidence, Collective]]:
    """Ranks that issued fewer collectives on a group than a rank waiting on it, with the collective
    they have not entered (their count + 1)."""
    out: list[tuple[RankEvidence, Collective]] = []
    for pg in sorted({pg for r in ranks for pg in r.groups}):
        waiting_top = max(
            (
                r.groups[pg].enqueued
                for r in ranks
                if pg in r.groups and _is_waiting(r) and r.groups[pg].completed < r.groups[pg].enqueued
            ),
            default=None,
        )
        if waiting_top is None:
            continue
        for r in ranks:
            g = r.groups.get(pg)
            if g is None or g.enqueued >= waiting_top or any(x is r for x, _ in out):
                continue
            out.append((r, _waited(ranks, pg, g.enqueued + 1) or Collective(pg, g.enqueued + 1)))
    return out


def _mismatch(ranks: list[RankEvidence], seconds: float) -> tuple[list[Culprit], str]:
    """Ranks whose op at a group's last sequence number differs from the majority's, and a line
    saying what the majority issued (empty when there is no mismatch)."""
    by_rank = {r.rank: r for r in ranks}
    lasts = {r.rank: dict(r.last_issued) or ({r.blocked.pg: r.blocked} if r.blocked else {}) for r in ranks}
    for pg in sorted({pg for issued in lasts.values() for pg in issued}):
        last = {rank: issued[pg] for rank, issued in lasts.items() if pg in issued}
        if len({c.seq for c in last.values()}) != 1 or len(last) < 2:
            continue
        ops = Counter(c.op for c in last.values()).most_common()
        if len(ops) < 2:
            continue
        tie = ops[0][1] == ops[1][1]
        majority = [] if tie else [r for r, c in last.items() if c.op == ops[0][0]]
        odd = [r for r in last if r not in majority]
        if tie:
            sides = defaultdict(list)
            for r, c in last.items():
                sides[(c.op, c.shapes)].append(r)
            said = "; ".join(f"{ranks_text(rs)} issued {op} {_shapes(sh)}".rstrip() for (op, sh), rs in sides.items())
            said += ": no op has a majority, every side is named"
        else:
            said = f"{ranks_text(majority)} issued {ops[0][0]} {_shapes(last[majority[0]].shapes)}".rstrip()
        culprits = [
            Culprit(
                rank=r,
                kind="mismatch",
                **_locate(by_rank[r]),  # type: ignore[arg-type]
                pg=pg,
                seq=last[r].seq,
                op=last[r].op,
                shapes=[list(s) for s in last[r].shapes],
                seconds=seconds,
                waiting_ranks=majority,
                stack=[frame_text(f) for f in by_rank[r].stack],
                where=_where(by_rank[r].stack),
                note=said,
            )
            for r in odd
        ]
        return culprits, said
    return [], ""


def _shapes(shapes: tuple[tuple[int, ...], ...]) -> str:
    return "[" + ", ".join("[" + ", ".join(str(n) for n in s) + "]" for s in shapes) + "]" if shapes else ""


def _wait_details(waiting: list[RankEvidence]) -> list[str]:
    if not waiting:
        return []
    where = Counter(_where(r.stack) for r in waiting if r.stack)
    lines = [f"waiting in a collective: {ranks_text([r.rank for r in waiting])}"]
    if where:
        site, n = where.most_common(1)[0]
        lines.append(f"{'it' if len(waiting) == 1 else f'{n} of them'} entered it at {site}")
    return lines


def _hang_line(culprits: list[Culprit], waiting: list[int], waited: Collective | None, seconds: float) -> str:
    c = culprits[0]
    what = (
        Collective(c.pg or "", c.seq or 0, c.op).label()
        if c.seq is not None
        else (waited.label() if waited else "a collective")
    )
    pg = c.pg if c.pg is not None else (waited.pg if waited else None)
    on = f" on process group {pg}" if pg else ""
    crowd = f"{ranks_text(waiting)} wait{'s' if len(waiting) == 1 else ''} in it"
    who = f"rank {c.rank if c.rank is not None else '?'}{_place(c)}"
    for_how_long = f"({what}{on}) for {seconds_text(seconds)}"
    if c.kind == "behind":
        text = f"hang: {who} has not entered {what}{on} for {seconds_text(seconds)}; {crowd}"
        if c.where:
            text += f"; rank {c.rank} is at {c.where}"
    elif c.kind == "dead":
        text = f"hang: {who} is gone ({c.note}); {crowd} {for_how_long}"
    elif c.kind == "unresponsive":
        text = f"hang: {who} does not answer ({c.note}); {crowd} {for_how_long}"
        if c.where:
            text += f"; its GIL watch saw it at {c.where}"
    else:
        unseen = ranks_text([x.rank for x in culprits if x.rank is not None])
        text = f"hang: {crowd} {for_how_long}; {unseen} not observed"
    if len(culprits) > 1:
        text += f" (+{len(culprits) - 1} more culprit{'s' if len(culprits) > 2 else ''})"
    return text


def _mismatch_line(culprits: list[Culprit], majority: str) -> str:
    c = culprits[0]
    at = f"mismatch: at collective #{c.seq} on process group {c.pg}, "
    if not c.waiting_ranks:  # no majority: ``majority`` lists every side
        return f"{at}{majority}; for {seconds_text(c.seconds)}"
    odd = ranks_text([x.rank for x in culprits if x.rank is not None])
    issued = f"{c.op} {_shapes(tuple(tuple(s) for s in c.shapes))}".rstrip()
    return f"{at}{odd} issued {issued} while {majority}; for {seconds_text(c.seconds)}"


def _stopped(ranks: list[RankEvidence], unreached: list[Unreached], seconds: float, base: dict) -> Verdict:
    where = Counter((r.state, _where(r.stack)) for r in ranks)
    (state, site), n = where.most_common(1)[0]
    doing = {"data": "waiting for data", "phase": "outside the training steps", "computing": "in their own code"}.get(
        state, state
    )
    agree = f"all {n} ranks" if n == len(ranks) else f"{n} of {len(ranks)} ranks"
    summary = f"stopped: no progress for {seconds_text(seconds)} and no rank in a collective; {agree} {doing}" + (
        f" at {site}" if site else ""
    )
    details = [
        f"rank {r.rank}: {r.state} at {_where(r.stack) or '?'}"
        for r in ranks
        if (r.state, _where(r.stack)) != (state, site)
    ][:8]
    details += [f"not answering: {u.address} ({u.reason})" for u in unreached]
    return Verdict("stopped", summary, details=details, **base)


def _straggler(ranks: list[RankEvidence], ratio: float, share: float, min_excess: float, base: dict) -> Verdict:
    timed = [r for r in ranks if r.compute_seconds is not None]
    steps = [r.step_seconds for r in ranks if r.step_seconds]
    step = max(r.step for r in ranks)
    healthy = Verdict(
        "healthy",
        f"healthy: {len(ranks)} rank(s) moving, step {step}"
        + (f", {seconds_text(_lower_median(steps))} per step" if steps else ""),
        **base,
    )
    if len(timed) < 2 or not steps:
        return healthy
    median = _lower_median([r.compute_seconds or 0.0 for r in timed])
    step_median = _lower_median(steps)
    found = []
    for r in timed:
        compute = r.compute_seconds or 0.0
        excess = compute - median
        if compute > ratio * median and excess > max(share * step_median, min_excess):
            found.append(
                Culprit(
                    rank=r.rank,
                    kind="straggler",
                    **_locate(r),  # type: ignore[arg-type]
                    seconds=compute,
                    median_compute_seconds=median,
                    excess_seconds=excess,
                    waiting_ranks=[x.rank for x in timed if x is not r],
                    stack=[frame_text(f) for f in r.stack],
                    where=_where(r.stack),
                )
            )
    if not found:
        return healthy
    found.sort(key=lambda c: -(c.excess_seconds or 0.0))
    c = found[0]
    others = [x for x in timed if x.rank != c.rank and x.wait_seconds is not None]
    waits = [x.wait_seconds or 0.0 for x in others]
    summary = (
        f"straggler: rank {c.rank}{_place(c)} computes {seconds_text(c.seconds)} per step against a median of "
        f"{seconds_text(median)} (+{seconds_text(c.excess_seconds)}, "
        f"{(c.excess_seconds or 0) / step_median:.0%} of the {seconds_text(step_median)} step)"
    )
    if waits:
        verb = "waits" if len(others) == 1 else "wait"
        wait = seconds_text(_lower_median(waits))
        summary += f"; {ranks_text([x.rank for x in others])} {verb} {wait} per step in collectives"
    return Verdict("straggler", summary, culprits=found, **base)
