"""What the verdict is judged from: one ``RankEvidence`` per rank that answered, one ``Unreached`` per
rank (or address) that did not.

A rank's ``/debug/state`` document (``observe.training.forensics.RankForensics.state_json``) turns into
``RankEvidence`` through ``from_state``; a source without those pages (Prometheus) fills the same
fields from series, leaving absent what it cannot know (stacks, the last collective's op). Standard
library only: no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Collective:
    """One collective of one rank: process group, sequence number, op and tensor shapes (``()`` when
    unknown)."""

    pg: str
    seq: int
    op: str | None = None
    shapes: tuple[tuple[int, ...], ...] = ()

    def label(self) -> str:
        """``all_gather_single #73``, or ``collective #73`` when the op is unknown."""
        return f"{self.op or 'collective'} #{self.seq}"


@dataclass(frozen=True)
class Group:
    """A rank's counts on one process group: collectives enqueued, completed, and started (where the
    backend records starts: NCCL's Flight Recorder; ``None`` on gloo)."""

    enqueued: int
    completed: int
    started: int | None = None


@dataclass(frozen=True)
class RankEvidence:
    """One rank, as it answered.

    Attributes:
        rank, world_size: its place in the run. run_id: the run.
        node, pod, local_rank, port: where it runs. gpu_index, gpu_uuid: its GPU (``None`` on CPU).
        phase: ``observe.catalog.TRAIN_PHASES``. state: ``observe.catalog.TRAIN_STATES``.
        step: its last completed step. loop_ended: why its training loop is known to have ended.
        groups: counts per process group name. last_issued: its last collective per group.
        blocked: the collective its training thread is blocked in, and for how many seconds.
        stalled: its watchdog sees no progress; stalled_seconds: for how long (``None``: unknown).
        compute_seconds, wait_seconds: per step, medians over its last 64 steps (or, from metrics,
            means over its last log window; ``None``: unknown).
        step_seconds: its median step time. stack: its training thread's stack, innermost last,
            as ``(file, line, function, code)``. peers: what it knows of its pod's other ranks
            (rank -> ``alive``, ``port``, ``gil_stacks``...).
    """

    rank: int
    world_size: int | None = None
    run_id: str = ""
    node: str = ""
    pod: str = ""
    local_rank: int | None = None
    port: int | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    phase: str = "training"
    state: str = "computing"
    step: int = 0
    loop_ended: str | None = None
    groups: dict[str, Group] = field(default_factory=dict)
    last_issued: dict[str, Collective] = field(default_factory=dict)
    blocked: Collective | None = None
    blocked_seconds: float = 0.0
    stalled: bool = False
    stalled_seconds: float | None = None
    compute_seconds: float | None = None
    wait_seconds: float | None = None
    step_seconds: float | None = None
    stack: tuple[tuple[str, int, str, str], ...] = ()
    peers: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Unreached:
    """A rank (or an address whose rank is not known) that did not answer.

    Attributes:
        address: what was asked (a URL, a pod, a Prometheus target).
        reason: ``refused`` (nothing listens: the process is gone), ``timeout`` (the connection was
            accepted but no answer came: the process is alive and its Python threads do not run),
            or ``error`` (anything else), with ``detail``.
        rank: its rank when known (from an earlier answer or a peer's registration).
        node, pod: where it runs, when known.
    """

    address: str
    reason: str
    detail: str = ""
    rank: int | None = None
    node: str = ""
    pod: str = ""


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


def _shapes(raw: Any) -> tuple[tuple[int, ...], ...]:
    try:
        return tuple(tuple(int(n) for n in s) for s in raw or ())
    except (TypeError, ValueError):
        return ()


def _collective(raw: Any, pg: str | None = None) -> Collective | None:
    if not isinstance(raw, dict) or _int(raw.get("seq")) is None:
        return None
    return Collective(str(raw.get("pg", pg or "")), int(raw["seq"]), raw.get("op"), _shapes(raw.get("shapes")))


def from_state(doc: dict[str, Any]) -> RankEvidence:
    """``RankEvidence`` from a rank's ``/debug/state`` document.

    Raises:
        ValueError: the document has no ``rank`` (not a ``/debug/state`` document).
    """
    rank = _int(doc.get("rank"))
    if rank is None:
        raise ValueError("not a /debug/state document: no rank")
    groups = {
        str(pg): Group(_int(g.get("enqueued")) or 0, _int(g.get("completed")) or 0, _int(g.get("started")))
        for pg, g in (doc.get("groups") or {}).items()
        if isinstance(g, dict)
    }
    last = {}
    for pg, raw in (doc.get("last_issued") or {}).items():
        c = _collective(raw, str(pg))
        if c is not None:
            last[str(pg)] = c
    blocked_raw: dict[str, Any] | None = doc["blocked"] if isinstance(doc.get("blocked"), dict) else None
    stall: dict[str, Any] = doc["stall"] if isinstance(doc.get("stall"), dict) else {}
    stalled = bool(stall.get("stalled"))
    now = doc.get("now_unix")
    since = stall.get("since_unix")
    split: dict[str, Any] = doc["split"] if isinstance(doc.get("split"), dict) else {}
    stack = tuple(
        (str(f[0]), _int(f[1]) or 0, str(f[2]), str(f[3]) if len(f) > 3 else "")
        for f in doc.get("stack") or ()
        if isinstance(f, (list, tuple)) and len(f) >= 3
    )
    peers = {}
    for key, value in (doc.get("peers") or {}).items():
        if _int(key) is not None and isinstance(value, dict):
            peers[int(key)] = value
    return RankEvidence(
        rank=rank,
        world_size=_int(doc.get("world_size")),
        run_id=str(doc.get("run_id", "")),
        node=str(doc.get("node", "")),
        pod=str(doc.get("pod", "")),
        local_rank=_int(doc.get("local_rank")),
        port=_int(doc.get("port")),
        gpu_index=_int(doc.get("gpu_index")),
        gpu_uuid=doc.get("gpu_uuid") or None,
        phase=str(doc.get("phase", "training")),
        state=str(doc.get("state", "computing")),
        step=_int(doc.get("step")) or 0,
        loop_ended=doc.get("loop_ended") or None,
        groups=groups,
        last_issued=last,
        blocked=_collective(blocked_raw) if blocked_raw else None,
        blocked_seconds=float(blocked_raw.get("seconds", 0.0)) if blocked_raw else 0.0,
        stalled=stalled,
        stalled_seconds=float(now) - float(since) if stalled and now and since else None,
        compute_seconds=split.get("recent_compute_seconds", split.get("window_compute_seconds")),
        wait_seconds=split.get("recent_collective_wait_seconds", split.get("window_collective_wait_seconds")),
        step_seconds=split.get("median_step_seconds"),
        stack=stack,
        peers=peers,
    )
