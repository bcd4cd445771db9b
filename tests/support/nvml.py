"""Helpers for tests that run the agent's sampler against the fake NVML library (a GPU stand-in)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from observe.agent.exposition import render
from observe.agent.sampler import Sampler, Settings
from observe.model import NodeSnapshot


@contextmanager
def running_sampler(tmp_path: Path, **settings) -> Iterator[Sampler]:
    """A started sampler on the real /proc whose kernel log does not exist (NVML XID events on)."""
    sampler = Sampler(Settings(node="gpu-node", kmsg=str(tmp_path / "no-kmsg"), **settings))
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()


def series(snapshot: NodeSnapshot, process_series: int = 20) -> dict[tuple[str, tuple], float]:
    """``/metrics`` of ``snapshot`` parsed back: (sample name, sorted label items) -> value."""
    text = render(snapshot, process_series).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def names_for_gpu(parsed: dict[tuple[str, tuple], float], gpu: int) -> set[str]:
    """Sample names that carry ``gpu="<gpu>"``."""
    return {name for name, labels in parsed if ("gpu", str(gpu)) in labels}


def value(parsed: dict[tuple[str, tuple], float], name: str, **labels: str) -> float | None:
    """The one sample called ``name`` whose labels include ``labels`` (``None`` if absent)."""
    hits = [v for (n, items), v in parsed.items() if n == name and set(labels.items()) <= set(items)]
    assert len(hits) <= 1, f"{len(hits)} samples of {name} {labels}"
    return hits[0] if hits else None
