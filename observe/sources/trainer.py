"""Trainer ranks from their ``fsdp_train_*`` samples, whether scraped directly or read from Prometheus.

A rank is identified by its ``run_id`` and ``rank`` labels (``observe.catalog.TRAINER_LABELS``);
``node`` and, on CUDA, ``gpu_uuid`` tie it to a node and a GPU of the agents' data.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
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
}
#: Every sample name the TUI reads from a trainer.
SAMPLE_NAMES: frozenset[str] = frozenset({*GAUGES, c.TRAIN_INFO.name, c.TRAIN_PHASE.name})


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


def ranks_from_samples(samples: Iterable[Sample], source: str = "", now: float | None = None) -> list[RankStatus]:
    """One ``RankStatus`` per (``run_id``, ``rank``) found in ``samples``, sorted by run and rank.

    Samples without a ``rank`` label, or with a NaN value, are ignored. The rank's ``phase`` is the
    ``phase`` label of its ``fsdp_train_phase`` series whose value is 1.
    """
    ranks: dict[tuple[str, int], RankStatus] = {}
    for name, labels, value in samples:
        rank = _int(labels.get("rank"))
        if rank is None or (isinstance(value, float) and math.isnan(value)):
            continue
        key = (labels.get("run_id", ""), rank)
        status = ranks.get(key)
        if status is None:
            status = RankStatus(
                rank=rank,
                run_id=key[0],
                node=labels.get("node", ""),
                local_rank=_int(labels.get("local_rank")),
                gpu_uuid=labels.get("gpu_uuid") or None,
                source=source,
                updated_unix=now,
            )
        if name == c.TRAIN_INFO.name:
            status = replace(
                status,
                world_size=_int(labels.get("world_size")),
                model=labels.get("model") or None,
                device_type=labels.get("device_type") or None,
            )
        elif name == c.TRAIN_PHASE.name:
            if value == 1 and labels.get("phase"):
                status = replace(status, phase=labels["phase"])
        elif name in GAUGES:
            gauge: dict[str, Any] = {GAUGES[name]: float(value)}
            status = replace(status, **gauge)
        ranks[key] = status
    return [ranks[k] for k in sorted(ranks)]
