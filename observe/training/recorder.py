"""``StepRecorder``: the entry-point protocol, the open step and the open log window of one rank.

The four entry points drive it: a user's loop through the public ``TrainingMetrics`` (which
delegates to it), our trainer (``trainer/train.py``), the Hugging Face and Lightning callbacks
(``hf``, ``lightning``) and zero-code injection (``inject.hooks``). Each tells it what it sees:

    recorder.record_batch(batch, started, ended)   # a batch fetched for the open step
    recorder.begin_step(at)                        # the step started (if no batch said so earlier)
    recorder.add_loss(loss, tokens)                # device tensors stay on the device
    recorder.set_grad_norm(norm)
    recorder.read_learning_rate(optimizer)         # an optimizer step pre-hook
    recorder.end_step(now)                         # counted; on a log step the window closes
    recorder.record_window(loss=..., ...)          # or: a framework's own reduced window

It owns the host numbers of the open step and window, and the device parts in ``Accumulator``s,
read with one transfer when a window closes (``close_window``), so other steps add no
host-device synchronisation. It hands every figure to the ``TrainingCollector`` through its
methods and reads nothing back. A step begins, ends and a window closes in one place each
(``_began``, ``end_step``, ``close_window``), where every attached ``StepListener`` hears of it:
the seam for another per-step component. Imports no torch.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from observe.training import device, progress, session
from observe.training.collector import TrainingCollector
from observe.training.flops import model_flops_per_token
from observe.training.phases import Goodput, PhaseClock
from observe.training.rankenv import RankEnv
from observe.training.tensors import Accumulator, count_batch, is_tensor, read_all
from observe.training.window import OpenWindow, WindowReport, is_log_step

log = logging.getLogger("observe.training")


class StepListener(Protocol):
    """Hears a rank's steps and windows, in order: for each step ``step_began`` once (when its
    first batch or ``begin_step`` came; before its ``step_ended``), then ``step_ended``; after a
    log step's ``step_ended``, ``window_closed``. Called on the training thread: keep it cheap
    and never raise. Times are ``time.perf_counter`` seconds."""

    def step_began(self, step: int, at: float) -> None:
        """Step ``step`` (1-based: the one that will be counted next) began at ``at``."""

    def step_ended(self, step: int, started: float, ended: float, data_wait: float | None) -> None:
        """Step ``step`` ran from ``started`` to ``ended`` and was counted; ``data_wait`` seconds of it
        went to waiting for batches (``None``: no batch was timed)."""

    def window_closed(self, report: WindowReport) -> None:
        """A log window closed with ``report`` (after the collector took its figures)."""


class StepRecorder:
    """What an entry point tells one rank about its steps, handed on to its collector.

    Args:
        collector: the rank's ``TrainingCollector`` (every figure goes there).
        phases: the rank's ``PhaseClock``; goodput: the run's ``Goodput``.
        rank_env: the rank's torchrun environment.
        instrumentation: the entry point that drives the steps (``observe.catalog.INSTRUMENTATIONS``).
        log_every: steps per log window; planned_steps: the last step (closes the last window).
        global_loss: all-reduce each window's loss sums and tokens/s (one collective per window).
        device: device of that all-reduce (default: that of the loss tensors given).
        model, seq_len: for FLOPs per token (``observe.training.flops.model_flops_per_token``;
            ``None`` model: absent).
        cuda: the rank runs on a CUDA device (its allocator's figures are read on log steps).
        on_window: called with each closed window's ``WindowReport``.
        on_ended: called by ``training_ended`` to close the rank's endpoint now.

    Attributes:
        collector, phases, goodput, rank_env, instrumentation, log_every, planned_steps,
            global_loss, on_window: as given.
        step_index: the run's step count (continues from a resumed checkpoint's step).
        windows_at_log_steps: ``end_step`` closes the window on log steps; an entry point whose
            framework reduces its own windows (Hugging Face's ``on_log``) turns this off and
            calls ``record_window``.
    """

    def __init__(
        self,
        collector: TrainingCollector,
        phases: PhaseClock,
        goodput: Goodput,
        rank_env: RankEnv,
        instrumentation: str,
        *,
        log_every: int,
        planned_steps: int | None,
        global_loss: bool = False,
        device: Any = None,
        model: Any = None,
        seq_len: int | None = None,
        cuda: bool = False,
        on_window: Callable[[WindowReport], None] | None = None,
        on_ended: Callable[[], None] | None = None,
    ) -> None:
        self.collector, self.phases, self.goodput = collector, phases, goodput
        self.rank_env, self.instrumentation = rank_env, instrumentation
        self.log_every, self.planned_steps, self.global_loss = log_every, planned_steps, global_loss
        self.on_window, self._on_ended = on_window, on_ended
        self._device, self._model, self._cuda = device, model, cuda
        if model is not None:
            self._set_flops_per_token(seq_len)
        self._listeners: list[StepListener] = []
        self.step_index = 0
        self.windows_at_log_steps = True
        self._steps_run = 0  # steps of this process (step_index continues a resumed run's count)
        # the open step (host numbers; device parts in Accumulators)
        self._step_open = False
        self._step_started: float | None = None
        self._data_wait: float | None = None
        self._samples: int | None = None
        self._batch_tokens: Accumulator | None = None
        self._loss_tokens: Accumulator | None = None
        # the open window (its loss sums here: add_loss feeds them, close_window reduces them)
        self._window = OpenWindow()
        self._loss_sum = Accumulator()
        self._loss_weight = Accumulator()
        # the latest values given (read on log steps) and the latest shown
        self._grad_norm: Any = None
        self._learning_rate: Any = None
        self._lr_tensors: dict[tuple[str, str], Any] = {}  # (optimizer, group) -> a device lr
        self._optimizer_names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._optimizer_classes: dict[str, int] = {}
        self._first_optimizer: str | None = None
        self._shown_loss: float | None = None
        self._shown_grad_norm: float | None = None
        self._shown_learning_rate: float | None = None
        self._checkpoint_recorded = False
        #: The rank's hang and straggler evidence (``observe.training.forensics.RankForensics``), set
        #: when collective tracking is on: the entry points' data iterators tell it when they wait.
        self.forensics: Any = None

    def attach(self, listener: StepListener) -> None:
        """Tell ``listener`` of every step and window from now on."""
        self._listeners.append(listener)

    def report_problem(self, name: str, message: str) -> None:
        """An instrumentation problem (``observe.catalog.INSTRUMENTATION_PROBLEMS``) an entry point
        met, reported once: one line on stderr naming the rank, and the problem series."""
        if self.collector.report_problem(name, message):
            print(f"fsdp-observe: rank {self.rank_env.rank}: {message}", file=sys.stderr, flush=True)

    def set_info(self, **labels: str | None) -> None:
        """Set (or with ``None`` drop) ``fsdp_train_info`` labels, e.g. ``loss_source``."""
        self.collector.set_info(**labels)

    # -- data --------------------------------------------------------------------------------------

    def record_batch(
        self, batch: Any, started: float, ended: float, counts: tuple[Any, Any, Any] | None = None, count: bool = True
    ) -> None:
        """One batch fetched between ``started`` and ``ended`` (``time.perf_counter``) for the
        open step: its data wait and, unless ``count`` is false, its samples and labelled tokens
        (``counts``, else ``observe.training.tensors.count_batch(batch)``)."""
        self._began(started)
        self._data_wait = (self._data_wait or 0.0) + (ended - started)
        if not count:
            return
        samples, tokens, how = count_batch(batch) if counts is None else counts
        if samples is not None:
            self._samples = (self._samples or 0) + samples
        if tokens is not None:
            self.record_tokens(tokens, how or "labels")

    def record_tokens(self, tokens: Any, how: str) -> None:
        """Labelled tokens of the open step (an int or a device tensor) counted by an entry point,
        ``how`` naming the count for ``tokens_source``."""
        if self._batch_tokens is None:
            self._batch_tokens = Accumulator()
        self._batch_tokens.add(tokens)
        self.collector.set_label("tokens_source", how)

    def set_flops_per_token(self, flops: int) -> None:
        """Model FLOPs per token, known to the entry point (no longer worked out from the model)."""
        self.collector.set_flops_per_token(flops)

    def _set_flops_per_token(self, seq_len: int | None) -> None:
        """From the model, once: the same figure on every rank (never from a batch's width)."""
        try:
            self.set_flops_per_token(model_flops_per_token(self._model, seq_len))
        except Exception:  # noqa: BLE001 - an unusual model: FLOPs and MFU stay absent, training goes on
            log.debug("no FLOPs per token for %s", type(self._model).__name__, exc_info=True)

    # -- the open step ---------------------------------------------------------------------------

    def begin_step(self, at: float | None = None) -> None:
        """Mark the open step as started at ``at`` (``time.perf_counter``; default now) unless a
        batch fetched for it started earlier."""
        self._began(time.perf_counter() if at is None else at)

    def _began(self, at: float) -> None:
        """The one place a step begins: its start is the earliest sign of it."""
        if self._step_started is None or at < self._step_started:
            self._step_started = at
        if not self._step_open:
            self._step_open = True
            for listener in self._listeners:
                listener.step_began(self.step_index + 1, at)

    def add_loss(self, value: Any, tokens: Any = None, reduction: str = "mean", how: str | None = None) -> None:
        """A loss of the open step (see ``observe.training.api.Step.loss``); ``how`` names it for
        ``loss_source`` (default: the mean it is, per rank or global, token-weighted or not).

        Raises:
            ValueError: ``reduction`` is neither ``mean`` nor ``sum``.
        """
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        if tokens is None:
            self._loss_sum.add(value)
            self._loss_weight.add(1.0)
            kind = "global_mean" if self.global_loss else "rank_mean"
        else:
            if is_tensor(tokens):
                self._loss_sum.add(value if reduction == "sum" else value * tokens)
                self._loss_weight.add(tokens)
            else:
                self._loss_sum.add(value, 1.0 if reduction == "sum" else float(tokens))
                self._loss_weight.add(float(tokens))
            if self._loss_tokens is None:
                self._loss_tokens = Accumulator()
            self._loss_tokens.add(tokens)
            kind = "global_token_mean" if self.global_loss else "rank_token_mean"
        self.collector.set_label("loss_source", how or kind)

    def set_grad_norm(self, value: Any, how: str = "reported") -> None:
        """The gradient norm of the open step (a number or a tensor, read on log steps); ``how``
        names it for ``grad_norm_source``."""
        self._grad_norm = value.detach() if is_tensor(value) else value
        self.collector.set_label("grad_norm_source", how)

    def record_learning_rate(self, value: Any) -> None:
        """The learning rate the open step uses (a number, or a tensor read on log steps)."""
        self._learning_rate = value

    def read_learning_rate(self, optimizer: Any, args: Any = None, kwargs: Any = None) -> None:
        """An optimizer step pre-hook: record the rate each of its param groups uses in this step,
        one ``fsdp_train_learning_rate`` series per optimizer and group (tensors read on log
        steps); the first optimizer's group 0 is the run's rate (``WindowReport.learning_rate``)."""
        groups = getattr(optimizer, "param_groups", None) or []
        rates = [group.get("lr") if isinstance(group, dict) else None for group in groups]
        if all(value is None for value in rates):  # e.g. a container of optimizers: its parts say
            return
        name = self._optimizer_name(optimizer)
        if name == self._first_optimizer:
            self._learning_rate = rates[0]
        for index, value in enumerate(rates):
            if is_tensor(value):
                self._lr_tensors[(name, str(index))] = value
            elif isinstance(value, (int, float)):
                self.collector.set_learning_rate(name, str(index), float(value))

    def _optimizer_name(self, optimizer: Any) -> str:
        """``AdamW``, then ``AdamW#2`` for a second optimizer of one class, in order of first sight."""
        try:
            name = self._optimizer_names.get(optimizer)
        except TypeError:  # not weak-referable: named by its class alone
            return type(optimizer).__name__
        if name is None:
            cls = type(optimizer).__name__
            self._optimizer_classes[cls] = self._optimizer_classes.get(cls, 0) + 1
            count = self._optimizer_classes[cls]
            name = cls if count == 1 else f"{cls}#{count}"
            self._optimizer_names[optimizer] = name
            if self._first_optimizer is None:
                self._first_optimizer = name
        return name

    def end_step(self, now: float | None = None) -> None:
        """Close the open step: count it, and on a log step close the window."""
        now = time.perf_counter() if now is None else now
        started = self._step_started if self._step_started is not None else now
        if not self._step_open:
            self._began(started)
        if self.phases.current in ("loading_weights", "restarting"):
            self.phases.enter("training")
        tokens = self._batch_tokens if self._batch_tokens is not None else self._loss_tokens
        tokens_host = self._window.add_step(started, now, self._data_wait, tokens, first=self._steps_run == 0)
        self._steps_run += 1
        self.step_index += 1
        seconds = max(0.0, now - started)
        self.goodput.add_step(seconds)
        lr = None if is_tensor(self._learning_rate) else self._learning_rate
        if lr is not None:
            self._shown_learning_rate = lr
        data_wait = self._data_wait
        self.collector.on_step(self.step_index, seconds, data_wait, tokens_host, self._samples, lr)
        self._step_open = False
        self._step_started, self._data_wait, self._samples = None, None, None
        self._batch_tokens, self._loss_tokens = None, None
        for listener in self._listeners:
            listener.step_ended(self.step_index, started, now, data_wait)
        if self.windows_at_log_steps and is_log_step(self.step_index, self.log_every, self.planned_steps or 0):
            self.close_window(now)

    # -- the open window -------------------------------------------------------------------------

    def close_window(self, now: float | None = None) -> WindowReport | None:
        """End the log window at the current step: read the device values (one transfer), and with
        ``global_loss`` all-reduce them; ``None`` when the window holds no step. ``end_step``
        calls it on log steps."""
        window = self._window
        if not window.steps:
            return None
        now = time.perf_counter() if now is None else now
        lr_tensor = self._learning_rate if is_tensor(self._learning_rate) else None
        loss_sum, loss_weight, device_tokens, grad_norm, lr = read_all(
            [self._loss_sum, self._loss_weight, window.device_tokens, self._grad_norm, lr_tensor]
        )
        stats, extra = window.stats(now, device_tokens)
        if extra:
            self.collector.add_labelled_tokens(extra)
        has_loss = not (self._loss_sum.empty and self._loss_weight.empty)
        global_tps = None
        if self.global_loss:
            on = self._device
            if on is None and self._loss_sum.device is not None:
                on = self._loss_sum.device.device
            loss_sum, loss_weight, global_tps = device.all_reduce_sum(
                [loss_sum or 0.0, loss_weight or 0.0, stats.tokens_per_second or 0.0], on
            )
        loss = (loss_sum or 0.0) / loss_weight if has_loss and loss_weight else None
        if lr is not None:
            self._shown_learning_rate = lr
        if self._lr_tensors:
            keys = list(self._lr_tensors)
            for key, value in zip(keys, read_all([self._lr_tensors[k] for k in keys]), strict=True):
                if value is not None:
                    self.collector.set_learning_rate(*key, value)
        if loss is not None:
            self._shown_loss = loss
        if grad_norm is not None:
            self._shown_grad_norm = grad_norm
        memory = device.cuda_memory() if self._cuda else None
        self.collector.on_window(stats, self._shown_loss, self._shown_grad_norm, global_tps, memory, lr)
        window.restart(now)
        self._loss_sum.reset()
        self._loss_weight.reset()
        report = WindowReport(self.step_index, stats, loss, grad_norm, global_tps, self._shown_learning_rate)
        for listener in self._listeners:
            listener.window_closed(report)
        # rank 0's progress to Kubeflow Trainer's TrainJob status, when its variables are set
        progress.window_closed(self.rank_env.rank, report, self.planned_steps, self.collector.mfu)
        if self.on_window is not None:
            self.on_window(report)
        return report

    def record_window(
        self,
        loss: float | None = None,
        grad_norm: float | None = None,
        learning_rate: float | None = None,
        tokens: int | None = None,
        tokens_source: str | None = None,
    ) -> None:
        """Close the window with figures a framework already reduced (Hugging Face's ``on_log``):
        they replace what was accumulated; ``tokens`` this rank processed in the window are
        counted (``tokens_source`` names how)."""
        if tokens is not None:
            self.collector.add_labelled_tokens(tokens)
            self._window.add_tokens(tokens)
            if tokens_source:
                self.collector.set_label("tokens_source", tokens_source)
        self._loss_sum.reset()
        self._loss_weight.reset()
        if grad_norm is not None:
            self._grad_norm = grad_norm
        if learning_rate is not None:
            self._learning_rate = learning_rate
        if loss is not None:
            self._loss_sum.add(loss)
            self._loss_weight.add(1.0)
        if self.close_window() is None:  # no step since the last window: update the figures alone
            self._loss_sum.reset()
            self._loss_weight.reset()
            if loss is not None:
                self._shown_loss = loss
            if grad_norm is not None:
                self._shown_grad_norm = grad_norm
            self.collector.on_figures(loss, grad_norm)

    # -- phases, checkpoints, validation, the end ---------------------------------------------------

    def enter_phase(self, name: str) -> None:
        """Switch to phase ``name`` now (for entry points that see only the phase's start).

        Raises:
            ValueError: an unknown phase (``observe.catalog.TRAIN_PHASES``).
        """
        self.phases.enter(name)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Spend the block in phase ``name``, then go back (``observe.training.api.TrainingMetrics.phase``)."""
        before = self.phases.current
        self.phases.enter(name)
        started = time.perf_counter()
        self._checkpoint_recorded = False
        try:
            yield
        finally:
            if name == "checkpointing" and not self._checkpoint_recorded:
                self.checkpoint_saved(seconds=time.perf_counter() - started)
            self.phases.enter(before if before != name else "training")
            self._step_started = None  # the phase's time belongs to no step

    def checkpoint_saved(self, seconds: float, step: int | None = None, saved_at: float | None = None) -> None:
        """A checkpoint save of ``step`` (default: the current step) that took ``seconds``."""
        self.collector.on_checkpoint_saved(
            self.step_index if step is None else step, seconds, time.time() if saved_at is None else saved_at
        )
        self._checkpoint_recorded = True

    def checkpoint_loaded(
        self,
        step: int,
        seconds: float,
        saved_at: float,
        run_started: float | None = None,
        productive_seconds: float | None = None,
    ) -> None:
        """Resumed from the checkpoint of ``step``: steps continue from there; goodput continues
        from the run's first start and the productive time banked with it."""
        self.collector.on_checkpoint_loaded(step, seconds, saved_at)
        self.step_index = step
        if run_started is not None:
            self.goodput.run_started = run_started
        if productive_seconds is not None:
            self.goodput.productive_seconds = productive_seconds

    def track_checkpoints(self) -> None:
        """The entry point sees every checkpoint: export their histograms from now on, empty until
        the first one."""
        self.collector.track_checkpoints()

    def validation(self, loss: Any, perplexity: float | None = None) -> None:
        """An evaluation: its loss (a number or tensor, read now) and perplexity (default
        ``exp(loss)``; ``inf`` when that overflows)."""
        (value,) = read_all([loss])
        assert value is not None
        if perplexity is None:
            try:
                perplexity = math.exp(value)
            except OverflowError:
                perplexity = math.inf
        self.collector.on_validation(value, perplexity)

    def training_ended(self) -> None:
        """A framework's training loop ended (for callbacks): close the last window and enter
        ``finished``; then close the rank's endpoint now (lingering), unless zero-code
        instrumentation is on in this process, which closes it at exit, after anything the
        script does next."""
        self.close_window()
        self.enter_phase("finished")
        if not session.hooks_installed and self._on_ended is not None:
            self._on_ended()
