"""Host and device numbers without host-device synchronisation, and token counts from batches.

Tensors are duck-typed (anything with ``detach``), so this module imports no torch: a value
given as a device tensor is added on its device (asynchronous, like any other kernel) and read
to the host only when ``read`` is called, on log steps. torch itself is imported only inside
``read_all``, and only when a tensor is actually there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Target value of positions without a label (``torch.nn.functional.cross_entropy``'s default
#: ``ignore_index``, which Hugging Face models and collators use too).
IGNORE_INDEX = -100


def is_tensor(value: Any) -> bool:
    """Whether ``value`` looks like a torch tensor (has ``detach`` and ``shape``)."""
    return hasattr(value, "detach") and hasattr(value, "shape")


def on_host(value: Any) -> bool:
    """Whether a tensor lives in host memory (reading it is no device synchronisation)."""
    device = getattr(value, "device", None)
    return getattr(device, "type", "cpu") == "cpu"


class Accumulator:
    """A sum kept partly on the host (floats) and partly on a device (tensors), read on demand.

    ``add`` never synchronises: a tensor is detached and added to a float64 tensor on its own
    device. ``read_all`` reads several accumulators with one transfer.
    """

    __slots__ = ("host", "device")

    def __init__(self) -> None:
        self.host = 0.0
        self.device: Any = None

    def add(self, value: Any, weight: float = 1.0) -> None:
        """Add ``value * weight``; ``value`` a number or a tensor with one element."""
        if is_tensor(value):
            part = value.detach().double()
            if weight != 1.0:
                part = part * weight
            if self.device is None:  # a copy: ``+=`` later must never write into the caller's tensor
                self.device = part if weight != 1.0 else part.clone()
            else:
                self.device += part
        else:
            self.host += float(value) * weight

    @property
    def empty(self) -> bool:
        """Nothing was added since the last reset."""
        return self.device is None and self.host == 0.0

    def reset(self) -> None:
        """Back to zero (drops the device tensor)."""
        self.host, self.device = 0.0, None


def full(value: Any) -> Any:
    """A DTensor's full value (a collective when its placement is partial); anything else as is."""
    to_full = getattr(value, "full_tensor", None)
    return to_full() if callable(to_full) else value


def read_all(values: list[Any]) -> list[float | None]:
    """Numbers for ``values`` (numbers, tensors, ``Accumulator`` or ``None``), with at most one
    device-to-host transfer for all the tensors among them (per device)."""
    out: list[float | None] = []
    tensors: list[tuple[int, Any]] = []
    for i, v in enumerate(values):
        if isinstance(v, Accumulator):
            out.append(v.host)
            if v.device is not None:
                tensors.append((i, v.device))
        elif v is None:
            out.append(None)
        elif is_tensor(v):
            out.append(0.0)
            tensors.append((i, full(v)))
        else:
            out.append(float(v))
    if tensors:
        import torch  # a tensor was given, so torch is there

        by_device: dict[Any, list[tuple[int, Any]]] = {}
        for i, t in tensors:
            by_device.setdefault(t.device, []).append((i, t))
        for group in by_device.values():
            stacked = torch.stack([t.detach().double().reshape(()) for _, t in group]).tolist()
            for (i, _), number in zip(group, stacked, strict=True):
                out[i] = (out[i] or 0.0) + number
    return out


def _field(batch: Any, name: str) -> Any:
    if isinstance(batch, Mapping):
        return batch.get(name)
    return getattr(batch, name, None)


def count_batch(batch: Any) -> tuple[int | None, Any, str | None]:
    """``(samples, labelled tokens, how)`` of one batch, without synchronising with a device.

    Rules, in order: an object that carries its own int ``labelled_tokens`` (``how`` =
    ``reported``); a mapping or object with ``labels`` or ``targets``: positions not equal to
    ``IGNORE_INDEX`` (``labels``); a tuple or list whose second item is an integer tensor: the
    same on that item; a mapping with only ``input_ids``: every input position
    (``input_ids_heuristic``). Samples are the first dimension of the inputs or labels. The token
    count is an int when the labels are in host memory, else a 0-d device tensor (read later);
    unknown values are ``None``.
    """
    own = getattr(batch, "labelled_tokens", None)
    inputs = _field(batch, "input_ids") if isinstance(batch, Mapping) or hasattr(batch, "input_ids") else None
    labels = None
    if not isinstance(own, int):
        labels = _field(batch, "labels")
        if labels is None:
            labels = _field(batch, "targets")
        if labels is None and isinstance(batch, (tuple, list)) and len(batch) >= 2:
            first, second = batch[0], batch[1]
            if is_tensor(second) and not second.is_floating_point():
                labels = second
            if is_tensor(first):
                inputs = first
    shaped: Any = inputs if is_tensor(inputs) else labels if is_tensor(labels) else None
    samples = int(shaped.shape[0]) if shaped is not None and len(shaped.shape) > 1 else None
    if isinstance(own, int):
        return samples, own, "reported"
    if is_tensor(labels):
        mask: Any = (labels != IGNORE_INDEX).sum()  # type: ignore[union-attr]
        return samples, int(mask) if on_host(labels) else mask, "labels"
    if is_tensor(inputs):
        return samples, int(inputs.numel()), "input_ids_heuristic"  # type: ignore[union-attr]
    return samples, None, None
