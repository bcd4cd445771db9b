"""Log windows: which steps log, and the figures of the steps between two log steps.

Step time over a window is the window's wall time divided by the steps really in it (not by
``log_every``): logging at step 1 and then every 10 steps, the window ending at step 1 holds 1
step and the one ending at step 10 holds 9; after a resume at step 96, the window ending at
step 100 holds 4.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


def is_log_step(step: int, log_every: int, last_step: int) -> bool:
    """Whether ``step`` (1-based) ends a log window: step 1, every ``log_every``-th, and the last."""
    return step == 1 or step % log_every == 0 or step == last_step


@dataclass(frozen=True)
class WindowStats:
    """Host-side figures of one closed log window.

    Attributes:
        steps: optimizer steps in the window (>= 1).
        seconds: wall time of the window.
        data_wait_seconds: time spent waiting for batches within it (``None``: not watched).
        labelled_tokens: labelled tokens this rank processed within it (``None``: not counted).
        warmup_steps, warmup_seconds: the process's first step when it is in this window (1, and
            the window's time up to that step's end; else 0 and 0.0): it carries the warm-up
            (allocator, kernels, caches), so rates that predict (the ETA) leave it out.
    """

    steps: int
    seconds: float
    data_wait_seconds: float | None
    labelled_tokens: int | None
    warmup_steps: int = 0
    warmup_seconds: float = 0.0

    @property
    def step_seconds(self) -> float:
        """Mean step time: window wall time / steps in the window."""
        return self.seconds / self.steps

    @property
    def steady_step_seconds(self) -> float | None:
        """Mean step time without the process's first step (the warm-up): ``None`` for a window
        holding that step alone (step 1's), when there is no steady step to time yet."""
        steps = self.steps - self.warmup_steps
        return (self.seconds - self.warmup_seconds) / steps if steps > 0 else None

    @property
    def data_wait_ratio(self) -> float | None:
        """Share of the window spent waiting for data, 0..1 (``None`` when not watched)."""
        if self.data_wait_seconds is None:
            return None
        return self.data_wait_seconds / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float | None:
        """This rank's labelled tokens per second over the window (``None`` when not counted)."""
        if self.labelled_tokens is None:
            return None
        return self.labelled_tokens / self.seconds if self.seconds > 0 else 0.0


class LogWindow:
    """Accumulates per-step host figures until the next log step.

    Args:
        start_step: the step the run starts after (0, or the step resumed from).
        clock: a monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, start_step: int = 0, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.last_step = start_step
        self._start = clock()
        self._data_wait = 0.0
        self._tokens = 0

    def add(self, data_wait_seconds: float, labelled_tokens: int) -> None:
        """Record one step's data wait and labelled tokens."""
        self._data_wait += data_wait_seconds
        self._tokens += labelled_tokens

    def close(self, step: int) -> WindowStats:
        """End the window at ``step`` and start the next one.

        Raises:
            ValueError: if ``step`` does not advance past the previous log step.
        """
        if step <= self.last_step:
            raise ValueError(f"log step {step} does not advance past {self.last_step}")
        now = self._clock()
        stats = WindowStats(step - self.last_step, now - self._start, self._data_wait, self._tokens)
        self.last_step, self._start, self._data_wait, self._tokens = step, now, 0.0, 0
        return stats
