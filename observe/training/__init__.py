"""The training-metrics core: every per-step training number, for any FSDP run.

``TrainingMetrics`` (``api``) is the public API, the user's surface. Its ``StepRecorder``
(``recorder``) is the protocol that every entry point drives: a user's loop (through the API),
the reference trainer, the Hugging Face callback (``hf``), the Lightning callback
(``lightning``) and zero-code injection (``inject``, ``fsdp-observe run``); ``session`` holds the
process's one ``TrainingMetrics``. Beneath them: ``collector`` (``TrainingCollector``) turns
host-side state into ``fsdp_train_*`` series at scrape time; ``window`` (log windows),
``phases`` (phases and goodput), ``flops`` (FLOPs per token, peak FLOP/s, MFU), ``histogram``,
``tensors`` (device values read on log steps only), ``device`` (the window's all-reduce, CUDA
memory), ``rankenv`` (labels from torchrun's environment) and ``server`` (the per-rank endpoint
and its port rule).

Torch-free at import. Nothing here imports the top-level ``trainer`` package: a user's own
``trainer.py`` may shadow it. The exports load on first use (PEP 562), so the injector's
start-up hook, which lives in this package, imports nothing but the standard library into
every Python process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from observe.training.api import Step, TrainingMetrics, WindowReport

__all__ = ["Step", "TrainingMetrics", "WindowReport"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from observe.training import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
