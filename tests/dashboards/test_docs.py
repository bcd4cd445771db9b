"""docs/dashboards.md is the alerts' runbook: every alert has its section (the runbook_url anchor),
every setting its row with the real default, and the XID class table matches the catalogue."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from observe.cli.dashboards import build_parser
from observe.monitoring import rules
from observe.monitoring.settings import Settings

DOC = (Path(__file__).resolve().parents[2] / "docs" / "dashboards.md").read_text()


def test_every_alert_has_a_runbook_section_its_url_points_at() -> None:
    headings = {re.sub(r"[^a-z0-9-]", "", h.lower()) for h in re.findall(r"^### (.+)$", DOC, re.M)}
    for name in rules.alert_names():
        assert name.lower() in headings, name
        assert f"| {name} |" in DOC, name
    assert Settings().runbook_base_url.endswith("docs/dashboards.md")


def test_every_setting_is_documented_with_its_default() -> None:
    rows = {}
    for names, default in re.findall(r"^\| (`[^|]+`) \| ([^|]*) \|", DOC, re.M):
        fields = re.findall(r"`(\w+)`", names)
        defaults = re.findall(r"`([^`]*)`", default) or [""] * len(fields)
        rows.update(zip(fields, defaults, strict=False))
    for f in dataclasses.fields(Settings):
        assert f.name in rows, f.name
        value = getattr(Settings(), f.name)
        assert rows[f.name] == (f"{value:g}" if isinstance(value, float) else str(value)), f.name


def test_the_xid_class_table_lists_the_catalogue() -> None:
    for severity in ("gpu_reset", "node_reboot", "nvlink_fabric", "application", "informational"):
        row = re.search(rf"^\| `{severity}` \| [^|]+ \| ([0-9, ]+) \|", DOC, re.M)
        assert row, severity
        assert [int(c) for c in row.group(1).split(",")] == rules.codes(severity), severity


def test_every_flag_is_documented() -> None:
    flags = [o for action in build_parser()._actions for o in action.option_strings if o.startswith("--")]
    assert [f for f in flags if f != "--help" and f not in DOC] == []
