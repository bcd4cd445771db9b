"""The process's session: its one ``TrainingMetrics``, and whether the injector's torch hooks are in.

Zero-code injection, the Hugging Face and Lightning callbacks and a user's own ``TrainingMetrics``
may all be active in one rank (``fsdp-observe run`` appends the Hugging Face callback, say). They
feed one collector and one endpoint: the first that drives steps registers it here and the
others find it. An explicit ``TrainingMetrics`` or a callback replaces one that injection made
on its own (``instrumentation`` ``auto``). The entry points ask ``hooks_installed`` how to share
the work with the hooks (who times the data wait, who closes the endpoint at the end).
Standard library only; imports nothing of this package, so every module here may import it.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_current: Any = None

#: Set by ``observe.training.inject.hooks.install``: the injector's torch hooks are in place in
#: this process (they time the DataLoader and close the endpoint at exit).
hooks_installed = False


def current() -> Any:
    """The process's ``TrainingMetrics``, or ``None``."""
    return _current


def register(metrics: Any) -> Any:
    """Make ``metrics`` the process's; return the one it replaced (``None`` if none)."""
    global _current
    with _lock:
        previous, _current = _current, metrics
    return previous


def unregister(metrics: Any) -> None:
    """Forget ``metrics`` if it is still the process's (after ``close``)."""
    global _current
    with _lock:
        if _current is metrics:
            _current = None
