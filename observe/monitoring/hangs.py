"""PromQL of the alerts that name which rank is stuck and which is slow (``observe.monitoring.rules``
turns them into rules): FsdpCollectiveHang, FsdpCollectiveMismatch and FsdpRankGone in the hang
group, FsdpStragglerRank and FsdpTrainingStalled's extra conditions in the training group.

They read the forensics series every rank exports (``observe.catalog.TRAINER_FORENSICS_METRICS``)
and judge as ``observe.diagnosis.judge`` does from the same evidence:

- **The run is stalled** where ranks wait in a collective (host blocked in it:
  ``fsdp_train_collective_waiting``, which gloo shows; or a collective issued and not completed,
  which is what NCCL shows, its host never blocking) and their own stall watchdog says they made
  no progress (no step, no completed collective, no batch) for longer than their threshold,
  ``max(30 s, 3 x median step)``: ``fsdp_train_stalled == 1``. The watchdog's flag is used rather
  than the same arithmetic on ``fsdp_train_last_step_timestamp_seconds`` because only the rank
  knows that its training loop has ended (the callbacks' train end, the planned steps reached, its
  DataLoader exhausted): a run that saves or uploads after its loop, its other ranks waiting in a
  barrier, never pages.
- **Behind** (FsdpCollectiveHang): a rank that issued fewer collectives on a process group than
  the most any rank of its run issued there, with nothing of its own in flight (not blocked, every
  collective it issued completed), while stalled ranks wait on that group. It never entered the
  collective they wait in. One whose phase is checkpointing or validating is pausing the others,
  not hanging them (rank 0 saving while the rest sit in a barrier): no alert.
- **Mismatch** (FsdpCollectiveMismatch): the stalled ranks wait at one sequence number of a group
  but not in one op; the ranks whose op fewer ranks wait in are named (every side on a tie), by
  majority as the judge does (Flight Recorder's analyser takes one rank as the reference instead).
  Host-side only: on NCCL the host does not block, so this stays silent there.
- **Gone** (FsdpRankGone): a rank whose ``fsdp_train_info`` Prometheus had within ``stall_time``
  and has no more (its scrapes fail, or its target went away: the process or its node is lost, or
  its training thread holds the GIL and its exporter thread cannot answer) while stalled ranks of
  the run wait. Ranks of another world size (an elastic resize) are not counted.
- **Straggler**: a rank whose compute time per step (5 minutes) exceeds ``straggler_ratio`` x the
  run's lower median rank's and the excess is over ``straggler_share`` of the run's median step
  time and over ``straggler_min_excess`` (``observe.diagnosis.judge.STRAGGLER_RATIO``,
  ``STRAGGLER_SHARE`` and ``STRAGGLER_MIN_EXCESS_SECONDS``). The lower median
  (the middle value, or the lower of the middle two) is the judge's: with two ranks it is the
  faster rank, where ``quantile(0.5)`` would be their mean.

Standard library only; nothing here talks to a server.
"""

from __future__ import annotations

from observe import catalog as c
from observe.monitoring.settings import Settings
from observe.promql import duration_seconds

RUN = "namespace, run_id"
RANK = "namespace, run_id, rank"
#: The labels that locate a rank in an alert: its run and rank, pod, node, GPU and scrape target.
PLACE = "namespace, run_id, rank, local_rank, pod, node, gpu_uuid, instance"
#: Phases in which a rank that others wait for is pausing them (``observe.diagnosis.judge.PAUSING_PHASES``).
PAUSING_PHASES = ("checkpointing", "validating")

#: Recording rules of the hang group (``level:metric:operations``): per run and process group, the
#: ranks that wait in one of its collectives (blocked in it, or one issued and not completed) ...
WAITING_RANKS = f"namespace_run_id_pg:{c.TRAIN_COLLECTIVE_WAITING.name}:ranks"
#: ... those of them whose watchdog says they are stalled ...
STALLED_WAITING = f"namespace_run_id_pg:{c.TRAIN_COLLECTIVE_WAITING.name}:stalled_ranks"
#: ... and per run, group and op, the ranks whose training thread is blocked in that op.
WAITING_OPS = f"namespace_run_id_pg_op:{c.TRAIN_COLLECTIVE_WAITING.name}:ranks"
#: Recording rules of the training group: each rank's compute time per step over 5 minutes ...
COMPUTE_PER_STEP = f"rank:{c.TRAIN_COMPUTE_SECONDS.name}:per_step_rate5m"
#: ... and the run's lower median of it.
COMPUTE_MEDIAN = f"namespace_run_id:{c.TRAIN_COMPUTE_SECONDS.name}:per_step_lower_median5m"
RECORDED = (WAITING_RANKS, STALLED_WAITING, WAITING_OPS, COMPUTE_PER_STEP, COMPUTE_MEDIAN)


def _stalled(s: Settings) -> str:
    return f"{s.trainer(c.TRAIN_STALLED.name)} == 1"


def _in_flight(s: Settings) -> str:
    """Per rank and group: a collective issued and not completed (all a host sees of NCCL's waits)."""
    return f"{s.trainer(c.TRAIN_COLLECTIVES_ENQUEUED.name)} > {s.trainer(c.TRAIN_COLLECTIVES_COMPLETED.name)}"


def recording_rules(s: Settings) -> list[dict[str, str]]:
    """The hang group's records: ``WAITING_RANKS``, ``STALLED_WAITING`` and ``WAITING_OPS``."""
    waiting = s.trainer(c.TRAIN_COLLECTIVE_WAITING.name)
    ranks = f"group by ({RANK}, pg) ({waiting}) or group by ({RANK}, pg) ({_in_flight(s)})"
    return [
        {"record": WAITING_RANKS, "expr": f"count by ({RUN}, pg) (\n  {ranks}\n)"},
        {
            "record": STALLED_WAITING,
            "expr": f"count by ({RUN}, pg) (\n  ({ranks})\n  and on ({RANK}) ({_stalled(s)})\n)",
        },
        {"record": WAITING_OPS, "expr": f"count by ({RUN}, pg, op) ({waiting})"},
    ]


def behind(s: Settings) -> str:
    """FsdpCollectiveHang: the ranks behind on a group the stalled ranks wait on; value: how many
    ranks wait on it (stalled or not yet: their watchdogs flag them a look or a scrape apart)."""
    enq = s.trainer(c.TRAIN_COLLECTIVES_ENQUEUED.name)
    blocked = s.trainer(c.TRAIN_COLLECTIVE_BLOCKED_SECONDS.name)
    pausing = s.trainer(c.TRAIN_PHASE.name, f'phase=~"{"|".join(PAUSING_PHASES)}"')
    return (
        f"(\n"
        f"  max by ({PLACE}, pg) ({enq})\n"
        f"  < on ({RUN}, pg) group_left ()\n"
        f"  max by ({RUN}, pg) ({enq})\n"
        f"  unless on ({RANK}) ({_in_flight(s)})\n"
        f"  unless on ({RANK}) ({blocked} > 0)\n"
        f"  unless on ({RANK}) ({pausing} == 1)\n"
        f")\n"
        f"* 0 + on ({RUN}, pg) group_left ()\n"
        f"{WAITING_RANKS}\n"
        f"and on ({RUN}, pg) {STALLED_WAITING}"
    )


def mismatch(s: Settings) -> str:
    """FsdpCollectiveMismatch: stalled ranks blocked at one sequence number of a group in an op fewer
    ranks wait in (every side on a tie); value: the sequence number."""
    waiting = s.trainer(c.TRAIN_COLLECTIVE_WAITING.name)
    top = f"max by ({RUN}, pg) ({WAITING_OPS})"
    odd = (
        f"    ({WAITING_OPS} < on ({RUN}, pg) group_left () {top})\n"
        f"    or\n"
        f"    ({WAITING_OPS} and on ({RUN}, pg) (count by ({RUN}, pg) ("
        f"{WAITING_OPS} == on ({RUN}, pg) group_left () {top}) > 1))"
    )
    return (
        f"max by ({PLACE}, pg, op) ({waiting})\n"
        f"and on ({RUN}, pg, op) (\n{odd}\n)\n"
        f"and on ({RUN}, pg) (max by ({RUN}, pg) ({waiting}) == min by ({RUN}, pg) ({waiting}))\n"
        f"and on ({RANK}) ({_stalled(s)})"
    )


def gone(s: Settings) -> str:
    """FsdpRankGone: ranks seen within ``stall_time`` and not now, in a run whose stalled ranks wait;
    value: how many wait."""
    info = s.trainer(c.TRAIN_INFO.name)
    return (
        f"max by ({PLACE}) (\n"
        f"  last_over_time({info}[{s.stall_time}])\n"
        f"  unless on ({RANK}) {info}\n"
        f"  and on ({RUN}, world_size) group by ({RUN}, world_size) ({info})\n"
        f")\n"
        f"* 0 + on ({RUN}) group_left ()\n"
        f"sum by ({RUN}) ({WAITING_RANKS})\n"
        f"and on ({RUN}) {STALLED_WAITING}"
    )


def compute_rules(s: Settings) -> list[dict[str, str]]:
    """The training group's records: ``COMPUTE_PER_STEP`` and ``COMPUTE_MEDIAN``."""
    compute = s.trainer(c.TRAIN_COMPUTE_SECONDS.name)
    steps = s.trainer(c.TRAIN_STEPS.name)
    median = f"quantile by ({RUN}) (0.5, {COMPUTE_PER_STEP})"
    return [
        {"record": COMPUTE_PER_STEP, "expr": f"rate({compute}[5m]) / rate({steps}[5m])"},
        # the largest value at or below the interpolated median: the lower median
        {
            "record": COMPUTE_MEDIAN,
            "expr": f"max by ({RUN}) ({COMPUTE_PER_STEP} <= on ({RUN}) group_left () {median})",
        },
    ]


def straggler(s: Settings, step_median: str) -> str:
    """FsdpStragglerRank: compute per step over ``straggler_ratio`` x the run's lower median, and
    the excess over ``straggler_share`` x ``step_median`` (the run's median step time record) and
    over ``straggler_min_excess``."""
    floor = duration_seconds(s.straggler_min_excess)
    return (
        f"{COMPUTE_PER_STEP}\n"
        f"> on ({RUN}) group_left () ({s.straggler_ratio:g} * {COMPUTE_MEDIAN})\n"
        f"and\n"
        f"{COMPUTE_PER_STEP} - on ({RUN}) group_left () {COMPUTE_MEDIAN}\n"
        f"> on ({RUN}) group_left () clamp_min({s.straggler_share:g} * {step_median}, {floor:g})"
    )


def still_running(s: Settings) -> str:
    """FsdpTrainingStalled's extra conditions: not a rank whose watchdog says it is not stalled (its
    loop ended, or it still completes collectives or batches), nor one past its planned steps."""
    step = s.trainer(c.TRAIN_STEP.name)
    planned = s.trainer(c.TRAIN_PLANNED_STEPS.name)
    return f"unless on ({RANK}) ({s.trainer(c.TRAIN_STALLED.name)} == 0)\nunless on ({RANK}) ({step} >= {planned})"


# --- Go templates of the descriptions -----------------------------------------------------------

_OF_RUN = "namespace=%q,run_id=%q"
_RUN_ARGS = "$labels.namespace $labels.run_id"


def place() -> str:
    """Go template: ``rank R of run X (pod P, node N, GPU U)`` from the alert's labels."""
    return (
        "rank {{ $labels.rank }} of run {{ $labels.run_id }} ({{ with $labels.pod }}pod {{ . }}, {{ end }}"
        "node {{ $labels.node }}{{ with $labels.gpu_uuid }}, GPU {{ . }}{{ end }})"
    )


def waited_in(s: Settings) -> str:
    """Go template: the collective the alert's group's ranks wait in, ``op #seq`` (the highest
    sequence number any of them is blocked at), else ``collective #N`` (the culprit's count + 1)."""
    waiting = s.trainer(c.TRAIN_COLLECTIVE_WAITING.name, _OF_RUN, "pg=%q")
    enq = s.trainer(c.TRAIN_COLLECTIVES_ENQUEUED.name, _OF_RUN, "rank=%q", "pg=%q")
    return (
        f"{{{{ with printf `topk(1, {waiting})` {_RUN_ARGS} $labels.pg | query }}}}"
        '{{ with first . }}{{ .Labels.op }} #{{ printf "%.0f" .Value }}{{ end }}'
        f"{{{{ else }}}}{{{{ with printf `{enq} + 1` {_RUN_ARGS} $labels.rank $labels.pg | query }}}}"
        '{{ with first . }}collective #{{ printf "%.0f" .Value }}{{ end }}{{ end }}{{ end }}'
    )


def majority(s: Settings) -> str:
    """Go template: ``the ranks blocked there wait in OP (N), OP (N)``: every op the alert's group's
    ranks are blocked in, by name, with how many (so a tie reads the same on every evaluation)."""
    ops = f"{WAITING_OPS}{{{_OF_RUN},pg=%q}}"
    return (
        f"{{{{ with printf `{ops}` {_RUN_ARGS} $labels.pg | query }}}}the ranks blocked there wait in "
        '{{ range $i, $s := . | sortByLabel "op" }}{{ if $i }}, {{ end }}{{ $s.Labels.op }} '
        '({{ printf "%.0f" $s.Value }}){{ end }}{{ end }}'
    )


def _duration(query: str, args: str = _RUN_ARGS) -> str:
    """Go template: the first value of ``query`` (a ``printf`` format over ``args``) as a duration."""
    return f"{{{{ with printf `{query}` {args} | query }}}}{{{{ . | first | value | humanizeDuration }}}}{{{{ end }}}}"


def threshold(s: Settings) -> str:
    """Go template: the run's stall threshold (the longest of its ranks'), e.g. ``30s``."""
    return _duration(f"max({s.trainer(c.TRAIN_STALL_THRESHOLD.name, _OF_RUN)})")


def phase_of_rank(s: Settings) -> str:
    """Go template: the alert's rank's phase."""
    q = f"{s.trainer(c.TRAIN_PHASE.name, _OF_RUN, 'rank=%q')} == 1"
    return (
        f"{{{{ with printf `{q}` {_RUN_ARGS} $labels.rank | query }}}}"
        "{{ with first . }}{{ .Labels.phase }}{{ end }}{{ else }}unknown{{ end }}"
    )


def scrape_state(s: Settings) -> str:
    """Go template: whether the gone rank's scrape target is still there (``up == 0``) or went away."""
    return (
        f"{{{{ with printf `{s.trainer('up', 'instance=%q')}` $labels.instance | query }}}}"
        "its target is still discovered but its scrapes fail (up is {{ . | first | value }}): its process "
        "is dead, stopped or not answering (a training thread holding the GIL starves the exporter's), or "
        "its node is unreachable"
        "{{ else }}its scrape target is gone: its process ended or its pod or node was lost{{ end }}"
    )


def waiting_count(s: Settings) -> str:
    """Go template: FsdpTrainingStalled's line on whether the run's ranks wait in a collective."""
    state = s.trainer(c.TRAIN_STATE.name, _OF_RUN)
    waiting = s.trainer(c.TRAIN_STATE.name, _OF_RUN, 'state="collective"')
    return (
        f"{{{{ with printf `count({waiting} == 1)` {_RUN_ARGS} | query }}}}"
        '{{ . | first | value | printf "%.0f" }} of the run\'s ranks wait in a collective: FsdpCollectiveHang, '
        "FsdpCollectiveMismatch or FsdpRankGone names the rank they wait for."
        f"{{{{ else }}}}{{{{ with printf `count({state})` {_RUN_ARGS} | query }}}}"
        "No rank of the run waits in a collective: they are all outside the collectives (a stuck data "
        "loader, a deadlock or a loop in the ranks' own code); fsdp-observe diagnose shows where their "
        "stacks agree."
        "{{ else }}Whether its ranks wait in a collective is unknown (collective tracking is off: "
        "FSDP_OBSERVE_COLLECTIVES=0).{{ end }}{{ end }}"
    )


def compute_median() -> str:
    """Go template: the alert's run's lower median compute per step, as a duration."""
    return _duration(f"{COMPUTE_MEDIAN}{{{_OF_RUN}}}")


def compute_excess() -> str:
    """Go template: the alert's rank's compute per step above the run's median, as a duration."""
    q = f"{COMPUTE_PER_STEP}{{{_OF_RUN},rank=%q,instance=%q}} - on ({RUN}) group_left () {COMPUTE_MEDIAN}{{{_OF_RUN}}}"
    return _duration(q, f"{_RUN_ARGS} $labels.rank $labels.instance {_RUN_ARGS}")


def step_median(step_median_record: str) -> str:
    """Go template: the alert's run's median step time (``step_median_record``), as a duration."""
    return _duration(f"{step_median_record}{{{_OF_RUN}}}")
