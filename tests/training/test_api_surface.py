"""The user's surface of ``observe.training`` is frozen: a change to it must be deliberate.

Users' loops call these names with these arguments; a rename, a new required argument or a
dropped method breaks them. If a change is meant, update the tables below together with
README.md and docs/own-training.md. The entry-point protocol (``TrainingMetrics.recorder``, a
``StepRecorder``) is not part of this surface.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import observe.training
from observe.training import Step, TrainingMetrics, WindowReport, hf, lightning

REPO = Path(__file__).resolve().parents[2]

EXPORTS = {
    "observe.training": ["Step", "TrainingMetrics", "WindowReport"],
    "observe.training.hf": ["FsdpObserveCallback"],
    "observe.training.lightning": ["FsdpObserveCallback", "callbacks"],
}

TRAINING_METRICS = {
    "__init__": "(self, planned_steps: 'int | None' = None, model: 'Any' = None, *, seq_len: 'int | None' = None, "
    "optimizer: 'Any' = None, log_every: 'int | None' = None, global_loss: 'bool' = False, run_id: 'str | None' = None, "
    "info: 'dict[str, str] | None' = None, port_base: 'int | None' = None, address: 'str | None' = None, "
    "serve: 'bool' = True, port_fallback: 'bool' = True, port_setting: 'str' = 'FSDP_OBSERVE_PORT_BASE', "
    "linger_seconds: 'float | None' = None, phase: 'str | None' = None, device: 'Any' = None, "
    "instrumentation: 'str' = 'api', on_window: 'Callable[[WindowReport], None] | None' = None) -> 'None'",
    "batches": "(self, iterable: 'Iterable[Any]') -> 'Iterator[Any]'",
    "step": "(self) -> 'Step'",
    "phase": "(self, name: 'str') -> 'AbstractContextManager[None]'",
    "validation": "(self, loss: 'Any', perplexity: 'float | None' = None) -> 'None'",
    "checkpoint_saved": "(self, seconds: 'float', step: 'int | None' = None, saved_at: 'float | None' = None) -> 'None'",
    "checkpoint_loaded": "(self, step: 'int', seconds: 'float', saved_at: 'float', run_started: 'float | None' = None, "
    "productive_seconds: 'float | None' = None) -> 'None'",
    "set_info": "(self, **labels: 'str | None') -> 'None'",
    "close": "(self, linger_seconds: 'float | None' = None, sleep: 'Callable[[float], Any]' = <built-in function sleep>, "
    "on_wait: 'Callable[[int], None] | None' = None) -> 'None'",
    "__enter__": "(self) -> 'TrainingMetrics'",
    "__exit__": "(self, *exc: 'Any') -> 'None'",
    "port": "property",
    "closed": "property",
    "linger_outcome": "property",
    "recorder": "attribute",  # the door to the entry-point protocol
}

STEP = {
    "__enter__": "(self) -> 'Step'",
    "__exit__": "(self, exc_type: 'type[BaseException] | None', exc: 'BaseException | None', tb: 'Any') -> 'None'",
    "loss": "(self, value: 'Any', tokens: 'Any' = None, reduction: 'str' = 'mean') -> 'None'",
    "grad_norm": "(self, value: 'Any') -> 'None'",
}

WINDOW_REPORT = ["step", "stats", "loss", "grad_norm", "global_tokens_per_second", "learning_rate"]

#: The callbacks' constructors, and the framework events they react to.
HF_CALLBACK = [
    "__init__(self, **metrics_kwargs: 'Any') -> 'None'",
    "on_evaluate",
    "on_log",
    "on_optimizer_step",
    "on_save",
    "on_step_begin",
    "on_step_end",
    "on_train_begin",
    "on_train_end",
]
LIGHTNING_CALLBACK = [
    "__init__(self, **metrics_kwargs: 'Any') -> 'None'",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_batch_start",
    "on_train_end",
    "on_train_start",
    "on_validation_end",
    "on_validation_start",
]


def surface(cls: type, instance: object | None = None) -> dict[str, str]:
    """Public names a class defines itself: method -> signature, ``property``, ``attribute``."""
    out = {}
    for name, member in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
            continue
        out[name] = "property" if isinstance(member, property) else str(inspect.signature(member))
    for name in vars(instance) if instance is not None else ():
        if not name.startswith("_"):
            out[name] = "attribute"
    return out


def hooks(cls: type) -> list[str]:
    init = f"__init__{inspect.signature(vars(cls)['__init__'])}"
    return [init, *sorted(n for n in vars(cls) if n.startswith("on_"))]


def test_the_exports_are_frozen() -> None:
    assert {m.__name__: sorted(m.__all__) for m in (observe.training, hf, lightning)} == EXPORTS


def test_training_metrics_and_its_step_are_frozen(monkeypatch) -> None:
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value)
    m = TrainingMetrics(serve=False)
    try:
        assert surface(TrainingMetrics, m) == TRAINING_METRICS, "a change to the user's surface must be deliberate"
    finally:
        m.close(linger_seconds=0)
    assert {k: v for k, v in surface(Step).items() if k != "__init__"} == STEP
    assert [f.name for f in dataclasses.fields(WindowReport)] == WINDOW_REPORT


def test_the_callbacks_are_frozen() -> None:
    assert hooks(hf.FsdpObserveCallback) == HF_CALLBACK
    assert hooks(lightning.FsdpObserveCallback) == LIGHTNING_CALLBACK
    assert {n for n in vars(hf.FsdpObserveCallback()) if not n.startswith("_")} == {"metrics", "metrics_kwargs"}


@pytest.mark.parametrize("doc", ["README.md", "docs/own-training.md"])
def test_the_docs_show_only_the_frozen_surface(doc: str) -> None:
    """Every ``metrics.x`` and ``step.x`` in the doc's Python examples is a frozen name."""
    code = "\n".join(re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(), re.S))
    used = set(re.findall(r"\bmetrics\.(\w+)", code)) | {f"step.{n}" for n in re.findall(r"\bstep\.(\w+)", code)}
    assert used, f"no example found in {doc}"
    known = set(TRAINING_METRICS) | {f"step.{n}" for n in STEP}
    assert used <= known, used - known


def test_the_package_says_it_is_typed() -> None:
    """``observe/py.typed`` (PEP 561), shipped as package data, so a user's type checker reads
    these signatures (the wheel's contents: tests/training/test_packaging.py)."""
    import tomllib

    assert (REPO / "observe" / "py.typed").is_file()
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["observe"]
