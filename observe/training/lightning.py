"""A Lightning ``Callback`` that feeds fsdp-observe's per-step series.

    from observe.training.lightning import FsdpObserveCallback
    trainer = L.Trainer(..., callbacks=[FsdpObserveCallback()])

or no code: the package registers ``callbacks`` below under Lightning's
``lightning.pytorch.callbacks_factory`` entry point, which Lightning calls in every
``Trainer(...)``; it returns this callback only while ``FSDP_OBSERVE_INSTRUMENT=1`` is set, so
installing fsdp-observe changes nothing by itself. (Lightning Fabric has no callback system to
hook into: run it under ``fsdp-observe run``, whose torch hooks see its steps.)

What it reads, on every rank:

- ``on_train_start``: planned steps (``max_steps``, else ``estimated_stepping_batches``), the
  module (FLOPs per token: ``6 * parameters`` unless it
  is a Hugging Face model); it serves the rank's endpoint;
- ``on_train_batch_start``: the batch (samples and labelled tokens, counted on its device and
  read on log steps) and, without the injector, the data wait (the gap since the last batch
  ended, in which Lightning fetched it);
- ``on_before_optimizer_step``: the learning rate; ``on_train_batch_end``: the training step's
  loss (``outputs["loss"]``, already divided by ``accumulate_grad_batches``, so a step's
  micro-batches sum to its mean; ``loss_source="rank_mean"``, this rank's), and one step each
  time ``trainer.global_step`` moves;
- ``on_validation_start/end``: the ``validating`` phase (not during the sanity check), and the
  validation loss when the module logged ``val_loss`` (or ``validation_loss``, ``val/loss``).

The gradient norm is not computed here (that would cost a pass over the gradients); under the
injector, the value ``clip_grad_norm_`` returns when ``gradient_clip_val`` is set is exported.
Checkpoint times are not exported (Lightning offers no hook around the write). Log windows close
every ``FSDP_OBSERVE_LOG_EVERY`` steps (default 10), whatever Lightning's ``log_every_n_steps``:
the loss and tokens/s shown are never older than that.
"""

from __future__ import annotations

import math
import time
from typing import Any

from lightning.pytorch.callbacks import Callback

from observe.training import session
from observe.training.api import TrainingMetrics
from observe.training.inject import bootstrap
from observe.training.recorder import StepRecorder
from observe.training.tensors import Accumulator

__all__ = ["FsdpObserveCallback", "callbacks"]

#: Keys a LightningModule commonly logs its validation loss under (``self.log(key, ...)``).
VALIDATION_LOSS_KEYS = ("val_loss", "validation_loss", "val/loss")


def callbacks() -> list[Callback]:
    """The ``lightning.pytorch.callbacks_factory`` entry point: the callback while
    ``FSDP_OBSERVE_INSTRUMENT`` is on, else nothing."""
    return [FsdpObserveCallback()] if bootstrap.enabled() else []


class FsdpObserveCallback(Callback):
    """Feeds the rank's ``TrainingMetrics`` (``instrumentation="lightning"``) from Lightning hooks,
    through its ``recorder``.

    Args:
        **metrics_kwargs: passed to ``TrainingMetrics`` (``port_base``, ``run_id``, ``info`` ...).
    """

    def __init__(self, **metrics_kwargs: Any) -> None:
        self.metrics_kwargs = metrics_kwargs
        self.metrics: TrainingMetrics | None = None
        self._recorder: StepRecorder | None = None  # the metrics' recorder, which these hooks drive
        self._last_batch_end: float | None = None
        self._step_loss = Accumulator()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Serve the rank's endpoint."""
        planned = (
            trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else trainer.estimated_stepping_batches
        )
        planned = int(planned) if planned is not None and math.isfinite(planned) else None
        self.metrics = TrainingMetrics(
            planned_steps=planned,
            model=pl_module,
            instrumentation="lightning",
            **self.metrics_kwargs,
        )
        self._recorder = self.metrics.recorder
        self._recorder.step_index = int(trainer.global_step)
        self._last_batch_end = time.perf_counter()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """The batch's samples and tokens; without the injector, its data wait."""
        r = self._recorder
        if r is None:
            return
        now = time.perf_counter()
        since = self._last_batch_end if self._last_batch_end is not None else now
        if session.hooks_installed:  # the DataLoader hook times the fetch itself
            r.begin_step(since)
            r.record_batch(batch, now, now)
        else:
            r.record_batch(batch, since, now)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        """The learning rate of this step."""
        if self._recorder is not None:
            self._recorder.read_learning_rate(optimizer)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """The micro-batch's loss; a step when ``global_step`` moved."""
        r = self._recorder
        self._last_batch_end = time.perf_counter()
        if r is None:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._step_loss.add(loss)
        if int(trainer.global_step) > r.step_index:
            if not self._step_loss.empty:
                acc = self._step_loss
                r.add_loss(acc.device if acc.device is not None else acc.host)
                self._step_loss = Accumulator()
            r.end_step(self._last_batch_end)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        """Enter ``validating`` (not for the sanity check before training)."""
        if self._recorder is not None and not trainer.sanity_checking:
            self._recorder.enter_phase("validating")

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """The validation loss the module logged, if any; back to training."""
        r = self._recorder
        if r is None or trainer.sanity_checking:
            return
        for key in VALIDATION_LOSS_KEYS:
            value = trainer.callback_metrics.get(key)
            if value is not None:
                r.validation(value)
                break
        r.enter_phase("training")
        self._last_batch_end = time.perf_counter()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Close the last window and enter ``finished``; explicit use lingers here, the injector
        at exit."""
        if self._recorder is not None:
            self._recorder.training_ended()
