"""PyTorch's Flight Recorder, read from inside the rank: per-group status at scrape time, a full dump
once per stall.

Flight Recorder (FR) records every collective that reaches a C++ process group in a ring (2,000
entries by default, ``TORCH_FR_BUFFER_SIZE``; 0 switches it off). In torch 2.13 it is on by default
for gloo, and for NCCL where ``TORCH_NCCL_TRACE_BUFFER_SIZE``/``TORCH_FR_BUFFER_SIZE`` is set. Its
reads are private torch APIs (``torch._C._distributed_c10d._dump_fr_trace_json`` for gloo and the
generic recorder, ``_dump_nccl_trace_json`` on CUDA builds for NCCL): every call here is gated on
the function existing and on the dump's ``version`` being one this module knows (``VERSIONS``), and
any failure makes it return ``None``, so callers fall back to ``observe.training.collectives``,
which uses public APIs only.

Costs measured on this machine kind (torch 2.13, gloo): the status read (``status``, no entries)
0.04–0.12 ms; the full JSON 50–170 ms at 2,000 entries; the pickle with stacks 2.6–3.1 s at 2,000
entries (it symbolises every frame), hence once per stall only.

Dumps are rewritten so ``torchfrtrace`` (``python -m torch.distributed.flight_recorder.fr_trace``)
can read them: on gloo, ``pg_config`` keys the default group by ``""`` with an empty name while its
entries say ``process_group: ["0", "default_pg"]``, and the analyser then fails with
``KeyError: ('0', 0)`` (``gloo_fixup``). Standard library only; torch is taken from ``sys.modules``.
"""

from __future__ import annotations

import json
import logging
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: FR dump format versions this module has read (``"version"`` of the dump). Another version is
#: still read for its ``pg_status`` (a small, stable part) but logged once.
VERSIONS: tuple[str, ...] = ("2.10",)
#: Dump functions, in the order they are tried: gloo's (and the generic recorder's), NCCL's.
JSON_DUMPS: tuple[str, ...] = ("_dump_fr_trace_json", "_dump_nccl_trace_json")
PICKLE_DUMPS: tuple[str, ...] = ("_dump_fr_trace", "_dump_nccl_trace")


@dataclass(frozen=True)
class GroupStatus:
    """One process group's FR status on this rank: the sequence numbers of the last collective
    enqueued, started (``-1`` where the backend does not record starts: gloo) and completed."""

    enqueued: int
    started: int
    completed: int


def _c10d() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return getattr(getattr(torch, "_C", None), "_distributed_c10d", None)


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def status() -> dict[str, GroupStatus] | None:
    """Per-group status from every recorder this torch has, keyed by group name; ``None`` when FR
    is absent, off, or unreadable (the caller falls back to the wrapper's counts)."""
    c10d = _c10d()
    if c10d is None:
        return None
    found: dict[str, GroupStatus] = {}
    for name in JSON_DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = json.loads(dump(False, True))
        except Exception:  # noqa: BLE001 - private API: any failure means "not available"
            log.debug("%s failed", name, exc_info=True)
            continue
        for pg, st in (data.get("pg_status") or {}).items():
            found[str(pg)] = GroupStatus(
                _int(st.get("last_enqueued_collective")),
                _int(st.get("last_started_collective")),
                _int(st.get("last_completed_collective")),
            )
    return found or None


def entries() -> list[dict[str, Any]] | None:
    """Every FR entry (no stacks) of every recorder, oldest first; ``None`` when unavailable.
    50–170 ms at 2,000 entries: for a stall, never per scrape."""
    c10d = _c10d()
    if c10d is None:
        return None
    out: list[dict[str, Any]] = []
    for name in JSON_DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = json.loads(dump(True, False))
        except Exception:  # noqa: BLE001 - private API
            continue
        if str(data.get("version")) not in VERSIONS:
            log.info("Flight Recorder dump version %s is not one this fsdp-observe has read", data.get("version"))
        out.extend(data.get("entries") or [])
    return out if out else None


def gloo_fixup(dump: dict[str, Any]) -> dict[str, Any]:
    """``dump`` with ``pg_config`` keyed the way its entries name their groups (see the module
    docstring); a dump that needs no fix is returned unchanged."""
    config = dump.get("pg_config")
    if not isinstance(config, dict) or "" not in config:
        return dump
    named: dict[str, Any] = {k: v for k, v in config.items() if k != ""}
    for entry in dump.get("entries") or []:
        group = entry.get("process_group") or []
        if group and str(group[0]) not in named:
            base = dict(config[""])
            base["name"] = str(group[0])
            base["desc"] = str(group[1]) if len(group) > 1 else base.get("desc", "")
            named[str(group[0])] = base
    return {**dump, "pg_config": named}


def write_dump(directory: Path, rank: int) -> Path | None:
    """Write this rank's full FR dump with stacks as ``directory/fr-rank<rank>`` (a pickle
    ``torchfrtrace DIR --prefix fr-rank`` reads, fixed with ``gloo_fixup``); ``None`` when FR is
    unavailable. Seconds at 2,000 entries: once per stall."""
    c10d = _c10d()
    if c10d is None:
        return None
    for name in PICKLE_DUMPS:
        dump = getattr(c10d, name, None)
        if dump is None:
            continue
        try:
            data = pickle.loads(dump(True, True, False))
        except Exception:  # noqa: BLE001 - private API
            log.debug("%s failed", name, exc_info=True)
            continue
        if not data.get("entries"):
            continue
        path = directory / f"fr-rank{rank}"
        path.write_bytes(pickle.dumps(gloo_fixup(data)))
        return path
    return None
