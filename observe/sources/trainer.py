"""Trainer ranks from their ``fsdp_train_*`` samples, whether scraped directly or read from Prometheus.

A rank is identified by its ``run_id`` and ``rank`` labels (``observe.catalog.TRAINER_LABELS``);
``node`` and, on CUDA, ``gpu_uuid`` tie it to a node and a GPU of the agents' data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from observe import catalog as c
from observe import promtext
from observe.promtext import Sample
from observe.sources.view import RankStatus

#: Sample name -> ``RankStatus`` field, for the gauges the Run screen shows.
GAUGES: dict[str, str] = {
    c.TRAIN_STEP.name: "step",
    c.TRAIN_PLANNED_STEPS.name: "planned_steps",
    c.TRAIN_LOSS.name: "loss",
    c.TRAIN_TOKENS_PER_SECOND.name: "tokens_per_second",
    c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name: "global_tokens_per_second",
    c.TRAIN_MFU.name: "mfu_ratio",
    c.TRAIN_WINDOW_STEP_SECONDS.name: "window_step_seconds",
    c.TRAIN_WINDOW_DATA_WAIT_RATIO.name: "data_wait_ratio",
    c.TRAIN_LAST_STEP_TIMESTAMP.name: "last_step_unix",
    c.TRAIN_COLLECTIVE_BLOCKED_SECONDS.name: "blocked_seconds",
    c.TRAIN_STALL_THRESHOLD.name: "stall_threshold_seconds",
    c.TRAIN_WINDOW_COMPUTE_SECONDS.name: "window_compute_seconds",
    c.TRAIN_WINDOW_COLLECTIVE_WAIT_SECONDS.name: "window_collective_wait_seconds",
}
#: The hang series read beside the gauges: the rank's state, its collectives per process group, the
#: collective it is blocked in, and its stall flag (``observe.catalog.TRAINER_FORENSICS_METRICS``).
FORENSICS: frozenset[str] = frozenset(
    {
        c.TRAIN_STATE.name,
        c.TRAIN_COLLECTIVES_ENQUEUED.name,
        c.TRAIN_COLLECTIVES_COMPLETED.name,
        c.TRAIN_COLLECTIVE_WAITING.name,
        c.TRAIN_STALLED.name,
    }
)
#: Every sample name the TUI reads from a trainer.
SAMPLE_NAMES: frozenset[str] = frozenset({*GAUGES, *FORENSICS, c.TRAIN_INFO.name, c.TRAIN_PHASE.name})


def parse_exposition(text: str) -> list[Sample]:
    """The samples of a trainer's ``/metrics`` text that the TUI reads (``SAMPLE_NAMES``).

    Raises:
        ValueError: the text is not the Prometheus text format.
    """
    return promtext.parse(text, SAMPLE_NAMES)


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _take(
    fields: dict[str, Any], groups: dict[str, list[int]], name: str, labels: Mapping[str, str], value: float
) -> None:
    """Put one sample of a rank into its ``RankStatus`` fields (``groups``: enqueued and completed
    per process group)."""
    if name in GAUGES:
        fields[GAUGES[name]] = float(value)
    elif name == c.TRAIN_PHASE.name:
        if value == 1 and labels.get("phase"):
            fields["phase"] = labels["phase"]
    elif name == c.TRAIN_STATE.name:
        if value == 1 and labels.get("state"):
            fields["train_state"] = labels["state"]
    elif name == c.TRAIN_INFO.name:
        fields["world_size"] = _int(labels.get("world_size"))
        fields["model"] = labels.get("model") or None
        fields["device_type"] = labels.get("device_type") or None
    elif name == c.TRAIN_COLLECTIVES_ENQUEUED.name:
        groups.setdefault(labels.get("pg", ""), [0, 0])[0] = int(value)
    elif name == c.TRAIN_COLLECTIVES_COMPLETED.name:
        groups.setdefault(labels.get("pg", ""), [0, 0])[1] = int(value)
    elif name == c.TRAIN_COLLECTIVE_WAITING.name:
        fields["waiting"] = (labels.get("pg", ""), labels.get("op", ""), int(value))
    elif name == c.TRAIN_STALLED.name:
        fields["stalled"] = value == 1


def ranks_from_samples(samples: Iterable[Sample], source: str = "", now: float | None = None) -> list[RankStatus]:
    """One ``RankStatus`` per (``run_id``, ``rank``) found in ``samples``, sorted by run and rank.

    Samples without a ``rank`` label, or with a NaN value, are ignored. The rank's ``phase`` is the
    ``phase`` label of its ``fsdp_train_phase`` series whose value is 1, its ``train_state`` the
    ``state`` label of its ``fsdp_train_state`` series whose value is 1. Each rank's fields are
    gathered first and its ``RankStatus`` made once (a ``dataclasses.replace`` per sample cost
    about 9 µs each: some 2 s per refresh at 8,192 ranks of 25 samples).
    """
    ranks: dict[tuple[str, int], tuple[dict[str, Any], dict[str, list[int]]]] = {}
    for name, labels, value in samples:
        rank = _int(labels.get("rank"))
        if rank is None or (isinstance(value, float) and math.isnan(value)):
            continue
        key = (labels.get("run_id", ""), rank)
        entry = ranks.get(key)
        if entry is None:
            entry = ranks[key] = (
                {
                    "rank": rank,
                    "run_id": key[0],
                    "node": labels.get("node", ""),
                    "local_rank": _int(labels.get("local_rank")),
                    "gpu_uuid": labels.get("gpu_uuid") or None,
                    "source": source,
                    "updated_unix": now,
                },
                {},
            )
        _take(entry[0], entry[1], name, labels, value)
    out = []
    for key in sorted(ranks):
        fields, groups = ranks[key]
        if groups:
            fields["collectives"] = tuple((pg, n[0], n[1]) for pg, n in sorted(groups.items()))
        out.append(RankStatus(**fields))
    return out
