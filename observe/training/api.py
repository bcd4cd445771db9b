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

This class is the user's surface: it builds the rank (collector, recorder, endpoint, session) and
hands each call to its ``StepRecorder`` (``observe.training.recorder``), the protocol that the
other entry points (our trainer, the Hugging Face and Lightning callbacks, the zero-code hooks)
drive through ``TrainingMetrics.recorder``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from observe import catalog as c
from observe.errors import PortInUseError
from observe.training import hangwatch, session
from observe.training.collector import TrainingCollector
from observe.training.flops import model_class_name, peak_flops, unwrap
from observe.training.forensics import RankForensics
from observe.training.phases import Goodput, PhaseClock, process_start_time
from observe.training.rankenv import (
    DEFAULT_LINGER_SECONDS,
    DEFAULT_LOG_EVERY,
    LINGER_ENV,
    RankEnv,
    bind_address,
    cuda_identity,
    env_float,
    log_every_setting,
    port_base,
    rank_labels,
    read_rank_env,
    resolve_run_id,
)
from observe.training.recorder import StepRecorder
from observe.training.server import Served, rank_port, serve
from observe.training.window import WindowReport

log = logging.getLogger("observe.training")

__all__ = ["Step", "TrainingMetrics", "WindowReport"]


class Step:
    """One optimizer step of a ``TrainingMetrics`` (``with metrics.step() as step:``).

    The step ends when the block exits without an exception; a block that raises is not counted.
    """

    def __init__(self, recorder: StepRecorder) -> None:
        self._recorder = recorder

    def __enter__(self) -> Step:
        self._recorder.begin_step()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self._recorder.end_step()

    def loss(self, value: Any, tokens: Any = None, reduction: str = "mean") -> None:
        """Add a loss of this step (call once per micro-batch, or once per step).

        Args:
            value: a number or a one-element tensor (a device tensor is not read now).
            tokens: tokens ``value`` is computed over (an int or a device tensor); the window's
                loss is then token-weighted. Without it, every call weighs the same.
            reduction: ``mean`` (``value`` is a mean over ``tokens``) or ``sum`` (a sum over them).

        Raises:
            ValueError: another ``reduction``.
        """
        self._recorder.add_loss(value, tokens, reduction)

    def grad_norm(self, value: Any) -> None:
        """The gradient norm of this step (e.g. what ``clip_grad_norm_`` returned); read on log steps."""
        self._recorder.set_grad_norm(value)


class TrainingMetrics:
    """Per-rank ``fsdp_train_*`` series for a training loop, served over HTTP.

    Args:
        planned_steps: the step the run ends at (progress, ETA, the last log window); ``None``
            when unknown.
        model: the model (for ``fsdp_train_model_flops_per_token`` and MFU, and the ``model``
            label); ``None`` leaves them absent.
        seq_len: tokens per sequence for FLOPs per token (default: the model's context length,
            ``max_position_embeddings``; never a batch's width, so every rank exports one figure).
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

    Attributes:
        recorder: the rank's ``StepRecorder``: the protocol the other entry points drive (our
            trainer, the callbacks, the zero-code hooks). A loop of your own needs none of it.

    Raises:
        ValueError: an unknown ``instrumentation``.
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
        env = read_rank_env()
        self._rank = env.rank
        # the linger at close: a fixed time when given (argument or FSDP_OBSERVE_LINGER_SECONDS),
        # else until every recent scraper scraped once more, at most DEFAULT_LINGER_SECONDS
        self._linger_until_scraped = linger_seconds is None and os.environ.get(LINGER_ENV) is None
        self._linger_seconds = (
            env_float(LINGER_ENV, DEFAULT_LINGER_SECONDS) if linger_seconds is None else linger_seconds
        )
        gpu_uuid, device_name = cuda_identity(env.local_rank)
        facts = _facts(env, instrumentation, "cuda" if gpu_uuid or device_name else "cpu", model, info)
        started = process_start_time()
        phases = PhaseClock(
            phase or ("restarting" if env.restarts else "loading_weights"), already=time.time() - started
        )
        goodput = Goodput(run_started=started)
        self._collector = TrainingCollector(
            rank_labels(resolve_run_id(run_id, env), env, gpu_uuid),
            facts,
            planned_steps,
            None,
            peak_flops(device_name),
            export_global=global_loss and env.rank == 0,
            phases=phases,
            goodput=goodput,
            restarts=env.restarts,
            tracks_checkpoints=False,
        )
        if env.no_local_rank:
            self._problem(
                "no_local_rank",
                f"no LOCAL_RANK in the environment: local_rank and the port come from "
                f"the global rank {env.rank}; launch with torchrun for per-node ports",
            )
        from_env, refused = log_every_setting()
        if refused and log_every is None:
            self._problem("setting_ignored", refused)
        self.recorder = StepRecorder(
            self._collector,
            phases,
            goodput,
            env,
            instrumentation,
            log_every=max(1, log_every or from_env or DEFAULT_LOG_EVERY),
            planned_steps=planned_steps,
            global_loss=global_loss,
            device=device,
            model=model,
            seq_len=seq_len,
            cuda=facts["device_type"] == "cuda",
            on_window=on_window,
            on_ended=self.close,
        )
        self._closed = False
        self._linger_outcome: str | None = None
        self._hook = None if optimizer is None else optimizer.register_step_pre_hook(self.recorder.read_learning_rate)
        self._served: Served | None = None
        self._hang: hangwatch.HangWatch | None = None
        made = session.current()
        if made is not None and made.recorder.instrumentation == "auto" and instrumentation != "auto":
            made.close(linger_seconds=0)  # the one zero code made early: free its port for this one
        if serve:
            self._serve(env, port_base, address, port_fallback, port_setting)
        identity = {**self._collector.labels, "world_size": env.world_size, "restarts": env.restarts, "port": self.port}
        self._hang = hangwatch.start(
            identity,
            lambda: phases.current,
            lambda: self.recorder.step_index,
            watchdog=self._served is not None,
            planned_steps=planned_steps,
        )
        if self._hang is not None:
            forensics = self.recorder.forensics = self._hang.forensics
            self.recorder.attach(forensics)
            self._collector.add_families(lambda collector: forensics.families(collector.labels))
        replaced = session.register(self)
        if replaced is not None and replaced is not self and replaced.recorder.instrumentation == "auto":
            replaced.close(linger_seconds=0)

    def _serve(self, env: RankEnv, base: int | None, address: str | None, fallback: bool, setting: str) -> None:
        addr, port = bind_address(address), rank_port(env.local_rank, port_base(base))
        try:
            self._served = serve(self._collector, addr, port, field=setting, debug=self._forensics)
        except PortInUseError:
            if not fallback:
                raise
            self._served = serve(self._collector, addr, 0, field=setting, debug=self._forensics)
            self._problem(
                "port_taken",
                f"port {port} is taken: serving on {addr}:{self._served.port} instead, "
                f"where no PodMonitor looks; set FSDP_OBSERVE_PORT_BASE to a free base",
            )

    def _problem(self, name: str, message: str) -> None:
        """An instrumentation problem, reported once: one line on stderr and the problem series."""
        if self._collector.report_problem(name, message):
            print(f"fsdp-observe: rank {self._rank}: {message}", file=sys.stderr, flush=True)

    def _forensics(self) -> RankForensics | None:
        return None if self._hang is None else self._hang.forensics

    @property
    def port(self) -> int | None:
        """The port this rank serves on (``None`` when not serving)."""
        return None if self._served is None else self._served.port

    # -- the loop ------------------------------------------------------------------------------

    def batches(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield ``iterable``'s batches, timing each ``next()`` as data wait and counting samples
        and labelled tokens (``observe.training.tensors.count_batch``) before the loop moves the
        batch to a device."""
        iterator = iter(iterable)
        forensics = self.recorder.forensics
        while True:
            if forensics is not None:
                forensics.data_started()
            started = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                if forensics is not None:
                    forensics.data_ended(exhausted=True)
                return
            if forensics is not None:
                forensics.data_ended()
            self.recorder.record_batch(batch, started, time.perf_counter())
            yield batch

    def step(self) -> Step:
        """A context manager around one optimizer step (``with metrics.step() as step:``)."""
        return Step(self.recorder)

    def phase(self, name: str) -> AbstractContextManager[None]:
        """Spend the block in phase ``name`` (``validating``, ``checkpointing``, ...), then go back.

        A ``checkpointing`` block that did not call ``checkpoint_saved`` records a save of the
        current step that took the block's time.

        Raises:
            ValueError: an unknown phase (``observe.catalog.TRAIN_PHASES``).
        """
        return self.recorder.phase(name)

    def validation(self, loss: Any, perplexity: float | None = None) -> None:
        """Record an evaluation: its loss (a number or tensor, read now) and perplexity
        (default ``exp(loss)``; ``inf`` when that overflows)."""
        self.recorder.validation(loss, perplexity)

    def checkpoint_saved(self, seconds: float, step: int | None = None, saved_at: float | None = None) -> None:
        """Record a checkpoint save of ``step`` (default: the current step) that took ``seconds``
        and ended at Unix time ``saved_at`` (default now)."""
        self.recorder.checkpoint_saved(seconds, step, saved_at)

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
        self.recorder.checkpoint_loaded(step, seconds, saved_at, run_started, productive_seconds)

    def set_info(self, **labels: str | None) -> None:
        """Set (or with ``None`` drop) ``fsdp_train_info`` labels, e.g. ``loss_source``."""
        self.recorder.set_info(**labels)

    # -- the end -------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """``close`` was called."""
        return self._closed

    @property
    def linger_outcome(self) -> str | None:
        """How the linger at ``close`` ended (``observe.training.server.Served.linger``), ``None``
        when there was none."""
        return self._linger_outcome

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
            self.recorder.close_window()
        except Exception:  # noqa: BLE001 - e.g. a process group already destroyed: keep what we have
            log.debug("last window not read", exc_info=True)
        self.recorder.enter_phase("finished")
        if self._hang is not None:
            self._hang.forensics.end_loop("closed")
            self._hang.stop()
        ended = time.monotonic()
        if self._hook is not None:
            self._hook.remove()
        linger = self._linger_seconds if linger_seconds is None else linger_seconds
        until_scraped = self._linger_until_scraped and linger_seconds is None
        if self._served is not None and linger > 0 and self.recorder.step_index > 0:
            self._linger_outcome = self._served.linger(ended, linger, until_scraped, sleep, on_wait=on_wait)
        if self._served is not None:
            self._served.shutdown()
        session.unregister(self)

    def __enter__(self) -> TrainingMetrics:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _facts(
    env: RankEnv, instrumentation: str, device_type: str, model: Any, info: dict[str, str] | None
) -> dict[str, str]:
    """``fsdp_train_info``'s labels beside the constant ones: the world size, the device type, the
    entry point, the model's name, then the caller's ``info`` (which wins)."""
    facts = {"world_size": str(env.world_size), "device_type": device_type, "instrumentation": instrumentation}
    if model is not None:
        facts["model"] = _model_name(model)
    facts.update(info or {})
    return facts


def _model_name(model: Any) -> str:
    """The ``model`` label: a Hugging Face model's ``name_or_path`` (last path part), else its class."""
    config = getattr(unwrap(model), "config", None)
    name = getattr(config, "_name_or_path", "") or getattr(config, "name_or_path", "")
    return os.path.basename(str(name).rstrip("/")) if name else model_class_name(model)
