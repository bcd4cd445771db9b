"""``next()`` on every ``torch.utils.data.DataLoader`` iterator, timed: the one patch zero-code
injection (``inject.hooks``) and the Hugging Face callback added by hand (``hf``) share.

Each batch fetched goes to the listener given to ``install`` as ``(batch, started, ended)``
(``time.perf_counter`` seconds); the rank's ``RankForensics`` (``recorder.forensics``) hears when a
fetch starts and ends. Imports no torch: ``install`` is given the imported module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from observe.training import session

#: Phases in which fetched batches are not the training step's (an evaluation loop's, a save's).
NOT_TRAINING = ("validating", "checkpointing", "finished")

_listener: Callable[[Any, float, float], None] | None = None
_torch: Any = None


def install(torch: Any, listener: Callable[[Any, float, float], None]) -> None:
    """Time every DataLoader iterator's ``next()`` from now on and give each batch to ``listener``
    (a second call replaces the listener; the patch is made once)."""
    global _listener, _torch
    first = _torch is None
    _listener, _torch = listener, torch
    if first:
        base = torch.utils.data.dataloader._BaseDataLoaderIter
        base.__next__ = _next_wrapper(base.__next__)


def installed() -> bool:
    """Whether DataLoader fetches are timed in this process."""
    return _torch is not None


def is_training_batch(phase: str) -> bool:
    """Whether a batch fetched now, in ``phase``, is training data: not in an evaluation or save,
    and drawn with gradients on (a loop's own validation under ``torch.no_grad()`` or
    ``torch.inference_mode()`` is not)."""
    return phase not in NOT_TRAINING and (_torch is None or bool(_torch.is_grad_enabled()))


def _forensics() -> Any:
    """The process's ``RankForensics`` (``observe.training.forensics``), or ``None``."""
    m = session.current()
    return None if m is None else m.recorder.forensics


def _next_wrapper(original: Any) -> Any:
    def timed_next(self: Any) -> Any:
        forensics = _forensics()
        if forensics is not None:
            forensics.data_started()
        started = time.perf_counter()
        try:
            batch = original(self)
        except StopIteration:
            if forensics is not None:
                forensics.data_ended(exhausted=True)
            raise
        if forensics is not None:
            forensics.data_ended()
        if _listener is not None:
            _listener(batch, started, time.perf_counter())
        return batch

    timed_next.__name__ = timed_next.__qualname__ = "__next__"
    timed_next.__wrapped__ = original  # type: ignore[attr-defined]
    return timed_next
