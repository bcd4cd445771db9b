"""A CUDA-free probe for host-device synchronisation: a tensor type that counts every read.

On a GPU, ``.item()``, ``float(t)``, ``.tolist()``, ``.cpu()``, ``.numpy()`` and ``bool(t)`` of a
device tensor block the host until the device has caught up. This machine has no GPU, so the
tests and ``benchmarks/own_loop_overhead.py`` stand in a ``SyncProbe``: a ``torch.Tensor``
subclass (``__torch_function__``) that counts those calls and passes its type on to every result
computed from it (sums, stacks, detached copies). Counting reads of values derived from what the
loop handed to the metrics proves which steps would synchronise on a real device.

Where the type cannot follow the value (``backward()`` runs with subclass dispatch off, so what
the injector's backward hook receives is a plain tensor), ``HostReads`` counts the reads of every
tensor while it is active: around a loop that reads nothing itself, what it counts is ours.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

#: ``torch.Tensor`` methods that copy a value to the host.
READS = frozenset({"item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__"})


class SyncProbe(torch.Tensor):
    """A tensor whose host reads (``READS``, and ``.to`` a CPU device) are counted in ``reads``."""

    reads: Counter[str] = Counter()

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in READS or (name == "to" and _to_host(args, kwargs or {})):
            cls.reads[name] += 1
        return super().__torch_function__(func, types, args, kwargs or {})

    @classmethod
    def total(cls) -> int:
        """Reads counted so far."""
        return sum(cls.reads.values())


def _to_host(args: Any, kwargs: dict) -> bool:
    targets = [*args[1:], kwargs.get("device")]
    return any(str(t).startswith("cpu") for t in targets if isinstance(t, (str, torch.device)))


def probe(value: float) -> SyncProbe:
    """A one-element float tensor standing for a value that lives on a device."""
    return torch.tensor(value).as_subclass(SyncProbe)


class HostReads(TorchFunctionMode):
    """While active, counts every host read (``READS``) of any tensor in ``reads``."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = getattr(func, "__name__", "")
        if name in READS or (name == "to" and _to_host(args, kwargs or {})):
            self.reads[name] += 1
        return func(*args, **(kwargs or {}))

    def total(self) -> int:
        """Reads counted so far."""
        return sum(self.reads.values())
