"""Each run's verdict from what the fan-in already has: the ranks' ``/metrics`` series, no stacks.

The TUI pulls every rank's ``/metrics`` each refresh; its hang and straggler series (state, per
process group enqueued and completed, blocked seconds, the waiting collective, stalled, compute
and collective wait per step) are the evidence ``observe.diagnosis.judge`` needs to name the
culprit. ``/debug/state`` (a stack per rank) is asked only for the one rank a person opens
(``observe.sources.forensics.fetch_state``): at 8,192 ranks a stack each per refresh would be most
of the traffic. A rank whose pull failed is ``Unreached`` with why (``timeout``: its exporter
thread does not run, so its training thread holds the GIL; ``refused``: its process is gone), its
rank and node known from its earlier answers. ``judge`` is pure and runs once per run per refresh
on the fan-in's thread (about 20 ms at 8,192 ranks here: ``benchmarks/tui_fanin.py --ranks``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from observe.diagnosis import Collective, Group, RankEvidence, Unreached, Verdict, judge
from observe.diagnosis.judge import identify
from observe.sources.view import DEADLINE_MISSED, RankStatus

#: A failed pull's state (``observe.sources.view.STATES``) -> ``Unreached.reason``, and back.
REASONS: dict[str, str] = {"slow": "timeout", "unreachable": "refused"}
STATES: dict[str, str] = {reason: state for state, reason in REASONS.items()}
#: ``(node, gpu_uuid) -> NVML index`` from the agents' data (``ClusterSnapshot.gpu_index``).
GpuIndex = Callable[[str, str | None], int | None]


def has_forensics(rank: RankStatus) -> bool:
    """The rank exports the hang and straggler series (its collective tracking is on)."""
    return rank.train_state is not None or rank.stalled is not None


def rank_evidence(rank: RankStatus, now: float, gpu_index: GpuIndex | None = None) -> RankEvidence | Unreached:
    """The evidence of one rank: ``Unreached`` when its latest pull failed (a finished rank that
    stopped serving is not: its run is over; nor is one the refresh ran out of time for, whose
    last figures stand: a refresh of thousands of ranks that overruns its deadline says nothing
    of them), else ``RankEvidence`` from its series.

    ``stalled_seconds`` is ``now`` minus the end of its last step (Unix seconds; the ranks' and the
    viewer's clocks are taken to agree, as Prometheus' ``time()`` does).
    """
    missed = rank.error == DEADLINE_MISSED and rank.step is not None
    if rank.state not in ("ok", "stale", "finished") and not missed:
        reason = "error" if rank.source == "prometheus" else REASONS.get(rank.state, "error")
        return Unreached(rank.source or f"rank {rank.rank}", reason, rank.error or rank.state, rank.rank, rank.node)
    waiting = rank.waiting
    blocked = Collective(waiting[0], waiting[2], waiting[1] or None) if waiting else None
    stalled = bool(rank.stalled)
    return RankEvidence(
        rank=rank.rank,
        world_size=rank.world_size,
        run_id=rank.run_id,
        node=rank.node,
        local_rank=rank.local_rank,
        gpu_index=gpu_index(rank.node, rank.gpu_uuid) if gpu_index is not None and rank.gpu_uuid else None,
        gpu_uuid=rank.gpu_uuid,
        phase=rank.phase or "training",
        state=rank.train_state or ("collective" if blocked else "computing"),
        step=int(rank.step or 0),
        groups={pg: Group(enqueued, completed) for pg, enqueued, completed in rank.collectives},
        blocked=blocked,
        blocked_seconds=rank.blocked_seconds or 0.0,
        stalled=stalled,
        stalled_seconds=now - rank.last_step_unix if stalled and rank.last_step_unix else None,
        compute_seconds=rank.window_compute_seconds,
        wait_seconds=rank.window_collective_wait_seconds,
        step_seconds=rank.window_step_seconds,
    )


def run_verdict(
    ranks: Sequence[RankStatus],
    now: float,
    unreached: Sequence[Unreached] = (),
    gpu_index: GpuIndex | None = None,
) -> tuple[Verdict | None, list[RankStatus]]:
    """The verdict on one run's ``ranks`` (and the endpoints given for it that never answered:
    ``unreached``), or ``None`` when no rank exports the hang series (nothing to judge by: the
    verdict would say ``healthy`` of a run it cannot see stall); and a stand-in ``RankStatus`` for
    each of ``unreached`` whose rank the verdict could tell (the one rank missing; a peer's
    registration), so that the rank table lists it and its page can be asked for."""
    if not any(has_forensics(r) for r in ranks):
        return None, []
    answered: list[RankEvidence] = []
    missing: list[Unreached] = []
    for r in ranks:
        evidence = rank_evidence(r, now, gpu_index)
        if isinstance(evidence, Unreached):
            missing.append(evidence)
        else:
            answered.append(evidence)
    sizes = [r.world_size for r in answered if r.world_size]
    world = max(sizes) if sizes else len(answered) + len(missing) + len(unreached)
    named = identify(answered, [*missing, *unreached], world)
    run_id = ranks[0].run_id
    stand_ins = [
        RankStatus(
            rank=u.rank,
            run_id=run_id,
            node=u.node,
            source=u.address,
            state=STATES.get(u.reason, "malformed"),
            error=u.detail or u.reason,
            updated_unix=now,
        )
        for u in named[len(missing) :]
        if u.rank is not None
    ]
    return judge(answered, named), stand_ins
