"""Grafana value mappings from an XID code to its meaning and NVIDIA's recommended action.

Generated from the catalogue (``observe.xid``), so the XID tables of the dashboards say what the
alerts and the runbook say.
"""

from __future__ import annotations

from typing import Any

from observe import xid

#: XID table columns the value mappings fill in: the code's meaning and the recommended action.
XID_MEANING, XID_ACTION = "meaning", "action"


def xid_mappings(column: str) -> list[dict[str, Any]]:
    """Value mappings from an XID code to its name (``meaning``) or action (``action``), with a
    fallback for codes outside the catalogue."""

    def text(info: xid.XidInfo) -> str:
        return info.name if column == XID_MEANING else info.action

    unknown = xid.lookup(-1)
    return [
        {
            "type": "value",
            "options": {
                str(code): {"text": text(info), "index": i}
                for i, (code, info) in enumerate(sorted(xid.CATALOGUE.items()))
            },
        },
        {"type": "regex", "options": {"pattern": ".*", "result": {"text": text(unknown), "index": len(xid.CATALOGUE)}}},
    ]
