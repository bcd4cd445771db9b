"""Helpers for tests of the training-metrics collector: fixed labels, a real-registry scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observe.training.collector import TrainingCollector

LABELS = {"run_id": "r1", "rank": "0", "local_rank": "0", "node": "n1"}
INFO = {
    "model": "tiny",
    "sharding_strategy": "FULL_SHARD",
    "mixed_precision": "bf16",
    "world_size": "2",
    "device_type": "cpu",
    "backend": "gloo",
    "activation_checkpointing": "none",
    "mesh": "2",
}


def make(peak: float | None = None, export_global: bool = True) -> TrainingCollector:
    return TrainingCollector(
        LABELS, INFO, planned_steps=100, flops_per_token=1_000_000, peak_flops=peak, export_global=export_global
    )


def scrape(metrics: TrainingCollector) -> dict[str, dict]:
    """Render through a real registry and parse back: sample name -> {labels tuple: value}."""
    registry = CollectorRegistry()
    registry.register(metrics)
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(samples: dict, name: str, **extra) -> float:
    key = tuple(sorted({**LABELS, **extra}.items()))
    return samples[name][key]
