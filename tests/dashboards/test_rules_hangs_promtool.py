"""The hang, straggler and stall alerts under ``promtool test rules``, at the trainer PodMonitor's 15 s
scrape: each checked one evaluation before it may fire (silent) and when it fires (exact labels and
annotations), over the forensics series four ranks of one run export (two pods on two nodes, a GPU
each): a rank behind, a mismatched op, a vanished rank, a checkpoint pause, a finished run and a run
whose loop ended, a straggler by compute time, and a healthy run.

The hang scenes share one timeline: the run steps until 90 s (six samples of 14 collectives each),
rank 1 (or another culprit) stops at about 95 s, and the waiting ranks' stall watchdogs flip
``fsdp_train_stalled`` at about 127 s (30 s threshold and a 1 s look), which the 135 s scrape carries.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from observe import catalog as c
from observe.diagnosis.judge import PAUSING_PHASES, STRAGGLER_MIN_EXCESS_SECONDS, STRAGGLER_RATIO, STRAGGLER_SHARE
from observe.monitoring import hangs, rules
from observe.monitoring.settings import Settings
from observe.promql import duration_seconds
from tests.dashboards.test_rules_promtool import BOOK, PROMTOOL, promtool

pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is missing: apt-get install prometheus (CI installs it)"
)
S = Settings()
RUN = "llama-ft"
#: Four ranks, two pods on two nodes, one GPU each.
PLACES = {
    r: {
        "namespace": "training",
        "run_id": RUN,
        "rank": str(r),
        "local_rank": str(r % 2),
        "pod": f"llama-ft-worker-{r // 2}",
        "node": f"gpu-node-{r // 2 + 1}",
        "gpu_uuid": f"GPU-0000000{r}",
        "instance": f"10.0.7.{21 + r // 2}:{9500 + r % 2}",
    }
    for r in range(4)
}
TARGET = {"job": "training/fsdp-observe-trainer"}
#: Samples (15 s apart): the run steps until 90 s, hangs at about 95 s, is judged stalled at 135 s.
STEPPING, HUNG = 7, 20
STALLED_AT = 9


def series(name: str, rank: int, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in {**PLACES[rank], **TARGET, **labels}.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def rank_state(
    rank: int,
    enqueued: int,
    waiting: str | None = None,
    phase: str = "training",
    stalled_at: int | None = STALLED_AT,
    gone_at: int | None = None,
) -> list[dict[str, str]]:
    """One rank's series: it steps (14 collectives a sample) until 90 s, then sits with ``enqueued``
    collectives issued on process group 0 (84 completed), blocked in ``waiting`` (an op) or not, in
    ``phase``, its watchdog saying stalled from sample ``stalled_at``; ``gone_at``: its scrapes fail
    from that sample (stale)."""
    n = HUNG + STEPPING if gone_at is None else gone_at
    stalled_at = stalled_at if gone_at is None else None

    def later(value: str, start: int = STEPPING) -> str:
        return f"{value}x{n - start - 1}" + (" stale" if gone_at is not None else "")

    out = [
        series(c.TRAIN_INFO.name, rank, later("1", 0), world_size="4"),
        series(c.TRAIN_COLLECTIVES_ENQUEUED.name, rank, f"0+14x{STEPPING - 1} {later(str(enqueued))}", pg="0"),
        series(c.TRAIN_COLLECTIVES_COMPLETED.name, rank, f"0+14x{STEPPING - 1} {later('84')}", pg="0"),
        series(c.TRAIN_COLLECTIVE_BLOCKED_SECONDS.name, rank, f"0x{STEPPING - 1} {later('5+15' if waiting else '0')}"),
        series(
            c.TRAIN_STALLED.name,
            rank,
            later("0", 0) if stalled_at is None else f"0x{stalled_at - 1} {later('1', stalled_at)}",
        ),
        series(c.TRAIN_STALL_THRESHOLD.name, rank, later("30", 0)),
    ]
    for p in ("training", "checkpointing", "finished"):
        out.append(series(c.TRAIN_PHASE.name, rank, f"1x{STEPPING - 1} {later(str(int(p == phase)))}", phase=p))
    if waiting:
        out.append(series(c.TRAIN_COLLECTIVE_WAITING.name, rank, f"_x{STEPPING - 1} {later('85')}", pg="0", op=waiting))
    return out


def run(*ranks: list[dict[str, str]]) -> list[dict[str, str]]:
    return [s for r in ranks for s in r]


def labels(rank: int, **more: str) -> dict[str, str]:
    return {**PLACES[rank], "severity": "critical", **more}


def where(rank: int) -> str:
    p = PLACES[rank]
    return f"rank {rank} of run {RUN} (pod {p['pod']}, node {p['node']}, GPU {p['gpu_uuid']})"


STALLED = "no step and no collective completed for longer than the stall threshold (30s)"
ASK = (
    "Its stack: fsdp-observe diagnose --trainer (or --kube) gives the verdict with it, or GET /debug/stacks on its "
    "metrics port; each stalled rank also wrote its state, stacks and Flight Recorder dump once to the run's dump "
    "folder."
)


def hang_alert(rank: int, waiting: int, collective: str = "all_gather_single #85") -> tuple[dict, dict]:
    return (
        labels(rank, pg="0"),
        {
            "summary": f"Run {RUN}: rank {rank} holds up {waiting} rank(s) in a collective on process group 0",
            "description": f"R{where(rank)[1:]} has not entered {collective} on process group 0, which {waiting} "
            f"rank(s) of the run wait in: {STALLED}. It is in phase training and waits in no collective itself: it "
            f"stopped before this one (its own code, its data, a deadlock). {ASK}",
            "runbook_url": f"{BOOK}#fsdpcollectivehang",
        },
    )


def mismatch_alert(rank: int, op: str, majority: str) -> tuple[dict, dict]:
    return (
        labels(rank, pg="0", op=op),
        {
            "summary": f"Run {RUN}: rank {rank} waits in {op} where the others wait in another collective",
            "description": f"R{where(rank)[1:]} is blocked in {op} #85 on process group 0 while {majority} at that "
            f"sequence number: {STALLED}. The ranks issued different collectives (a rank-dependent branch, or one "
            "collective more or less on some ranks); gloo and NCCL do not check, so every rank waits until the "
            f"collective's timeout. {ASK}",
            "runbook_url": f"{BOOK}#fsdpcollectivemismatch",
        },
    )


def gone_alert(rank: int, waiting: int, how: str) -> tuple[dict, dict]:
    return (
        labels(rank),
        {
            "summary": f"Run {RUN}: rank {rank} is gone while {waiting} rank(s) wait for it",
            "description": f"R{where(rank)[1:]} (target {PLACES[rank]['instance']}) has no series in Prometheus any "
            f"more: {how}. {waiting} rank(s) of the run wait in a collective: {STALLED}; they will wait until the "
            "collective's timeout. Look at the pod's events and the node, and at its rank's log for its last words.",
            "runbook_url": f"{BOOK}#fsdprankgone",
        },
    )


BEFORE, AT = f"{15 * (STALLED_AT - 1)}s", f"{15 * STALLED_AT}s"
LATER = [f"{15 * STALLED_AT + 45}s", f"{15 * (HUNG + STEPPING - 2)}s"]
AG = "all_gather_single"
HANG_ALERTS = ("FsdpCollectiveHang", "FsdpCollectiveMismatch", "FsdpRankGone")

#: (name, input series, {alert: {eval time: expected alerts}}): every hang alert is checked at every time given.
SCENES: list[tuple[str, list[dict], dict[str, dict[str, list]]]] = [
    (
        # Rank 1 stops before its forward: ranks 0, 2, 3 issued collective 85 and wait in it. Rank
        # 3's watchdog flag reaches Prometheus a scrape after the others': it is counted all the same.
        "rank 1 behind",
        run(
            rank_state(0, 85, AG),
            rank_state(1, 84),
            rank_state(2, 85, AG),
            rank_state(3, 85, AG, stalled_at=STALLED_AT + 1),
        ),
        {"FsdpCollectiveHang": {BEFORE: [], AT: [hang_alert(1, 3)], LATER[0]: [hang_alert(1, 3)]}},
    ),
    (
        # Rank 1 issued an all_reduce where ranks 0, 2, 3 issued all_gather_single, at #85: every
        # rank waits, nobody is behind; the odd one out by majority.
        "rank 1 mismatched",
        run(rank_state(0, 85, AG), rank_state(1, 85, "all_reduce"), rank_state(2, 85, AG), rank_state(3, 85, AG)),
        {
            "FsdpCollectiveMismatch": {
                BEFORE: [],
                AT: [mismatch_alert(1, "all_reduce", f"the ranks blocked there wait in {AG} (3), all_reduce (1)")],
            },
            "FsdpCollectiveHang": {AT: []},
        },
    ),
    (
        # Two ranks each side: no majority, both sides are named (the judge names every side too).
        "a tie",
        run(
            rank_state(0, 85, AG),
            rank_state(1, 85, "all_reduce"),
            rank_state(2, 85, AG),
            rank_state(3, 85, "all_reduce"),
        ),
        {
            "FsdpCollectiveMismatch": {
                BEFORE: [],
                AT: [
                    mismatch_alert(r, op, f"the ranks blocked there wait in {AG} (2), all_reduce (2)")
                    for r, op in ((0, AG), (1, "all_reduce"), (2, AG), (3, "all_reduce"))
                ],
            }
        },
    ),
    (
        # Rank 3's scrapes fail from 105 s (its target stays: up is 0) while 0, 1, 2 wait.
        "rank 3 gone",
        [
            *run(rank_state(0, 85, AG), rank_state(1, 85, AG), rank_state(2, 85, AG), rank_state(3, 84, gone_at=8)),
            {"series": f'up{{instance="{PLACES[3]["instance"]}",job="{TARGET["job"]}"}}', "values": f"1x7 0x{HUNG}"},
        ],
        {
            "FsdpRankGone": {
                BEFORE: [],
                AT: [
                    gone_alert(
                        3,
                        3,
                        "its target is still discovered but its scrapes fail (up is 0): its process is dead, stopped "
                        "or not answering (a training thread holding the GIL starves the exporter's), or its node is "
                        "unreachable",
                    )
                ],
            },
            "FsdpCollectiveHang": {AT: []},
        },
    ),
    (
        # Rank 2's pod went away (no target, no up) while the others wait.
        "rank 2's pod lost",
        run(rank_state(0, 85, AG), rank_state(1, 85, AG), rank_state(2, 84, gone_at=8), rank_state(3, 85, AG)),
        {
            "FsdpRankGone": {
                BEFORE: [],
                AT: [gone_alert(2, 3, "its scrape target is gone: its process ended or its pod or node was lost")],
            }
        },
    ),
    (
        # Rank 0 saves a checkpoint (phase checkpointing) while 1, 2, 3 wait for it in a barrier:
        # a pause, not a hang, however long.
        "checkpoint pause",
        run(
            rank_state(0, 84, phase="checkpointing"),
            rank_state(1, 85, AG),
            rank_state(2, 85, AG),
            rank_state(3, 85, AG),
        ),
        {name: {AT: [], LATER[1]: []} for name in HANG_ALERTS},
    ),
    (
        # Every rank finished: ranks 0, 2, 3 sit in the final barrier while rank 1 uploads. Their
        # watchdogs judge no finished rank, so nothing is stalled.
        "finished run",
        run(*(rank_state(r, 84 if r == 1 else 85, None if r == 1 else AG, "finished", None) for r in range(4))),
        {name: {AT: [], LATER[1]: []} for name in HANG_ALERTS},
    ),
    (
        # The loop ended (DataLoader exhausted, phase still training: zero code cannot tell more);
        # rank 1 uploads the model while the others wait in a barrier. Their watchdogs know the
        # loop ended and say not stalled.
        "loop ended",
        run(*(rank_state(r, 84 if r == 1 else 85, None if r == 1 else AG, stalled_at=None) for r in range(4))),
        {name: {AT: [], LATER[1]: []} for name in HANG_ALERTS},
    ),
    (
        # Healthy: counts one collective apart mid-step, blocked for a moment, never stalled.
        "healthy",
        run(
            *(
                [
                    series(c.TRAIN_INFO.name, r, f"1x{HUNG + STEPPING}", world_size="4"),
                    series(c.TRAIN_COLLECTIVES_ENQUEUED.name, r, f"{r % 2}+14x{HUNG + STEPPING}", pg="0"),
                    series(c.TRAIN_COLLECTIVES_COMPLETED.name, r, f"0+14x{HUNG + STEPPING}", pg="0"),
                    series(c.TRAIN_COLLECTIVE_BLOCKED_SECONDS.name, r, f"{0.01 * (r % 2)}x{HUNG + STEPPING}"),
                    series(c.TRAIN_STALLED.name, r, f"0x{HUNG + STEPPING}"),
                ]
                for r in range(4)
            )
        ),
        {name: {t: [] for t in (BEFORE, AT, *LATER)} for name in HANG_ALERTS},
    ),
]


def promtool_file(scenes: list, interval: str = "15s") -> dict:
    tests = []
    for name, input_series, checks in scenes:
        tests.append(
            {
                "name": name,
                "interval": interval,
                "input_series": input_series,
                "alert_rule_test": [
                    {
                        "eval_time": t,
                        "alertname": alert,
                        "exp_alerts": [{"exp_labels": lab, "exp_annotations": ann} for lab, ann in expected],
                    }
                    for alert, times in checks.items()
                    for t, expected in times.items()
                ],
            }
        )
    return {"rule_files": ["rules.yaml"], "evaluation_interval": interval, "tests": tests}


def run_promtool(tmp: Path, scenes: list, interval: str = "15s", settings: Settings = S) -> None:
    (tmp / "rules.yaml").write_text(rules.render(settings))
    (tmp / "tests.yaml").write_text(yaml.safe_dump(promtool_file(scenes, interval), sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_scenes_assume_the_default_settings() -> None:
    assert (S.hang_for, S.hang_interval, S.stall_time) == ("0s", "10s", "15m")
    assert (S.straggler_ratio, S.straggler_share, S.straggler_min_excess, S.straggler_for) == (1.5, 0.1, "50ms", "10m")


@pytest.mark.parametrize("scene", SCENES, ids=[s[0] for s in SCENES])
def test_hang_alerts(tmp_path: Path, scene) -> None:
    run_promtool(tmp_path, [scene])


def test_a_missed_hang_alert_is_reported(tmp_path: Path) -> None:
    """The harness can fail: the culprit expected one evaluation before the watchdogs flag the stall."""
    name, series_, checks = SCENES[0]
    early = {"FsdpCollectiveHang": {BEFORE: [hang_alert(1, 3)]}}
    with pytest.raises(AssertionError, match="FsdpCollectiveHang"):
        run_promtool(tmp_path, [(name, series_, early)])


# --- the straggler, by compute time -------------------------------------------------------------


def stepping(rank: int, compute: float, step: float = 1.0, run_id: str = RUN, minutes: int = 15) -> list[dict]:
    """A rank that steps once a second, ``step`` seconds of wall time and ``compute`` of it computing."""
    n = minutes * 4
    extra = {"run_id": run_id}
    return [
        series(c.TRAIN_STEPS.name, rank, f"0+15x{n}", **extra),
        series(c.TRAIN_COMPUTE_SECONDS.name, rank, f"0+{15 * compute:g}x{n}", **extra),
        series(f"{c.TRAIN_STEP_SECONDS.name}_sum", rank, f"0+{15 * step:g}x{n}", **extra),
        series(f"{c.TRAIN_STEP_SECONDS.name}_count", rank, f"0+15x{n}", **extra),
    ]


def straggler_alert(rank: int, run_id: str, compute: str, median: str, excess: str) -> tuple[dict, dict]:
    p = {**PLACES[rank], "run_id": run_id}
    return (
        {**p, **TARGET, "severity": "warning"},
        {
            "summary": f"Run {run_id}: rank {rank} is a straggler",
            "description": f"Rank {rank} of run {run_id} (pod {p['pod']}, node {p['node']}, GPU {p['gpu_uuid']}) "
            f"computes {compute} per step (step time less data wait and collective wait, mean over 5m) against "
            f"{median} on the run's median rank: {excess} more per step, in a step of 1s (alert above 1.5 times "
            "the median and 10% of the step and 50ms, for 10m). Every other rank waits that long for it in the collectives "
            'each step. Compare its GPU in "FSDP training run › SM clock of the run\'s GPUs" and "FSDP training '
            'run › XIDs on the run\'s GPUs", and its node\'s CPU in "FSDP nodes › CPU busy".',
            "runbook_url": f"{BOOK}#fsdpstragglerrank",
        },
    )


STRAGGLERS = [
    (
        # Four ranks of one step time (1 s). Rank 2 computes 500 ms of it against 100 ms on the
        # others; rank 3 takes 2 s a step (data wait) but computes 100 ms: step time alone names
        # nobody. Two ranks of pair-ft: 100 ms and 250 ms. The lower median is the faster rank's
        # (100 ms: 2.5 x); quantile(0.5) would be their mean (175 ms: 1.43 x, silent).
        "straggler by compute",
        [
            *stepping(0, 0.1),
            *stepping(1, 0.1),
            *stepping(2, 0.5),
            *stepping(3, 0.1, step=2.0),
            *stepping(0, 0.1, run_id="pair-ft"),
            *stepping(1, 0.25, run_id="pair-ft"),
        ],
        {
            "FsdpStragglerRank": {
                "600s": [],
                "615s": [
                    straggler_alert(2, RUN, "500ms", "100ms", "400ms"),
                    straggler_alert(1, "pair-ft", "250ms", "100ms", "150ms"),
                ],
            }
        },
    ),
    (
        # Rank 2 computes 130 ms against 100 ms: 1.3 x, below the ratio. Rank 3 computes 40 ms
        # against 20 ms on a 1 s step: 2 x, but 20 ms is 2 % of the step, below the share. In run
        # tiny-steps (200 ms steps) rank 1 computes 70 ms against 30 ms: 2.3 x and 20 % of the step,
        # but 40 ms is below the 50 ms floor (a shared host's scheduler, not a straggler).
        "below the ratio, the share or the floor",
        [
            *stepping(0, 0.1),
            *stepping(1, 0.1),
            *stepping(2, 0.13),
            *stepping(0, 0.02, run_id="pair-ft"),
            *stepping(1, 0.04, run_id="pair-ft"),
            *stepping(0, 0.03, step=0.2, run_id="tiny-steps"),
            *stepping(1, 0.07, step=0.2, run_id="tiny-steps"),
        ],
        {"FsdpStragglerRank": {"615s": [], "900s": []}},
    ),
]


@pytest.mark.parametrize("scene", STRAGGLERS, ids=[s[0] for s in STRAGGLERS])
def test_straggler_by_compute_time(tmp_path: Path, scene) -> None:
    run_promtool(tmp_path, [scene])


def test_the_straggler_rule_and_the_verdict_share_their_thresholds() -> None:
    assert (S.straggler_ratio, S.straggler_share) == (STRAGGLER_RATIO, STRAGGLER_SHARE)
    assert duration_seconds(S.straggler_min_excess) == STRAGGLER_MIN_EXCESS_SECONDS
    assert hangs.PAUSING_PHASES == PAUSING_PHASES


# --- FsdpTrainingStalled: whether ranks wait in a collective, and not after the loop -------------


def stall_run(rank_states: dict[int, str], stalled: bool = True, minutes: int = 20) -> list[dict]:
    """Ranks that stopped stepping at 1m (timestamp 60 s), each in ``rank_states[rank]``."""
    n = minutes * 4
    out = []
    for r, now in rank_states.items():
        out.append(series(c.TRAIN_LAST_STEP_TIMESTAMP.name, r, f"0+15x4 60x{n}"))
        out.append(series(c.TRAIN_STALLED.name, r, f"0x8 {int(stalled)}x{n}"))
        for p in ("training", "finished"):
            out.append(series(c.TRAIN_PHASE.name, r, f"{int(p == 'training')}x{n + 5}", phase=p))
        for state in c.TRAIN_STATES:
            out.append(series(c.TRAIN_STATE.name, r, f"{int(state == now)}x{n + 5}", state=state))
    return out


def stalled_alert(rank: int, waiting: str, seconds: str = "16m 0s") -> tuple[dict, dict]:
    p = PLACES[rank]
    return (
        {**p, **TARGET, "phase": "training", "severity": "critical"},
        {
            "summary": f"Run {RUN}: rank {rank} made no step for 15m",
            "description": f"Rank {rank} of run {RUN} on node {p['node']} (GPU {p['gpu_uuid']}) completed its last "
            f"optimizer step {seconds} ago and is still training. {waiting} A hung collective, a dead peer or a "
            "stuck data loader stops every rank; look for the rank whose log stops first (likely_cause names a GPU "
            "fault on the run's nodes).",
            "runbook_url": f"{BOOK}#fsdptrainingstalled",
            "likely_cause": "none seen: no critical XID and no lost GPU on the run's nodes in the last 27m",
        },
    )


IN_COLLECTIVE = (
    "3 of the run's ranks wait in a collective: FsdpCollectiveHang, FsdpCollectiveMismatch or FsdpRankGone names the "
    "rank they wait for."
)
OUTSIDE = (
    "No rank of the run waits in a collective: they are all outside the collectives (a stuck data loader, a deadlock "
    "or a loop in the ranks' own code); fsdp-observe diagnose shows where their stacks agree."
)
STALLS = [
    (
        "ranks wait in a collective",
        stall_run({0: "collective", 1: "computing", 2: "collective", 3: "collective"}),
        # the last step at 60 s; 15m later (16m) pending, 2m more firing
        {"FsdpTrainingStalled": {"1080s": [], "1095s": [stalled_alert(r, IN_COLLECTIVE, "17m 15s") for r in range(4)]}},
    ),
    (
        "nobody in a collective",
        stall_run({r: "data" for r in range(4)}),
        {"FsdpTrainingStalled": {"1080s": [], "1095s": [stalled_alert(r, OUTSIDE, "17m 15s") for r in range(4)]}},
    ),
    (
        # The loop ended (the watchdogs say not stalled): a 20-minute upload after it never pages.
        "an upload after the loop",
        stall_run({0: "computing", 1: "collective", 2: "collective", 3: "collective"}, stalled=False),
        {"FsdpTrainingStalled": {"1095s": [], "1200s": []}},
    ),
]


@pytest.mark.parametrize("scene", STALLS, ids=[s[0] for s in STALLS])
def test_the_stall_alert_says_whether_ranks_wait_in_a_collective(tmp_path: Path, scene) -> None:
    run_promtool(tmp_path, [scene])


#: Every alert these scenes cover (test_rules_promtool checks the rest).
COVERED = ("FsdpCollectiveHang", "FsdpCollectiveMismatch", "FsdpRankGone", "FsdpStragglerRank")
