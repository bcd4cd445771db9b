"""What real gloo ranks served while healthy, straggling, hung and holding the GIL
(tests/tui/recorded/forensics, ``python -m tests.tui.record_forensics``), read back for the tests:
a rank's ``/metrics`` text and ``/debug/state`` document, its ``RankStatus`` moved to a test's clock,
and a simulated 8,192-rank hang built from the recorded format.

Times: the recorded texts carry the recording's clock (``meta.json``'s ``recorded_unix``). A test
that shows them at another time moves the one absolute time the TUI reads
(``fsdp_train_last_step_timestamp_seconds``) by the difference, so "no progress for 8 s" stays 8 s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from observe import catalog as c
from observe.promtext import Sample
from observe.sources.trainer import parse_exposition, ranks_from_samples
from observe.sources.view import RankStatus

RECORDED = Path(__file__).resolve().parents[1] / "tui" / "recorded" / "forensics"
MODES = ("healthy", "straggle", "hang", "gil")
_LAST_STEP = re.compile(rf"^({c.TRAIN_LAST_STEP_TIMESTAMP.name}\{{[^}}]*\}}) (\S+)$", re.M)


def meta(mode: str) -> dict:
    """The recording's ``meta.json``: ``recorded_unix``, ``port_base``, ``not_answering``."""
    return json.loads((RECORDED / mode / "meta.json").read_text())


def run_id(mode: str) -> str:
    """The recorded run's ``run_id``."""
    return json.loads((RECORDED / mode / "rank0.state.json").read_text())["run_id"]


def metrics_text(
    mode: str, rank: int, now: float | None = None, node: str | None = None, gpu_uuid: str | None = None
) -> str:
    """Rank ``rank``'s recorded ``/metrics`` text; with ``now``, its last step's time moved as if it
    were recorded at ``now``; with ``node`` (and ``gpu_uuid``), its ``node`` label replaced (and a
    ``gpu_uuid`` label added), to tie it to a recorded agent's node and GPU.

    Raises:
        FileNotFoundError: the rank did not answer in that recording (``meta(mode)["not_answering"]``).
    """
    text = (RECORDED / mode / f"rank{rank}.metrics.txt").read_text()
    if now is not None:
        shift = now - meta(mode)["recorded_unix"]
        text = _LAST_STEP.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + shift!r}", text)
    if node is not None:
        label = f'node="{node}"' + (f',gpu_uuid="{gpu_uuid}"' if gpu_uuid else "")
        text = text.replace('node="vm"', label)
    return text


def state_doc(mode: str, rank: int) -> dict:
    """Rank ``rank``'s recorded ``/debug/state`` document."""
    return json.loads((RECORDED / mode / f"rank{rank}.state.json").read_text())


def render(mode: str, rank: int, page: str, **labels: str) -> Callable[[], bytes]:
    """What rank ``rank`` answers on ``page`` (``/metrics``: at the time of each request, as a live
    rank would; ``/debug/state``: as recorded)."""
    import time

    if page == "/metrics":
        return lambda: metrics_text(mode, rank, time.time(), **labels).encode()
    body = (RECORDED / mode / f"rank{rank}.state.json").read_bytes()
    return lambda: body


def recorded_ranks(mode: str, now: float, url: Callable[[int], str] | None = None, **labels: str) -> list[RankStatus]:
    """The ranks that answered in ``mode``'s recording, read at ``now`` (as if recorded then) the
    way the direct source reads them (``url(rank)``: where it pulled each)."""
    ranks: list[RankStatus] = []
    for rank in (0, 1):
        if not (RECORDED / mode / f"rank{rank}.metrics.txt").exists():
            continue
        source = url(rank) if url else f"http://10.0.0.1:{9500 + rank}/metrics"
        ranks += ranks_from_samples(parse_exposition(metrics_text(mode, rank, now, **labels)), source, now)
    return ranks


def hang_fleet(world: int, culprit: int, now: float, ranks_per_node: int = 8) -> list[RankStatus]:
    """A simulated hang of ``world`` ranks built from the recorded hang's format: every rank serves
    what the recorded waiting rank 0 served (blocked in all_gather_single #73), except ``culprit``,
    which serves what the recorded rank 1 served (it never entered #73); each rank labelled with its
    own rank, local rank, node (``node-0000``, ``ranks_per_node`` ranks each) and world size."""
    templates = {r: parse_exposition(metrics_text("hang", r, now)) for r in (0, 1)}
    samples: list[Sample] = []
    for rank in range(world):
        node = f"node-{rank // ranks_per_node:04d}"
        for name, labels, value in templates[1 if rank == culprit else 0]:
            moved = dict(labels, rank=str(rank), local_rank=str(rank % ranks_per_node), node=node)
            if "world_size" in moved:
                moved["world_size"] = str(world)
            samples.append(Sample(name, moved, value))
    ranks = ranks_from_samples(samples, "", now)
    return [
        replace(r, source=f"http://10.{r.rank // 250 // 250}.{r.rank // 250 % 250}.{r.rank % 250}:9500/metrics")
        for r in ranks
    ]


def fleet_texts(world: int, culprit: int, now: float, ranks_per_node: int = 8) -> list[tuple[str, str]]:
    """``(url, /metrics text)`` of each rank of ``hang_fleet``'s simulated hang, as each rank would
    serve it: the recorded texts with each rank's own labels written in."""
    templates = {r: metrics_text("hang", r, now) for r in (0, 1)}
    out = []
    for rank in range(world):
        text = templates[1 if rank == culprit else 0]
        own = 1 if rank == culprit else 0
        text = (
            text.replace(f'local_rank="{own}"', f'local_rank="{rank % ranks_per_node}"')
            .replace(f',rank="{own}"', f',rank="{rank}"')
            .replace('node="vm"', f'node="node-{rank // ranks_per_node:04d}"')
            .replace('world_size="2"', f'world_size="{world}"')
        )
        out.append((f"http://10.{rank // 62500}.{rank // 250 % 250}.{rank % 250}:9500/metrics", text))
    return out
