"""The injector's hooks into torch, installed once the program has imported torch.

What they capture for any PyTorch loop, without its help:

- **optimizer steps and step time**: ``torch.optim``'s global step hooks
  (``register_optimizer_step_post_hook``). Steps are counted per optimizer and the run's step
  is the highest count, so gradient accumulation (one ``step()`` per several micro-batches),
  several optimizers, and a container optimizer that is itself an ``Optimizer`` (its inner
  optimizers fire too) all count right. An optimizer whose ``__init__`` skips
  ``Optimizer.__init__`` (accelerate's wrapper) fires through the optimizer it wraps.
- **learning rate** of every optimizer's param groups, read in the pre-hook, one series each;
- **data wait, samples and labelled tokens**: ``next()`` on any ``torch.utils.data.DataLoader``
  iterator, timed, its batch counted on the host (``observe.training.tensors.count_batch``); a
  batch drawn with gradients off (the loop's own validation under ``torch.no_grad()`` or
  ``torch.inference_mode()``, from any DataLoader) is not training data and not counted. What
  cannot be told apart: an evaluation drawn with gradients on (a forward with no ``backward()``);
- **loss** (heuristic, ``loss_source="backward_heuristic"``): the one-element tensors passed to
  ``torch.autograd.backward`` (what ``loss.backward()`` calls) during one step, summed on their
  device. Right when the loop scales micro-batch losses by 1/accumulation before ``backward()``
  (Hugging Face, Lightning, most loops); off by the loss scale under fp16 ``GradScaler``;
- **gradient norm** (heuristic, ``grad_norm_source="clip_grad_norm_heuristic"``): the value
  ``torch.nn.utils.clip_grad_norm_`` returned in the step; absent when the loop does not clip;
- **phase**: ``loading_weights`` (or ``restarting``) until the first step, ``training`` after it,
  ``finished`` at exit; **CUDA memory** on log steps (host-side allocator counters).

The endpoint is created once ``torch.distributed.init_process_group`` returns (the process is then
known to be a rank: loading and compiling are visible live), else at the first optimizer step
(``TrainingMetrics``, ``instrumentation="auto"``), so a process that neither joins a group nor
steps never binds; at exit it lingers for a final scrape. When another
entry point drives the steps (the Hugging Face or Lightning callback, a ``TrainingMetrics`` of the
script's own), these hooks feed its recorder only what it asks for (``AutoState.accepts``). None of them reads a
device value: tensors are kept and read on log steps.
"""

from __future__ import annotations

import atexit
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from observe.training import collectives, dataloader, session
from observe.training.tensors import Accumulator, count_batch, is_tensor

if TYPE_CHECKING:
    from observe.training.api import TrainingMetrics
    from observe.training.recorder import StepRecorder

#: What each entry point lets these hooks feed: ``steps`` (step count, time, loss, learning rate),
#: ``data_wait`` (DataLoader wait), ``tokens`` (samples and labelled tokens of the DataLoader's
#: batches: these run one batch ahead of training where a framework prefetches, so Lightning
#: counts the batch it trains on itself), ``grad_norm`` (what ``clip_grad_norm_`` returned).
ACCEPTS: dict[str, frozenset[str]] = {
    "auto": frozenset({"steps", "data_wait", "tokens", "grad_norm"}),
    "hf": frozenset({"data_wait", "tokens"}),
    "lightning": frozenset({"data_wait", "grad_norm"}),
}


class AutoState:
    """Per-process state of the hooks: step counts per optimizer and the open step's values."""

    def __init__(self) -> None:
        self.counts: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self.steps = 0
        self.loss = Accumulator()
        self.grad_norm: Any = None
        #: optimizers stepped before the endpoint existed (their rates are read at the first step)
        self.before_first: list[Any] = []
        self.first_activity: float | None = None
        #: a batch was fetched in the open step (its start begins the step)
        self.batch_seen = False
        #: ``time.perf_counter()`` at the end of the last run step: where a step with no batch begins
        self.last_end: float | None = None
        #: batches fetched before the first step made the endpoint: (counts, started, ended)
        self.pending: list[tuple[Any, float, float]] = []

    def accepts(self, what: str) -> StepRecorder | None:
        """The recorder of the process's ``TrainingMetrics`` if it takes ``what`` from these hooks,
        else ``None``."""
        m = session.current()
        if m is None:
            return None
        r: StepRecorder = m.recorder
        return r if what in ACCEPTS.get(r.instrumentation, frozenset()) else None

    # -- optimizer -----------------------------------------------------------------------------

    def pre_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global step pre-hook: the learning rates of every optimizer's groups (one series each);
        before the endpoint exists (step 1), kept for ``post_step``."""
        r = self.accepts("steps")
        if r is not None:
            r.read_learning_rate(optimizer)
        elif session.current() is None:
            self.before_first.append(optimizer)

    def post_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Global step post-hook: count; when the highest count moves, one run step is done."""
        count = self.counts.get(optimizer, 0) + 1
        self.counts[optimizer] = count
        if count <= self.steps:
            return
        self.steps = count
        m = session.current()
        if m is None:
            m = make_metrics()
        r: StepRecorder = m.recorder
        if "steps" not in ACCEPTS.get(r.instrumentation, frozenset()):
            self._forget_step()
            return
        # A step begins at its first batch; in a loop without a DataLoader, where the last one ended
        # (the first step: at its first backward()).
        begun = self.first_activity if self.batch_seen or self.last_end is None else self.last_end
        if begun is not None:
            r.begin_step(begun)
        if not self.loss.empty:
            r.add_loss(self.loss.device if self.loss.device is not None else self.loss.host, how="backward_heuristic")
        if self.grad_norm is not None:
            r.set_grad_norm(self.grad_norm, "clip_grad_norm_heuristic")
        for stepped in self.before_first:
            r.read_learning_rate(stepped)
        self.before_first.clear()
        self._forget_step()
        r.end_step()
        self.last_end = time.perf_counter()

    def _forget_step(self) -> None:
        self.loss.reset()
        self.grad_norm, self.first_activity, self.batch_seen = None, None, False

    # -- backward, clipping, data ------------------------------------------------------------

    def on_backward(self, tensors: Any) -> None:
        """Sum the one-element floating tensors passed to ``backward`` (no read)."""
        items = tensors if isinstance(tensors, (tuple, list)) else (tensors,)
        for t in items:
            if is_tensor(t) and t.numel() == 1 and t.is_floating_point():
                self.loss.add(t)
        if self.first_activity is None:
            self.first_activity = time.perf_counter()

    def on_clip(self, norm: Any) -> None:
        """Keep what ``clip_grad_norm_`` returned for the open step (or give it to a driver that
        takes grad norms and drives its own steps)."""
        self.grad_norm = norm
        r = self.accepts("grad_norm")
        if r is not None and r.instrumentation != "auto":
            r.set_grad_norm(norm, "clip_grad_norm_heuristic")

    def on_batch(self, batch: Any, started: float, ended: float) -> None:
        """One DataLoader batch: its wait and counts go to the open step, unless it was drawn with
        gradients off (``torch.no_grad()``, ``torch.inference_mode()``): no step trains on that,
        it is an evaluation of the loop's own."""
        r = self.accepts("data_wait")
        if not dataloader.is_training_batch(r.phases.current if r is not None else "training"):
            return
        if self.first_activity is None or started < self.first_activity:
            self.first_activity = started
        self.batch_seen = True
        if r is None:
            if session.current() is None:  # before the first step: counts kept until the endpoint exists
                self.pending.append((count_batch(batch), started, ended))
            return
        r.record_batch(batch, started, ended, count="tokens" in ACCEPTS[r.instrumentation])


STATE = AutoState()


def make_metrics() -> TrainingMetrics:
    """The process's endpoint, created at its first optimizer step (``instrumentation="auto"``),
    given what was fetched before it; closed (lingering) at exit."""
    from observe.training.api import TrainingMetrics

    m = TrainingMetrics(instrumentation="auto")
    for counts, started, ended in STATE.pending:
        m.recorder.record_batch(None, started, ended, counts=counts)
    STATE.pending.clear()
    return m


def _close_at_exit() -> None:
    m = session.current()
    if m is not None:
        m.close()


# -- installation --------------------------------------------------------------------------------


def install(torch: ModuleType) -> None:
    """Install every hook into the imported ``torch`` (idempotent)."""
    if session.hooks_installed:
        return
    session.hooks_installed = True
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    if collectives.enabled():
        collectives.install(torch)  # from the start, so the counts cover the collectives before step 1
    register_optimizer_step_pre_hook(STATE.pre_step)
    register_optimizer_step_post_hook(STATE.post_step)
    _wrap(torch.autograd, "backward", _backward_wrapper)
    clip = _clip_wrapper(torch.nn.utils.clip_grad_norm_)
    torch.nn.utils.clip_grad_norm_ = clip
    torch.nn.utils.clip_grad.clip_grad_norm_ = clip
    dataloader.install(torch, STATE.on_batch)
    _wrap(torch, "save", _checkpoint_wrapper)
    dist = getattr(torch, "distributed", None)
    if dist is not None and callable(getattr(dist, "init_process_group", None)):
        _wrap(dist, "init_process_group", _init_wrapper)
    atexit.register(_close_at_exit)


def _wrap(owner: Any, name: str, make: Callable[[Any], Any]) -> None:
    setattr(owner, name, make(getattr(owner, name)))


def _backward_wrapper(original: Any) -> Any:
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        STATE.on_backward(tensors)
        return original(tensors, *args, **kwargs)

    # Not wrapped in torch.compiler.disable: that imports torch._dynamo (seconds) into every process
    # that imports torch. backward() is called outside compiled regions (dynamo graph-breaks on it).
    backward.__wrapped__ = original  # type: ignore[attr-defined]
    backward.__doc__ = original.__doc__
    return backward


def _clip_wrapper(original: Any) -> Any:
    def clip_grad_norm_(*args: Any, **kwargs: Any) -> Any:
        norm = original(*args, **kwargs)
        STATE.on_clip(norm)
        return norm

    clip_grad_norm_.__wrapped__ = original  # type: ignore[attr-defined]
    clip_grad_norm_.__doc__ = original.__doc__
    return clip_grad_norm_


def _init_wrapper(original: Any) -> Any:
    """``torch.distributed.init_process_group``: once it returns, the process is a rank of a
    run (never a DataLoader worker, a spawned helper or torchrun's agent, none of which calls it),
    so its endpoint is made then, in ``loading_weights``, rather than at the first optimizer step."""

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if session.current() is None:
            make_metrics()
        return result

    init_process_group.__wrapped__ = original  # type: ignore[attr-defined]
    init_process_group.__doc__ = original.__doc__
    return init_process_group


def _checkpoint_wrapper(original: Any) -> Any:
    """A save function (``torch.save``, ``torch.distributed.checkpoint.save``) that puts a zero-code
    rank in phase ``checkpointing`` while it runs after training began: a rank saving while the
    others wait for it in a barrier is pausing them, not hanging them."""

    def save(*args: Any, **kwargs: Any) -> Any:
        m = session.current()
        if m is None or m.recorder.instrumentation != "auto" or m.recorder.phases.current != "training":
            return original(*args, **kwargs)
        with m.recorder.phase("checkpointing"):
            return original(*args, **kwargs)

    save.__name__ = save.__qualname__ = getattr(original, "__name__", "save")
    save.__wrapped__ = original  # type: ignore[attr-defined]
    save.__doc__ = original.__doc__
    return save


def attach_dcp(saver: ModuleType) -> None:
    """Wrap ``torch.distributed.checkpoint.state_dict_saver``'s blocking savers (``save`` and the
    deprecated ``save_state_dict``) before its package re-exports them (``_checkpoint_wrapper``)."""
    for name in ("save", "save_state_dict"):
        if callable(getattr(saver, name, None)):
            _wrap(saver, name, _checkpoint_wrapper)


def attach_hf(trainer_module: ModuleType) -> None:
    """Append the Hugging Face callback to ``transformers.trainer.DEFAULT_CALLBACKS`` (a private
    list every ``Trainer`` starts from); where it is missing, add it in ``Trainer.__init__``; where
    neither exists, do nothing (the torch hooks still count the steps)."""
    from observe.training.hf import FsdpObserveCallback

    defaults = getattr(trainer_module, "DEFAULT_CALLBACKS", None)
    if isinstance(defaults, list):
        if FsdpObserveCallback not in defaults:
            defaults.append(FsdpObserveCallback)
        return
    trainer_cls = getattr(trainer_module, "Trainer", None)
    init = getattr(trainer_cls, "__init__", None)
    if trainer_cls is None or init is None or not hasattr(trainer_cls, "add_callback"):
        return

    def init_with_callback(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.add_callback(FsdpObserveCallback)

    trainer_cls.__init__ = init_with_callback
