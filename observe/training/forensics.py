"""One rank's hang and straggler evidence: its state, its collectives, compute vs wait, its stack.

``RankForensics`` is fed at the points the entry-point protocol already sees: it listens to the
rank's ``StepRecorder`` (a step ends, a window closes), and the data iterators tell it when they
wait. It reads the process's ``CollectiveTracker`` and Flight Recorder when asked, and serves three
readers:

- Prometheus (``families``): the cheap always-on series of ``observe.catalog.TRAINER_FORENSICS_METRICS``;
- the rank's ``/debug/state`` (``state_json``): the same plus the blocked collective's op, sequence
  number and shapes, the last collective issued per group, the training thread's stack and the
  node's other ranks (``observe.training.peers``); no device is touched, and reading it costs about
  0.1 ms (Flight Recorder's status and one ``sys._current_frames``);
- the stall watchdog (``observe.training.watchdog``), which writes the costly evidence once per stall.

**Compute vs wait.** In synchronous FSDP every rank's step takes the same time: the collectives line
the ranks up, and a slow rank makes the others wait. The split shows who: each step's time is
``data wait + collective wait + compute``, where the collective wait is the time the training thread
spent in ``Work.wait`` during the step (clamped to what is left after data wait) and compute is the
rest. Measured here (4 gloo ranks, rank 1 sleeping 0.3 s per step): step 407 ms on every rank,
compute 313 ms on rank 1 and 12-13 ms on the others.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from statistics import median_high
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from observe import catalog as c
from observe.training import flight
from observe.training.collectives import CollectiveTracker
from observe.training.stacks import thread_stack

#: Steps whose time feeds the median of the stall threshold.
MEDIAN_STEPS = 64
#: Version of the ``/debug/state`` JSON (``observe.diagnosis`` reads it).
STATE_VERSION = 1


class RankForensics:
    """The evidence of one rank.

    Args:
        tracker: the process's collective tracker (``observe.training.collectives.install``).
        identity: ``rank``, ``local_rank``, ``world_size``, ``node``, ``run_id`` and where known
            ``gpu_uuid`` and ``gpu_index`` (strings or ints, as JSON gives them).
        phase: returns the rank's phase now (``observe.catalog.TRAIN_PHASES``).
        step: returns the index of the last completed step.
        clock: ``time.perf_counter`` (injectable for tests).
        flight_status: Flight Recorder's status per group (``observe.training.flight.status``).
    """

    def __init__(
        self,
        tracker: CollectiveTracker,
        identity: dict[str, Any],
        phase: Callable[[], str],
        step: Callable[[], int],
        clock: Callable[[], float] = time.perf_counter,
        flight_status: Callable[[], dict[str, Any] | None] = flight.status,
    ) -> None:
        self.tracker = tracker
        #: Flight Recorder's per-group status (``observe.training.flight.status``): the process's own
        #: unless given (a rank rebuilt from figures, as the tests' fleets are, has none).
        self.flight_status = flight_status
        self.identity = dict(identity)
        self.identity.setdefault("pod", os.environ.get("HOSTNAME") or socket.gethostname())
        self.identity.setdefault("pid", os.getpid())
        self._phase = phase
        self._step = step
        self.clock = clock
        self.compute_seconds_total = 0.0
        self.wait_seconds_total = 0.0
        self._wait_mark = tracker.wait_seconds
        self._window_compute = 0.0
        self._window_wait = 0.0
        self._window_steps = 0
        self.window_compute: float | None = None
        self.window_wait: float | None = None
        self.step_times: deque[float] = deque(maxlen=MEDIAN_STEPS)
        #: (compute, collective wait) of the last ``MEDIAN_STEPS`` steps: the verdict's straggler
        #: figures (a log window of a few steps is too short on a noisy host).
        self.recent: deque[tuple[float, float]] = deque(maxlen=MEDIAN_STEPS)
        self.in_data_since: float | None = None
        self.batches = 0
        self.last_step_unix: float | None = None
        #: Why the training loop is known to have ended (``None`` while it runs): a framework's train
        #: end, the planned last step, or the training DataLoader exhausted with no step after it.
        self.loop_ended: str | None = None
        #: Set by the stall watchdog (``observe.training.watchdog``).
        self.stall: dict[str, Any] | None = None
        self.stall_threshold: float | None = None
        self.peers: Callable[[], dict[str, Any]] | None = None
        #: The run's last step, when known: reaching it ends the loop (saving afterwards is no hang).
        self.planned_steps: int | None = None

    # -- fed by the entry-point protocol (training thread) ------------------------------------------

    # -- a StepListener (observe.training.recorder): the recorder tells it of every step --------

    def step_began(self, step: int, at: float) -> None:
        """A step began (nothing to do: the split is taken when it ends)."""

    def step_ended(self, step: int, started: float, ended: float, data_wait: float | None) -> None:
        """Step ``step`` ran from ``started`` to ``ended`` (``time.perf_counter``), ``data_wait`` of it
        waiting for batches: split it into compute and collective wait."""
        step_seconds = max(0.0, ended - started)
        if self.planned_steps is not None and step >= self.planned_steps:
            self.loop_ended = "planned_steps"
        tracker = self.tracker
        tracker.training_thread = threading.get_ident()
        waited = tracker.wait_seconds - self._wait_mark
        self._wait_mark = tracker.wait_seconds
        busy = max(0.0, step_seconds - (data_wait or 0.0))
        wait = min(max(0.0, waited), busy)
        compute = busy - wait
        self.compute_seconds_total += compute
        self.wait_seconds_total += wait
        self._window_compute += compute
        self._window_wait += wait
        self._window_steps += 1
        self.step_times.append(step_seconds)
        self.recent.append((compute, wait))
        self.last_step_unix = time.time()
        self.loop_ended = None if self.loop_ended == "loader_exhausted" else self.loop_ended

    def window_closed(self, report: object = None) -> None:
        """A log window closed (``report``: its ``WindowReport``, unused): its means per step become
        the window gauges."""
        if self._window_steps:
            self.window_compute = self._window_compute / self._window_steps
            self.window_wait = self._window_wait / self._window_steps
        self._window_compute = self._window_wait = 0.0
        self._window_steps = 0

    def data_started(self) -> None:
        """The training thread starts waiting for a batch."""
        self.in_data_since = self.clock()

    def data_ended(self, exhausted: bool = False) -> None:
        """The batch came (or the iterator is exhausted: the loop may have ended)."""
        self.in_data_since = None
        self.batches += 1
        if exhausted and self.loop_ended is None:
            self.loop_ended = "loader_exhausted"

    def end_loop(self, why: str) -> None:
        """The training loop ended (``train_end``, ``planned_steps``, ``finished``)."""
        self.loop_ended = why

    # -- reading (exporter threads) ------------------------------------------------------------------

    def state(self) -> str:
        """What the training thread does now (``observe.catalog.TRAIN_STATES``)."""
        blocked = self.tracker.blocked.get(self.tracker.training_thread or -1)
        if blocked is not None:
            return "collective"
        if self.in_data_since is not None:
            return "data"
        return "computing" if self._phase() == "training" else "phase"

    def progress(self) -> tuple[int, int, int, str]:
        """What moves while the rank makes progress: steps, completed collectives, batches, phase."""
        return self._step(), self.tracker.progress, self.batches, self._phase()

    def median_step_seconds(self) -> float | None:
        """Median of the last ``MEDIAN_STEPS`` step times, or ``None`` before a step."""
        return median_high(self.step_times) if self.step_times else None

    def groups(self) -> dict[str, dict[str, Any]]:
        """Per process group: ``enqueued``, ``completed`` (and ``started`` where recorded), with
        ``source`` ``flight_recorder`` or ``fsdp-observe``."""
        t = self.tracker
        out: dict[str, dict[str, Any]] = {
            pg: {"enqueued": n, "completed": t.completed.get(pg, 0), "source": "fsdp-observe"}
            for pg, n in list(t.issued.items())
        }
        for pg, st in (self.flight_status() or {}).items():
            entry = {"enqueued": max(st.enqueued, 0), "completed": max(st.completed, 0), "source": "flight_recorder"}
            if st.started >= 0:
                entry["started"] = st.started
            out[pg] = entry
        return out

    def blocked_json(self) -> dict[str, Any] | None:
        """The training thread's current collective wait, or ``None``."""
        t = self.tracker
        b = t.blocked.get(t.training_thread or -1)
        if b is None:
            return None
        out: dict[str, Any] = {"seconds": round(max(0.0, t.clock() - b.since), 3)}
        if b.collective is not None:
            i = b.collective
            out.update(pg=i.pg, seq=i.seq, op=i.op, shapes=[list(s) for s in i.shapes])
        return out

    def state_json(self, stack: bool = True) -> dict[str, Any]:
        """The ``/debug/state`` document (``STATE_VERSION``): identity, phase, state, step, groups,
        last collectives, the blocked collective, the step split, the stall, the stack, peers."""
        t = self.tracker
        last = {pg: {"seq": i.seq, "op": i.op, "shapes": [list(s) for s in i.shapes]} for pg, i in list(t.last.items())}
        doc: dict[str, Any] = {
            "version": STATE_VERSION,
            **self.identity,
            "now_unix": time.time(),
            "phase": self._phase(),
            "state": self.state(),
            "step": self._step(),
            "last_step_unix": self.last_step_unix,
            "loop_ended": self.loop_ended,
            "groups": self.groups(),
            "last_issued": last,
            "blocked": self.blocked_json(),
            "split": {
                "window_compute_seconds": self.window_compute,
                "window_collective_wait_seconds": self.window_wait,
                "compute_seconds_total": round(self.compute_seconds_total, 6),
                "collective_wait_seconds_total": round(self.wait_seconds_total, 6),
                "median_step_seconds": self.median_step_seconds(),
                **self._recent_split(),
            },
            "stall": self.stall,
            "stall_threshold_seconds": self.stall_threshold,
        }
        if stack:
            doc["stack"] = [f.to_json() for f in thread_stack(t.training_thread)]
        if self.peers is not None:
            doc["peers"] = self.peers()
        return doc

    def _recent_split(self) -> dict[str, float | int]:
        """Median compute and median collective wait per step over the last ``MEDIAN_STEPS`` steps.

        Medians, not means: a straggler is slow on most steps, and a host that took the CPU from a
        rank for a few steps (a GC pause, a neighbour's burst) moves a 64-step mean by as much as a
        real straggler's excess (4 steps of 64 slowed to 2 s make a 100 ms rank's mean 219 ms; its
        median stays 100 ms). A small steady difference is the judge's to ignore
        (``observe.diagnosis.judge.STRAGGLER_MIN_EXCESS_SECONDS``).
        """
        recent = list(self.recent)
        if not recent:
            return {}
        return {
            "recent_steps": len(recent),
            "recent_compute_seconds": median_high(c for c, _ in recent),
            "recent_collective_wait_seconds": median_high(w for _, w in recent),
        }

    def families(self, labels: dict[str, str]) -> Iterator[Any]:
        """The forensics series with the rank's constant ``labels``."""
        names, values = list(labels), list(labels.values())
        state = GaugeMetricFamily(c.TRAIN_STATE.name, c.TRAIN_STATE.help, labels=[*names, "state"])
        now = self.state()
        for s in c.TRAIN_STATES:
            state.add_metric([*values, s], 1.0 if s == now else 0.0)
        yield state
        groups = self.groups()
        enq = CounterMetricFamily(
            c.TRAIN_COLLECTIVES_ENQUEUED.family, c.TRAIN_COLLECTIVES_ENQUEUED.help, labels=[*names, "pg"]
        )
        done = CounterMetricFamily(
            c.TRAIN_COLLECTIVES_COMPLETED.family, c.TRAIN_COLLECTIVES_COMPLETED.help, labels=[*names, "pg"]
        )
        for pg in sorted(groups):
            enq.add_metric([*values, pg], float(groups[pg]["enqueued"]))
            done.add_metric([*values, pg], float(groups[pg]["completed"]))
        yield enq
        yield done
        blocked = self.blocked_json()
        yield _gauge(c.TRAIN_COLLECTIVE_BLOCKED_SECONDS, labels, blocked["seconds"] if blocked else 0.0)
        waiting = GaugeMetricFamily(
            c.TRAIN_COLLECTIVE_WAITING.name, c.TRAIN_COLLECTIVE_WAITING.help, labels=[*names, "pg", "op"]
        )
        if blocked and "seq" in blocked:
            waiting.add_metric([*values, blocked["pg"], blocked["op"]], float(blocked["seq"]))
        yield waiting
        yield _counter(c.TRAIN_COMPUTE_SECONDS, labels, self.compute_seconds_total)
        yield _counter(c.TRAIN_COLLECTIVE_WAIT_SECONDS, labels, self.wait_seconds_total)
        if self.window_compute is not None:
            yield _gauge(c.TRAIN_WINDOW_COMPUTE_SECONDS, labels, self.window_compute)
        if self.window_wait is not None:
            yield _gauge(c.TRAIN_WINDOW_COLLECTIVE_WAIT_SECONDS, labels, self.window_wait)
        yield _gauge(c.TRAIN_STALLED, labels, 1.0 if self.stall and self.stall.get("stalled") else 0.0)
        if self.stall_threshold is not None:
            yield _gauge(c.TRAIN_STALL_THRESHOLD, labels, self.stall_threshold)


def _gauge(metric: c.Metric, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(metric.name, metric.help, labels=list(labels))
    g.add_metric(list(labels.values()), value)
    return g


def _counter(metric: c.Metric, labels: dict[str, str], value: float) -> CounterMetricFamily:
    g = CounterMetricFamily(metric.family, metric.help, labels=list(labels))
    g.add_metric(list(labels.values()), value)
    return g


def gpu_index(environ: dict[str, str] | None = None) -> int | None:
    """The node's index (NVML's, as dcgm-exporter and the agent label GPUs) of the CUDA device this
    rank uses, where torch has CUDA initialised: the current device mapped through
    ``CUDA_VISIBLE_DEVICES`` when that lists indices; ``None`` without CUDA or when it lists UUIDs."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        device = int(torch.cuda.current_device())
    except Exception:  # noqa: BLE001 - a driver problem: the index stays unknown
        return None
    visible = (os.environ if environ is None else environ).get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return device
    listed = [v.strip() for v in visible.split(",")]
    try:
        return int(listed[device])
    except (IndexError, ValueError):
        return None
