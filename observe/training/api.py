"""``TrainingMetrics``: the public API that attaches fsdp-observe's per-step series to any loop.

    from observe.training import TrainingMetrics

    metrics = TrainingMetrics(planned_steps=1000, model=model, optimizer=opt)
    for batch in metrics.batches(loader):          # data wait, samples, labelled tokens (host)
        with metrics.step() as step:               # one optimizer step
            loss = model(**batch).loss
            loss.backward()
            step.loss(loss)                        # a device tensor: read on log steps only
            step.grad_norm(clip_grad_norm_(model.parameters(), 1.0))
            opt.step(); opt.zero_grad()
    with metrics.phase("checkpointing"):
        save(...)
    metrics.validation(loss=val_loss)
    metrics.close()                                # lingers for a last scrape

Every rank serves its own series on ``9500 + LOCAL_RANK`` (``observe.training.server``) with the
labels ``run_id``, ``rank``, ``local_rank``, ``node`` (and ``gpu_uuid`` on CUDA) from the torchrun
environment (``observe.training.rankenv``). No collective is ever issued unless
``global_loss=True``: figures are per rank and Prometheus or the TUI sum them. Values given as
device tensors are summed on their device and read, with one transfer, on log steps only
(``observe.training.window.is_log_step``), so other steps add no host-device synchronisation.
The module imports no torch; tensors are duck-typed.

The reference trainer (``trainer/train.py``), the Hugging Face and Lightning callbacks and the
zero-code injector are clients of this same class.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from observe import catalog as c
from observe.errors import PortInUseError
from observe.training import session
from observe.training.collector import DeviceMemory, TrainerMetrics
from observe.training.flops import flops_per_token, peak_flops
from observe.training.phases import Goodput, PhaseClock, process_start_time
from observe.training.rankenv import (
    DEFAULT_LINGER_SECONDS,
    DEFAULT_LOG_EVERY,
    LINGER_ENV,
    LOG_EVERY_ENV,
    RankEnv,
    bind_address,
    cuda_identity,
    env_float,
    env_int,
    port_base,
    read_rank_env,
    resolve_run_id,
)
from observe.training.server import Served, rank_port, serve
from observe.training.tensors import Accumulator, count_batch, is_tensor, read_all, sequence_length
from observe.training.window import WindowStats, is_log_step

log = logging.getLogger("observe.training")

__all__ = ["Step", "TrainingMetrics", "WindowReport"]


@dataclass(frozen=True)
class WindowReport:
    """What a closed log window gave, for a caller's own log line (``on_window``).

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


class Step:
    """One optimizer step of a ``TrainingMetrics`` (``with metrics.step() as step:``).

    The step ends when the block exits without an exception; a block that raises is not counted.
    """

    def __init__(self, metrics: TrainingMetrics) -> None:
        self._metrics = metrics

    def __enter__(self) -> Step:
        self._metrics.begin_step()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self._metrics.end_step()

    def loss(self, value: Any, tokens: Any = None, reduction: str = "mean") -> None:
        """Add a loss of this step (call once per micro-batch, or once per step).

        Args:
            value: a number or a one-element tensor (a device tensor is not read now).
            tokens: tokens ``value`` is computed over (an int or a device tensor); the window's
                loss is then token-weighted. Without it, every call weighs the same.
            reduction: ``mean`` (``value`` is a mean over ``tokens``) or ``sum`` (a sum over them).
        """
        self._metrics.add_loss(value, tokens, reduction)

    def grad_norm(self, value: Any) -> None:
        """The gradient norm of this step (e.g. what ``clip_grad_norm_`` returned); read on log steps."""
        self._metrics.set_grad_norm(value)


class TrainingMetrics:
    """Per-rank ``fsdp_train_*`` series for a training loop, served over HTTP.

    Args:
        planned_steps: the step the run ends at (progress, ETA, the last log window); ``None``
            when unknown.
        model: the model (for ``fsdp_train_model_flops_per_token`` and MFU, and the ``model``
            label); ``None`` leaves them absent.
        seq_len: tokens per sequence for FLOPs per token (default: the first batch's length).
        optimizer: read for the learning rate at each ``optimizer.step()`` (a step pre-hook).
        log_every: steps per log window (default ``FSDP_OBSERVE_LOG_EVERY``, else 10).
        global_loss: on log steps, one all-reduce (every rank must step alike) of the window's
            loss sums and tokens/s, so every rank exports the global token-weighted loss and rank
            0 the global tokens/s. Off by default: no collective at all.
        run_id: the run's id (default ``FSDP_OBSERVE_RUN_ID``, torchrun's ``TORCHELASTIC_RUN_ID``,
            or one shared by the ranks of one launcher).
        info: extra ``fsdp_train_info`` labels (``sharding_strategy``, ``mixed_precision`` ...).
        port_base, address: where to serve (default ``FSDP_OBSERVE_PORT_BASE`` else 9500,
            ``FSDP_OBSERVE_ADDRESS`` else 0.0.0.0); the rank serves on ``port_base + local_rank``.
        serve: serve over HTTP (``False``: keep the accounting only, e.g. ``--metrics off``).
        port_fallback: when the port is taken, log one line and serve on a port the kernel picks,
            exporting ``fsdp_train_instrumentation_problem{problem="port_taken"}`` (default);
            ``False`` raises ``PortInUseError`` instead, naming ``port_setting``.
        port_setting: the setting a bind error names (default ``FSDP_OBSERVE_PORT_BASE``).
        linger_seconds: how long ``close`` keeps serving after the last step (default
            ``FSDP_OBSERVE_LINGER_SECONDS``); without either, until every scraper seen in the last
            20 s (a bit more than the trainer PodMonitor's 15 s interval) has scraped once more, at
            most 20 s (``observe.training.server``).
        phase: the phase the process is in now (default ``loading_weights``, or ``restarting``
            after a torchrun restart); its time is counted from the process start.
        device: device of the window all-reduce (default: that of the loss tensors given).
        instrumentation: the entry point (``observe.catalog.INSTRUMENTATIONS``).
        on_window: called with a ``WindowReport`` after each log window.

    Raises:
        PortInUseError: the port is taken and ``port_fallback`` is ``False``.
        UserError: the port cannot be bound for another reason.
    """

    def __init__(
        self,
        planned_steps: int | None = None,
        model: Any = None,
        *,
        seq_len: int | None = None,
        optimizer: Any = None,
        log_every: int | None = None,
        global_loss: bool = False,
        run_id: str | None = None,
        info: dict[str, str] | None = None,
        port_base: int | None = None,
        address: str | None = None,
        serve: bool = True,
        port_fallback: bool = True,
        port_setting: str = "FSDP_OBSERVE_PORT_BASE",
        linger_seconds: float | None = None,
        phase: str | None = None,
        device: Any = None,
        instrumentation: str = "api",
        on_window: Callable[[WindowReport], None] | None = None,
    ) -> None:
        if instrumentation not in c.INSTRUMENTATIONS:
            raise ValueError(f"unknown instrumentation {instrumentation!r}; known: {', '.join(c.INSTRUMENTATIONS)}")
        self.rank_env: RankEnv = read_rank_env()
        env = self.rank_env
        self.instrumentation = instrumentation
        self.log_every = max(1, log_every or env_int(LOG_EVERY_ENV, DEFAULT_LOG_EVERY))
        self.global_loss = global_loss
        #: The linger at ``close``: a fixed time when given (argument or ``FSDP_OBSERVE_LINGER_SECONDS``),
        #: else until every recent scraper scraped once more, at most ``DEFAULT_LINGER_SECONDS``.
        self.linger_until_scraped = linger_seconds is None and os.environ.get(LINGER_ENV) is None
        self.linger_seconds = (
            env_float(LINGER_ENV, DEFAULT_LINGER_SECONDS) if linger_seconds is None else linger_seconds
        )
        self.run_id = resolve_run_id(run_id, env)
        self.on_window = on_window
        self._device = device
        self._model = model
        self._seq_len = seq_len
        gpu_uuid, device_name = cuda_identity(env.local_rank)
        labels = {"run_id": self.run_id, "rank": str(env.rank), "local_rank": str(env.local_rank), "node": env.node}
        if gpu_uuid:
            labels["gpu_uuid"] = gpu_uuid
        facts = {
            "world_size": str(env.world_size),
            "device_type": "cuda" if gpu_uuid or device_name else "cpu",
            "instrumentation": instrumentation,
        }
        if model is not None:
            facts["model"] = model_name(model)
        facts.update(info or {})
        started = process_start_time()
        self.phases = PhaseClock(
            phase or ("restarting" if env.restarts else "loading_weights"), already=time.time() - started
        )
        self.goodput = Goodput(run_started=started)
        self.collector = TrainerMetrics(
            labels,
            facts,
            planned_steps,
            None,
            peak_flops(device_name),
            export_global=global_loss and env.rank == 0,
            phases=self.phases,
            goodput=self.goodput,
            restarts=env.restarts,
            tracks_checkpoints=False,
        )
        if env.no_local_rank:
            self.problem(
                "no_local_rank",
                f"no LOCAL_RANK in the environment: local_rank and the port come from "
                f"the global rank {env.rank}; launch with torchrun for per-node ports",
            )
        if model is not None and seq_len is not None:
            self._set_flops_per_token(seq_len)
        # the open step and window (host numbers; device parts in Accumulators)
        self.step_index = 0
        self._step_started: float | None = None
        self._data_wait: float | None = None
        self._samples: int | None = None
        self._batch_tokens: Accumulator | None = None
        self._loss_tokens: Accumulator | None = None
        self._window_started: float | None = None
        self._first_step_ended: float | None = None  # the process's first step, until its window closes
        self._window_steps = 0
        self._steps_run = 0  # steps of this process (step_index continues a resumed run's count)
        self._window_data_wait: float | None = None
        self._window_tokens = Accumulator()
        self._window_tokens_known = False
        self._window_tokens_device = Accumulator()  # device part, counted into the total when read
        self._loss_sum = Accumulator()
        self._loss_weight = Accumulator()
        self._grad_norm: Any = None
        self._learning_rate: Any = None
        self._closed = False
        #: How the linger at ``close`` ended (``observe.training.server.Served.linger``), ``None``
        #: when there was none.
        self.linger_outcome: str | None = None
        self._checkpoint_recorded = False
        #: ``end_step`` closes the window on log steps; an entry point whose framework reduces
        #: its own windows (Hugging Face's ``on_log``) turns this off and calls ``record_window``.
        self.windows_at_log_steps = True
        self._hook = None
        if optimizer is not None:
            self._hook = optimizer.register_step_pre_hook(self.read_learning_rate)
        self.served: Served | None = None
        if serve:
            self._serve(port_base, address, port_fallback, port_setting)
        replaced = session.register(self)
        if replaced is not None and replaced is not self and replaced.instrumentation == "auto":
            replaced.close(linger_seconds=0)

    # -- serving ---------------------------------------------------------------------------------

    def _serve(self, base: int | None, address: str | None, fallback: bool, setting: str) -> None:
        addr, port = bind_address(address), rank_port(self.rank_env.local_rank, port_base(base))
        try:
            self.served = serve(self.collector, addr, port, field=setting)
        except PortInUseError:
            if not fallback:
                raise
            self.served = serve(self.collector, addr, 0, field=setting)
            self.problem(
                "port_taken",
                f"port {port} is taken: serving on {addr}:{self.served.port} instead, "
                f"where no PodMonitor looks; set FSDP_OBSERVE_PORT_BASE to a free base",
            )

    @property
    def port(self) -> int | None:
        """The port this rank serves on (``None`` when not serving)."""
        return None if self.served is None else self.served.port

    def problem(self, name: str, message: str) -> None:
        """Report an instrumentation problem once: one log line and the problem series."""
        if name not in self.collector.problems:
            self.collector.problems[name] = message
            print(f"fsdp-observe: rank {self.rank_env.rank}: {message}", file=sys.stderr, flush=True)

    def set_info(self, **labels: str | None) -> None:
        """Set (or with ``None`` drop) ``fsdp_train_info`` labels, e.g. ``loss_source``."""
        info = dict(self.collector.info)
        for key, value in labels.items():
            if value is None:
                info.pop(key, None)
            else:
                info[key] = value
        self.collector.info = info

    # -- data --------------------------------------------------------------------------------------

    def batches(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield ``iterable``'s batches, timing each ``next()`` as data wait and counting samples
        and labelled tokens (``observe.training.tensors.count_batch``) before the loop moves the
        batch to a device."""
        iterator = iter(iterable)
        while True:
            started = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.record_batch(batch, started, time.perf_counter())
            yield batch

    def record_batch(
        self, batch: Any, started: float, ended: float, counts: tuple[Any, Any, Any] | None = None, count: bool = True
    ) -> None:
        """One batch fetched between ``started`` and ``ended`` (``time.perf_counter``) for the
        open step: its data wait and, unless ``count`` is false, its samples and labelled tokens
        (``counts``, else ``count_batch(batch)``). For entry points; ``batches()`` calls it."""
        if self._step_started is None or started < self._step_started:
            self._step_started = started
        self._data_wait = (self._data_wait or 0.0) + (ended - started)
        if not count:
            return
        samples, tokens, how = count_batch(batch) if counts is None else counts
        if samples is not None:
            self._samples = (self._samples or 0) + samples
        if tokens is not None:
            self.record_tokens(tokens, how or "labels")
        if batch is not None and self._model is not None and self.collector.flops_per_token is None:
            length = self._seq_len or sequence_length(batch)
            if length:
                self._set_flops_per_token(length)

    def record_tokens(self, tokens: Any, how: str) -> None:
        """Labelled tokens of the open step (an int or a device tensor) counted by an entry point,
        ``how`` naming the count for ``tokens_source``."""
        if self._batch_tokens is None:
            self._batch_tokens = Accumulator()
        self._batch_tokens.add(tokens)
        if self.collector.info.get("tokens_source") != how:
            self.set_info(tokens_source=how)

    def _set_flops_per_token(self, seq_len: int) -> None:
        try:
            self.collector.flops_per_token = model_flops_per_token(self._model, seq_len)
        except Exception:  # noqa: BLE001 - an unusual model: FLOPs and MFU stay absent, training goes on
            log.debug("no FLOPs per token for %s", type(self._model).__name__, exc_info=True)

    # -- steps ---------------------------------------------------------------------------------

    def step(self) -> Step:
        """A context manager around one optimizer step (``with metrics.step() as step:``)."""
        return Step(self)

    def begin_step(self, at: float | None = None) -> None:
        """Mark the open step as started at ``at`` (``time.perf_counter``; default now) unless a
        batch fetched for it started earlier. For entry points; ``step()`` calls it."""
        at = time.perf_counter() if at is None else at
        if self._step_started is None or at < self._step_started:
            self._step_started = at

    def add_loss(self, value: Any, tokens: Any = None, reduction: str = "mean") -> None:
        """See ``Step.loss``. For entry points."""
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
        if self.collector.info.get("loss_source") != kind:
            self.set_info(loss_source=kind)

    def set_grad_norm(self, value: Any, how: str = "reported") -> None:
        """The gradient norm of the open step (see ``Step.grad_norm``). For entry points."""
        self._grad_norm = value.detach() if is_tensor(value) else value
        if self.collector.info.get("grad_norm_source") != how:
            self.set_info(grad_norm_source=how)

    def record_learning_rate(self, value: Any) -> None:
        """The learning rate the open step uses (a number, or a tensor read on log steps)."""
        self._learning_rate = value

    def read_learning_rate(self, optimizer: Any, args: Any = None, kwargs: Any = None) -> None:
        """An optimizer step pre-hook: record ``param_groups[0]['lr']``, the rate this step uses."""
        groups = getattr(optimizer, "param_groups", None)
        if groups:
            self._learning_rate = groups[0].get("lr")

    def end_step(self, now: float | None = None) -> None:
        """Close the open step: record it, and on a log step close the window. For entry points."""
        now = time.perf_counter() if now is None else now
        started = self._step_started if self._step_started is not None else now
        if self._window_started is None:
            self._window_started = started
        if self.phases.current in ("loading_weights", "restarting"):
            self.phases.enter("training")
        if self._steps_run == 0:
            self._first_step_ended = now
        self._steps_run += 1
        self.step_index += 1
        seconds = max(0.0, now - started)
        self.goodput.add_step(seconds)
        tokens_host: int | None = None
        tokens = self._batch_tokens if self._batch_tokens is not None else self._loss_tokens
        if tokens is not None:
            self._window_tokens_known = True
            if tokens.device is not None:
                self._window_tokens_device.add(tokens.device)
            tokens_host = int(tokens.host)
            self._window_tokens.add(tokens_host)
        if self._data_wait is not None:
            self._window_data_wait = (self._window_data_wait or 0.0) + self._data_wait
        lr = self._learning_rate
        self.collector.on_step(
            self.step_index, seconds, self._data_wait, tokens_host, self._samples, None if is_tensor(lr) else lr
        )
        self._window_steps += 1
        self._step_started, self._data_wait, self._samples = None, None, None
        self._batch_tokens, self._loss_tokens = None, None
        if self.windows_at_log_steps and is_log_step(
            self.step_index, self.log_every, self.collector.planned_steps or 0
        ):
            self.close_window(now)

    def close_window(self, now: float | None = None) -> WindowReport | None:
        """End the log window at the current step: read the device values (one transfer), and with
        ``global_loss`` all-reduce them; ``None`` when the window holds no step. For entry points;
        ``end_step`` calls it on log steps."""
        if not self._window_steps:
            return None
        now = time.perf_counter() if now is None else now
        seconds = now - (self._window_started if self._window_started is not None else now)
        loss_sum, loss_weight, device_tokens, grad_norm, lr = read_all(
            [
                self._loss_sum,
                self._loss_weight,
                self._window_tokens_device,
                self._grad_norm,
                self._learning_rate if is_tensor(self._learning_rate) else None,
            ]
        )
        tokens: int | None = None
        if self._window_tokens_known:
            extra = int(round(device_tokens or 0.0))
            if extra:
                self.collector.add_labelled_tokens(extra)
            tokens = int(self._window_tokens.host) + extra
        stats = WindowStats(self._window_steps, seconds, self._window_data_wait, tokens)
        if self._first_step_ended is not None:  # the window holds the process's first step (warm-up)
            started = self._window_started if self._window_started is not None else self._first_step_ended
            stats = replace(stats, warmup_steps=1, warmup_seconds=max(0.0, self._first_step_ended - started))
            self._first_step_ended = None
        has_loss = not (self._loss_sum.empty and self._loss_weight.empty)
        global_tps = None
        if self.global_loss:
            loss_sum, loss_weight, global_tps = self._all_reduce(
                [loss_sum or 0.0, loss_weight or 0.0, stats.tokens_per_second or 0.0]
            )
        loss = (loss_sum or 0.0) / loss_weight if has_loss and loss_weight else None
        if lr is not None:
            self.collector.learning_rate = lr
        self.collector.on_window(
            stats,
            loss if loss is not None else self.collector.loss,
            grad_norm if grad_norm is not None else self.collector.grad_norm,
            global_tps,
            self._device_memory(),
        )
        self._window_started, self._window_steps, self._window_data_wait = now, 0, None
        self._window_tokens, self._window_tokens_device, self._window_tokens_known = Accumulator(), Accumulator(), False
        self._loss_sum.reset()
        self._loss_weight.reset()
        report = WindowReport(self.step_index, stats, loss, grad_norm, global_tps, self.collector.learning_rate)
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
        counted (``tokens_source`` names how). For entry points."""
        if tokens is not None:
            self.collector.add_labelled_tokens(tokens)
            self._window_tokens.add(tokens)
            self._window_tokens_known = True
            if tokens_source and self.collector.info.get("tokens_source") != tokens_source:
                self.set_info(tokens_source=tokens_source)
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
                self.collector.loss = loss
            if grad_norm is not None:
                self.collector.grad_norm = grad_norm

    def _all_reduce(self, values: list[float]) -> list[float]:
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return values
        device = self._device
        if device is None and self._loss_sum.device is not None:
            device = self._loss_sum.device.device
        totals = torch.tensor(values, dtype=torch.float64, device=device or "cpu")
        dist.all_reduce(totals)
        return [float(v) for v in totals.tolist()]

    def _device_memory(self) -> DeviceMemory | None:
        """The CUDA caching allocator's figures for this rank's device (host-side counters, no
        synchronisation), or ``None`` on CPU."""
        if self.collector.info.get("device_type") != "cuda":
            return None
        torch = sys.modules.get("torch")
        try:
            if torch is None or not torch.cuda.is_initialized():
                return None
            stats = torch.cuda.memory_stats()
        except Exception:  # noqa: BLE001 - a driver problem must not stop training: memory stays absent
            return None
        return DeviceMemory(
            stats.get("allocated_bytes.all.current", 0),
            stats.get("reserved_bytes.all.current", 0),
            stats.get("allocated_bytes.all.peak", 0),
            stats.get("num_alloc_retries", 0),
        )

    # -- phases, checkpoints, validation ------------------------------------------------------------

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Spend the block in phase ``name`` (``validating``, ``checkpointing``, ...), then go back.

        A ``checkpointing`` block that did not call ``checkpoint_saved`` records a save of the
        current step that took the block's time.

        Raises:
            ValueError: an unknown phase (``observe.catalog.TRAIN_PHASES``).
        """
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

    def enter_phase(self, name: str) -> None:
        """Switch to phase ``name`` now (for entry points that see only the phase's start)."""
        self.phases.enter(name)

    def checkpoint_saved(self, seconds: float, step: int | None = None, saved_at: float | None = None) -> None:
        """Record a checkpoint save of ``step`` (default: the current step) that took ``seconds``."""
        self.collector.tracks_checkpoints = True
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
        """Record resuming from the checkpoint of ``step``: steps continue from there; goodput
        continues from the run's first start and the productive time banked with it."""
        self.collector.tracks_checkpoints = True
        self.collector.on_checkpoint_loaded(step, seconds, saved_at)
        self.step_index = step
        if run_started is not None:
            self.goodput.run_started = run_started
        if productive_seconds is not None:
            self.goodput.productive_seconds = productive_seconds

    def validation(self, loss: Any, perplexity: float | None = None) -> None:
        """Record an evaluation: its loss (a number or tensor, read now) and perplexity
        (default ``exp(loss)``; ``inf`` when that overflows)."""
        (value,) = read_all([loss])
        assert value is not None
        if perplexity is None:
            try:
                perplexity = math.exp(value)
            except OverflowError:
                perplexity = math.inf
        self.collector.on_validation(value, perplexity)

    # -- the end -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """``close`` was called."""
        return self._closed

    def training_ended(self) -> None:
        """A framework's training loop ended (for callbacks): close the last window and enter
        ``finished``; then ``close`` now (lingering), unless zero-code instrumentation is on in
        this process, which closes at exit, after anything the script does next."""
        self.close_window()
        self.enter_phase("finished")
        if not session.hooks_installed:
            self.close()

    def close(
        self,
        linger_seconds: float | None = None,
        sleep: Callable[[float], Any] = time.sleep,
        on_wait: Callable[[int], None] | None = None,
    ) -> None:
        """Close the last window, enter ``finished``, keep serving for the final scrapes, then stop
        serving. Idempotent.

        The linger (``observe.training.server.Served.linger``): the constructor's, or a fixed
        ``linger_seconds`` given here. ``sleep`` waits between looks (a true result ends it);
        ``on_wait`` is called with the number of scrapers waited for before a wait.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.close_window()
        except Exception:  # noqa: BLE001 - e.g. a process group already destroyed: keep what we have
            log.debug("last window not read", exc_info=True)
        self.phases.enter("finished")
        ended = time.monotonic()
        if self._hook is not None:
            self._hook.remove()
        linger = self.linger_seconds if linger_seconds is None else linger_seconds
        until_scraped = self.linger_until_scraped and linger_seconds is None
        if self.served is not None and linger > 0 and self.step_index > 0:
            self.linger_outcome = self.served.linger(ended, linger, until_scraped, sleep, on_wait=on_wait)
        if self.served is not None:
            self.served.shutdown()
        session.unregister(self)

    def __enter__(self) -> TrainingMetrics:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def model_name(model: Any) -> str:
    """The ``model`` label: a Hugging Face model's ``name_or_path`` (last path part), else its class."""
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", "") or getattr(config, "name_or_path", "")
    return os.path.basename(str(name).rstrip("/")) if name else type(model).__name__


def model_flops_per_token(model: Any, seq_len: int) -> int:
    """FLOPs per token: the PaLM count for a model with a Hugging Face Llama-style ``config``
    (``observe.training.flops.flops_per_token``), else ``6 * parameters`` (Kaplan et al. 2020)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "num_hidden_layers") and hasattr(model, "get_input_embeddings"):
        return flops_per_token(model, seq_len)
    return 6 * sum(int(p.numel()) for p in model.parameters())
