"""The fan-in's fast path: a node agent's summary answer read straight from its JSON.

A summary (``/snapshot?view=summary``) is read for every node on every refresh, but only for
``observe.sources.view.node_status``'s figures, XID events and notices. Building the whole
``NodeSnapshot`` first (a dataclass per GPU, per section) was two thirds of the fan-in's CPU per
node; here the decoded JSON objects are read by attribute instead (``Fields``), so ``node_status``
and ``node_figures`` run unchanged on them, and only the XID events become real ``XidEvent``
objects (the Alerts screen keeps them). ``tests/tui/test_summary.py`` checks both paths give equal
figures; ``benchmarks/tui_fanin.py`` measures the refresh.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

import orjson

from observe.model import SCHEMA_VERSION, NodeSnapshot, XidEvent

_XID_FIELDS = frozenset(f.name for f in dataclasses.fields(XidEvent))
_FLOAT_FIELDS = frozenset(f.name for f in dataclasses.fields(XidEvent) if f.type in ("float", "float | None"))


class Fields:
    """A decoded JSON object read by attribute: its dict becomes the instance's ``__dict__``
    (native attribute reads, no copy); a key it lacks reads as the class attribute, ``None``
    unless a subclass says otherwise (the snapshot dataclasses' defaults)."""

    def __getattr__(self, name: str) -> Any:  # only for names neither the object nor its class has
        return None


def fields(kind: type[Fields], data: dict) -> Any:
    """``data`` read by attribute as ``kind``."""
    obj = kind.__new__(kind)
    obj.__dict__ = data
    return obj


class _Gpu(Fields):
    lost = False
    mig_instances = ()


def _xid(event: dict) -> XidEvent:
    values: dict[str, Any] = {
        k: (float(v) if k in _FLOAT_FIELDS and type(v) is int else v) for k, v in event.items() if k in _XID_FIELDS
    }
    return XidEvent(**values)


def loads(body: bytes | str) -> Any:
    """``body`` decoded as JSON: by orjson (about 5x faster than ``json.loads`` on an agent's answer,
    which was a third of the fan-in's CPU), else by ``json.loads`` for what orjson refuses and
    Python's own encoder writes (``NaN``, ``Infinity``) or nests deeper than orjson's 1,024 levels,
    so those answers decode as they did with ``json`` alone. (orjson reads an integer beyond 64
    bits as a float; no field of an agent's answer goes beyond 64 bits: NVML's and /proc's
    counters are 64-bit.)

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``). RecursionError: nested deeper than the
            interpreter's stack.
    """
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def read_summary(body: bytes | str) -> NodeSnapshot:
    """A summary answer as a stand-in for its ``NodeSnapshot``: what ``node_status`` reads of one
    (node, time, host CPU and memory, GPUs, XID events, the agent's notices), nothing more.

    Raises:
        ValueError: not JSON, another ``schema_version``, or the wrong shape (the messages of
            ``NodeSnapshot.from_json``).
    """
    data = loads(body)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"snapshot schema_version {version!r} is not {SCHEMA_VERSION}; upgrade fsdp-observe on the reading side"
        )
    try:
        host = data.get("host") or {}
        agent = data.get("agent") or {}
        host["cpu"], host["memory"] = fields(Fields, host.get("cpu") or {}), fields(Fields, host.get("memory") or {})
        agent["notices"] = tuple(agent.get("notices") or ())
        node = fields(
            Fields,
            {
                "node": str(data["node"]),
                "time_unix": float(data["time_unix"]),
                "view": data.get("view", "full"),
                "host": fields(Fields, host),
                "gpus": tuple(fields(_Gpu, g) for g in data.get("gpus") or ()),
                "xid_events": tuple(_xid(e) for e in data.get("xid_events") or ()),
                "agent": fields(Fields, agent),
            },
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"snapshot JSON has the wrong shape: {exc!r}") from None
    return cast(NodeSnapshot, node)  # read by attribute like one (``Fields``)
