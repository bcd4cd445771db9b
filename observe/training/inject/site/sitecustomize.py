"""fsdp-observe's ``sitecustomize``: ``fsdp-observe run`` puts this folder first on ``PYTHONPATH``.

It starts the injector (``observe.training.inject.bootstrap``; a no-op when the installed
``.pth`` already did) and then runs the ``sitecustomize`` it shadows, the next one on
``sys.path`` (Debian's, a virtualenv's, the user's own), so that one still applies. A failure is
one line on stderr, never an exception at interpreter start-up. This folder holds nothing else,
so it shadows no other module.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _start() -> None:
    try:
        from observe.training.inject import bootstrap
    except ImportError as exc:
        print(
            f"fsdp-observe: not instrumenting {sys.executable}: fsdp-observe is not installed for it ({exc})",
            file=sys.stderr,
            flush=True,
        )
        return
    bootstrap.start()


def _chain() -> None:
    """Execute the next ``sitecustomize`` on ``sys.path`` as the module ``sitecustomize``."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _start()
except Exception as exc:  # noqa: BLE001 - never break interpreter start-up
    print(f"fsdp-observe: instrumentation not started: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
_chain()
