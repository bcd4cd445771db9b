"""Where a rank's wall time goes: its current phase, seconds per phase, and goodput.

Plain host-side state, updated by the training loop at phase changes and steps, read by the
exporter at scrape time. Phases are ``observe.catalog.TRAIN_PHASES``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from observe.catalog import TRAIN_PHASES


def process_start_time(stat_path: str = "/proc/self/stat", proc_stat: str = "/proc/stat") -> float:
    """Unix time at which this process started (before Python imported anything), or now.

    Linux: field 22 of ``/proc/self/stat`` (clock ticks after boot) plus ``btime`` of
    ``/proc/stat``; elsewhere, or when they cannot be read, the current time.
    """
    try:
        with open(stat_path) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 overall; fields[0] is field 3 (state)
        with open(proc_stat) as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class PhaseClock:
    """The phase a rank is in, and the wall time spent in each phase so far.

    Args:
        phase: the phase the process starts in (one of ``TRAIN_PHASES``).
        clock: monotonic seconds (injectable for tests).
        already: seconds the process has already spent in ``phase`` (e.g. since it started).

    Raises:
        ValueError: an unknown phase (here or in ``enter``).
    """

    def __init__(self, phase: str, clock: Callable[[], float] = time.monotonic, already: float = 0.0) -> None:
        self._clock = clock
        self._totals = dict.fromkeys(TRAIN_PHASES, 0.0)  # fixed keys: safe to read from the scrape thread
        self._check(phase)
        self._current = phase
        self._since = clock() - max(0.0, already)

    @property
    def current(self) -> str:
        """The phase now."""
        return self._current

    def enter(self, phase: str) -> None:
        """Leave the current phase (adding its time) and enter ``phase``."""
        self._check(phase)
        now = self._clock()
        self._totals[self._current] += now - self._since
        self._current, self._since = phase, now

    def seconds(self) -> dict[str, float]:
        """Seconds per phase, the current phase counted up to now; every phase present."""
        totals = dict(self._totals)
        totals[self._current] += self._clock() - self._since
        return totals

    @staticmethod
    def _check(phase: str) -> None:
        if phase not in TRAIN_PHASES:
            raise ValueError(f"unknown phase {phase!r}; known: {', '.join(TRAIN_PHASES)}")


class Goodput:
    """Productive step time over wall time since the run first started, across restarts.

    The numerator is the step time of the steps the run keeps: what the checkpoint resumed from
    had accumulated (``productive_seconds`` in its ``trainer.json``) plus the steps of this
    process. Steps an earlier attempt did after its last checkpoint are lost with it, so a
    restart lowers goodput by the steps redone and by the time to get going again.

    Args:
        run_started: Unix time of the run's first start (this process's start for a new run).
        productive_seconds: productive step time already banked by the checkpoint resumed from.
        clock: wall clock in Unix seconds (injectable for tests).
    """

    def __init__(
        self, run_started: float, productive_seconds: float = 0.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.run_started = run_started
        self.productive_seconds = productive_seconds
        self._clock = clock

    def add_step(self, seconds: float) -> None:
        """Count one completed optimizer step's wall time as productive."""
        self.productive_seconds += seconds

    def ratio(self) -> float | None:
        """Goodput now, 0..1, or ``None`` before any wall time has passed."""
        wall = self._clock() - self.run_started
        if wall <= 0:
            return None
        return min(1.0, self.productive_seconds / wall)
