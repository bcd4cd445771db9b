"""A Hugging Face ``TrainerCallback`` that feeds fsdp-observe's per-step series.

    from observe.training.hf import FsdpObserveCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[FsdpObserveCallback()])

or no code at all: under ``fsdp-observe run`` (or with ``FSDP_OBSERVE_INSTRUMENT=1`` and the
package installed) the injector appends this callback to every ``Trainer``.

What it reads, on every rank (Hugging Face calls callbacks on every process):

- ``on_train_begin``: ``state.max_steps`` (planned steps), the model (FLOPs per token, from its
  context length), and it serves the rank's endpoint;
- ``on_step_end``: one optimizer step (``state.global_step``) and its wall time, measured from
  the previous step's end, so it includes the data fetch; and the phase that follows:
  ``validating`` when ``control.should_evaluate``, then ``checkpointing`` when
  ``control.should_save`` (``DefaultFlowCallback`` set them just before this callback runs);
- ``on_optimizer_step``: the learning rate of the step (before the scheduler moves it);
- ``on_log`` (at ``logging_steps``): ``loss``, ``grad_norm``, ``learning_rate``
  (``num_input_tokens_seen`` is not read: the batches give this rank's labelled tokens). Hugging
  Face's logged ``loss`` is the mean over ranks of each rank's mean micro-batch loss since the
  last log, **not token-weighted** (``loss_source="hf_logged"``); the same value on every rank.
- ``on_evaluate``: ``eval_loss`` as the validation loss (Hugging Face's mean over evaluation
  batches); ``on_save``: the checkpoint's time, since the phase began.

The data wait, samples and labelled tokens come from the DataLoader's batches
(``observe.training.dataloader``: the injector's hook, or, with this callback added by hand, the
same patch made in ``on_train_begin``), exactly (``tokens_source="labels"``); Hugging Face fetches
one batch ahead, so mid-run counts lead by a micro-batch. Batches fetched while evaluating or
saving are not counted.
"""

from __future__ import annotations

import time
from typing import Any

from transformers import TrainerCallback

from observe.training import dataloader, progress, session
from observe.training.api import TrainingMetrics
from observe.training.rankenv import LOG_EVERY_ENV, log_every_setting
from observe.training.recorder import StepRecorder

__all__ = ["FsdpObserveCallback"]


class FsdpObserveCallback(TrainerCallback):
    """Feeds the rank's ``TrainingMetrics`` (``instrumentation="hf"``) from Trainer events,
    through its ``recorder``.

    Args:
        **metrics_kwargs: passed to ``TrainingMetrics`` (``port_base``, ``run_id``, ``info`` ...).
    """

    def __init__(self, **metrics_kwargs: Any) -> None:
        self.metrics_kwargs = metrics_kwargs
        self.metrics: TrainingMetrics | None = None
        self._recorder: StepRecorder | None = None  # the metrics' recorder, which these events drive
        self._last_event = time.perf_counter()
        self._phase_started: float | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Serve the rank's endpoint; planned steps from ``state.max_steps``."""
        current = session.current()
        if current is not None and current.recorder.instrumentation == "hf" and not current.closed:
            self.metrics = current
        else:
            self.metrics = TrainingMetrics(
                planned_steps=state.max_steps or None,
                model=model,
                log_every=_log_every(args, state),
                instrumentation="hf",
                **self.metrics_kwargs,
            )
        self._recorder = r = self.metrics.recorder
        r.windows_at_log_steps = False  # windows end at on_log, as Hugging Face's do
        if not session.hooks_installed:  # added by hand: time the DataLoader and count its batches here
            import torch

            dataloader.install(torch, self._on_batch)
        wanted, _ = log_every_setting()
        if wanted is not None and wanted != _log_every(args, state):
            r.report_problem(
                "setting_ignored",
                f"{LOG_EVERY_ENV}={wanted} is not used: Hugging Face's windows close at its logging_steps "
                f"({_log_every(args, state)}); set TrainingArguments(logging_steps={wanted}) instead",
            )
        r.step_index = int(state.global_step or 0)
        if "kubeflow" in (getattr(args, "report_to", None) or []):  # transformers adds it when Trainer's URL is set
            progress.leave_to(
                "transformers' KubeflowCallback (DISABLE_KUBEFLOW_INTEGRATION=TRUE hands it to fsdp-observe)",
                r.rank_env.rank,
            )
        self._last_event = time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A step starts; without the injector, the gap since the last event is its data wait."""
        r = self._recorder
        if r is None:
            return
        if dataloader.installed():  # the DataLoader's batches time the data wait themselves
            r.begin_step(self._last_event)
        else:
            r.record_batch(None, self._last_event, time.perf_counter(), count=False)

    def _on_batch(self, batch: Any, started: float, ended: float) -> None:
        """A DataLoader batch (without the injector): its wait, samples and labelled tokens."""
        r = self._recorder
        if r is not None and dataloader.is_training_batch(r.phases.current):
            r.record_batch(batch, started, ended)

    def on_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kwargs: Any) -> None:
        """The learning rate this step used."""
        r = self._recorder
        if r is not None and optimizer is not None:
            r.read_learning_rate(optimizer)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """One optimizer step done; enter the phase Hugging Face does next."""
        r = self._recorder
        if r is None:
            return
        now = time.perf_counter()
        r.end_step(now)
        self._last_event = now
        if control.should_evaluate:
            self._enter(r, "validating")
        elif control.should_save:
            self._enter(r, "checkpointing")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """A training log: the window's loss, gradient norm, learning rate."""
        r = self._recorder
        self._last_event = time.perf_counter()
        if r is None or not logs or "loss" not in logs:
            return
        r.set_info(loss_source="hf_logged")
        if logs.get("grad_norm") is not None:
            r.set_info(grad_norm_source="hf_logged")
        r.record_window(
            loss=float(logs["loss"]),
            grad_norm=_float(logs.get("grad_norm")),
            learning_rate=_float(logs.get("learning_rate")),
        )

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        """The validation loss; then checkpointing if a save follows, else back to training."""
        r = self._recorder
        if r is None:
            return
        if metrics and metrics.get("eval_loss") is not None:
            r.validation(float(metrics["eval_loss"]))
        if control.should_save:
            self._enter(r, "checkpointing")
        else:
            self._enter(r, "training")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A checkpoint was written: its time since the checkpointing phase began."""
        r = self._recorder
        if r is None:
            return
        now = time.perf_counter()
        if r.phases.current == "checkpointing" and self._phase_started is not None:
            r.checkpoint_saved(now - self._phase_started, step=int(state.global_step))
        self._enter(r, "training")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Close the last window and enter ``finished``; the endpoint lingers until the process
        ends (under the injector) or for ``linger_seconds`` now (explicit use)."""
        r = self._recorder
        if r is not None:
            r.training_ended()

    def _enter(self, r: StepRecorder, phase: str) -> None:
        if r.phases.current != phase:
            r.enter_phase(phase)
        self._phase_started = time.perf_counter()
        self._last_event = self._phase_started


def _log_every(args: Any, state: Any) -> int:
    """Hugging Face's ``logging_steps`` as a step count (a float below 1 is a share of max_steps)."""
    steps = getattr(args, "logging_steps", 500) or 500
    if isinstance(steps, float) and steps < 1:
        return max(1, int(steps * (state.max_steps or 0)))
    return max(1, int(steps))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
