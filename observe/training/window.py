"""Log windows: which steps log, the open window (``OpenWindow``) and the figures of the steps
between two log steps (``WindowStats``, and ``WindowReport`` for a caller's own log line).

Step time over a window is the window's wall time divided by the steps really in it (not by
``log_every``): logging at step 1 and then every 10 steps, the window ending at step 1 holds 1
step and the one ending at step 10 holds 9; after a resume at step 96, the window ending at
step 100 holds 4.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from observe.training.tensors import Accumulator


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


@dataclass(frozen=True)
class WindowReport:
    """What a closed log window gave, for a caller's own log line (``TrainingMetrics(on_window=...)``).

    Attributes:
        step: the log step that closed it. stats: its host figures.
        loss: the window's loss (``None`` when no loss was given). grad_norm: the last one given.
        global_tokens_per_second: summed over ranks (``global_loss`` only, else ``None``).
        learning_rate: of the last step.
    """

    step: int
    stats: WindowStats
    loss: float | None
    grad_norm: float | None
    global_tokens_per_second: float | None
    learning_rate: float | None


class OpenWindow:
    """The steps since the last log window closed: their wall time, data wait and labelled tokens
    (a host part, and a device part that is read when the window closes), and the process's first
    step (its warm-up) while that step's window is open.

    ``observe.training.recorder.StepRecorder`` adds each step (``add_step``), and on a log step
    takes the window's figures (``stats``) and starts the next (``restart``). Times are
    ``time.perf_counter`` seconds.
    """

    def __init__(self) -> None:
        self.steps = 0
        self._started: float | None = None
        self._first_step_ended: float | None = None
        self._data_wait: float | None = None
        self._tokens = Accumulator()
        self._tokens_known = False
        #: Labelled tokens still on a device (counted into the window when ``stats`` is given them).
        self.device_tokens = Accumulator()

    def add_step(
        self, started: float, ended: float, data_wait: float | None, tokens: Accumulator | None, first: bool
    ) -> int | None:
        """A step that ran from ``started`` to ``ended``, waited ``data_wait`` seconds for data
        (``None``: not watched) and counted ``tokens`` (an ``Accumulator``, ``None``: not
        counted); ``first``: the process's first step. Returns the host part of its tokens."""
        if self._started is None:
            self._started = started
        if first:
            self._first_step_ended = ended
        tokens_host: int | None = None
        if tokens is not None:
            self._tokens_known = True
            if tokens.device is not None:
                self.device_tokens.add(tokens.device)
            tokens_host = int(tokens.host)
            self._tokens.add(tokens_host)
        if data_wait is not None:
            self._data_wait = (self._data_wait or 0.0) + data_wait
        self.steps += 1
        return tokens_host

    def add_tokens(self, tokens: int) -> None:
        """Labelled tokens of the window a framework counted itself."""
        self._tokens.add(tokens)
        self._tokens_known = True

    def stats(self, now: float, device_tokens: float | None) -> tuple[WindowStats, int]:
        """The window's figures at ``now``, with ``device_tokens`` (the read value of
        ``device_tokens``) counted in; and that count as an int, for the running total."""
        seconds = now - (self._started if self._started is not None else now)
        tokens: int | None = None
        extra = 0
        if self._tokens_known:
            extra = int(round(device_tokens or 0.0))
            tokens = int(self._tokens.host) + extra
        stats = WindowStats(self.steps, seconds, self._data_wait, tokens)
        if self._first_step_ended is not None:  # the window holds the process's first step (warm-up)
            started = self._started if self._started is not None else self._first_step_ended
            stats = replace(stats, warmup_steps=1, warmup_seconds=max(0.0, self._first_step_ended - started))
            self._first_step_ended = None
        return stats, extra

    def restart(self, now: float) -> None:
        """Start the next window at ``now``."""
        self._started, self.steps, self._data_wait = now, 0, None
        self._tokens, self.device_tokens, self._tokens_known = Accumulator(), Accumulator(), False
