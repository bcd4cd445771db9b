"""The injector's start-up hook: standard library only, run in every Python process it reaches.

``start`` does nothing unless ``FSDP_OBSERVE_INSTRUMENT`` is ``1``/``true``/``yes``. Then it
watches imports: when ``torch`` has finished importing it installs ``observe.training.inject.hooks``
(so anything the script sets before ``import torch`` still applies), when
``transformers.trainer`` has, it appends the Hugging Face callback, and when
``torch.distributed.checkpoint.state_dict_saver`` has, it wraps its savers (phase
``checkpointing`` while they run). It binds no port and prints
nothing: the hooks create the rank's endpoint at the first optimizer step, so torchrun's agent,
DataLoader workers (forked or spawned) and compile workers, which never step an optimizer, stay
silent. It is idempotent (the ``.pth`` and the ``sitecustomize`` may both call it; a venv's
``lib64`` link makes site read a ``.pth`` twice).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType

ENV = "FSDP_OBSERVE_INSTRUMENT"  # observe.catalog.INSTRUMENT_ENV (not imported: this module is a leaf)
_ON = ("1", "true", "yes", "on")

_started = False


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether the environment switches instrumentation on."""
    return (os.environ if environ is None else environ).get(ENV, "").strip().lower() in _ON


class _AfterExec(importlib.abc.Loader):
    """Wraps a module's loader to call ``then(module)`` once the module has executed."""

    def __init__(self, inner: importlib.abc.Loader, then: Callable[[ModuleType], None]) -> None:
        self._inner, self._then = inner, then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        module.__loader__ = self._inner  # as if we had never been there
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        _call_quietly(self._then, module)

    def __getattr__(self, name: str) -> object:  # get_resource_reader, is_package, ...
        return getattr(self._inner, name)


class _Watcher(importlib.abc.MetaPathFinder):
    """A ``sys.meta_path`` finder that only wraps the loaders of the modules it watches."""

    def __init__(self, watched: dict[str, Callable[[ModuleType], None]]) -> None:
        self.watched = watched
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        then = self.watched.get(fullname)
        if then is None or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        del self.watched[fullname]
        spec.loader = _AfterExec(spec.loader, then)
        return spec


def _call_quietly(then: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        then(module)
    except Exception as exc:  # noqa: BLE001 - instrumentation must never break the program
        print(
            f"fsdp-observe: instrumentation of {module.__name__} failed, training continues without it: "
            f"{type(exc).__name__}: {exc}".splitlines()[0],
            file=sys.stderr,
            flush=True,
        )


def _after_torch(module: ModuleType) -> None:
    from observe.training.inject import hooks

    hooks.install(module)


def _after_hf_trainer(module: ModuleType) -> None:
    from observe.training.inject import hooks

    hooks.attach_hf(module)


def _after_dcp_saver(module: ModuleType) -> None:
    from observe.training.inject import hooks

    hooks.attach_dcp(module)


def start(environ: dict[str, str] | None = None) -> bool:
    """Install the import watchers if the environment asks; return whether instrumentation is on."""
    global _started
    if not enabled(environ):
        return False
    if _started:
        return True
    _started = True
    watched: dict[str, Callable[[ModuleType], None]] = {}
    for name, then in (
        ("torch", _after_torch),
        ("transformers.trainer", _after_hf_trainer),
        ("torch.distributed.checkpoint.state_dict_saver", _after_dcp_saver),
    ):
        if name in sys.modules:
            _call_quietly(then, sys.modules[name])
        else:
            watched[name] = then
    if watched:
        sys.meta_path.insert(0, _Watcher(watched))
    return True
