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
    values: dict[str, Any] = {k: (float(v) if k in _FLOAT_FIELDS and type(v) is int else v)
              for k, v in event.items() if k in _XID_FIELDS}
    return XidEvent(**values)


def read_summary(body: bytes | str) -> NodeSnapshot:
    """A summary answer as a stand-in for its ``NodeSnapshot``: what ``node_status`` reads of one
    (node, time, host CPU and memory, GPUs, XID events, the agent's notices), nothing more.

    Raises:
        ValueError: not JSON, another ``schema_version``, or the wrong shape (the messages of
            ``NodeSnapshot.from_json``).
    """
    data = json.loads(body)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise ValueError(f"snapshot schema_version {version!r} is not {SCHEMA_VERSION}; "
                         "upgrade fsdp-observe on the reading side")
    try:
        host = data.get("host") or {}
        agent = data.get("agent") or {}
        host["cpu"], host["memory"] = fields(Fields, host.get("cpu") or {}), fields(Fields, host.get("memory") or {})
        agent["notices"] = tuple(agent.get("notices") or ())
        node = fields(Fields, {
            "node": str(data["node"]), "time_unix": float(data["time_unix"]), "view": data.get("view", "full"),
            "host": fields(Fields, host), "gpus": tuple(fields(_Gpu, g) for g in data.get("gpus") or ()),
            "xid_events": tuple(_xid(e) for e in data.get("xid_events") or ()), "agent": fields(Fields, agent)})
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"snapshot JSON has the wrong shape: {exc!r}") from None
    return cast(NodeSnapshot, node)  # read by attribute like one (``Fields``)
