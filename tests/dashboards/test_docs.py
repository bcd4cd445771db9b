"""docs/dashboards.md is the alerts' runbook: every alert has its section (the runbook_url anchor),
every setting its row with the real default, and the XID class table matches the catalogue."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from observe.cli.dashboards import build_parser
from observe.monitoring import rules
from observe.monitoring.dashboards import dashboards
from observe.monitoring.settings import Settings

DOC = (Path(__file__).resolve().parents[2] / "docs" / "dashboards.md").read_text()


def test_every_alert_has_a_runbook_section_its_url_points_at() -> None:
    headings = {re.sub(r"[^a-z0-9-]", "", h.lower()) for h in re.findall(r"^### (.+)$", DOC, re.M)}
    for name in rules.alert_names(Settings(dcgm_xid_count=True)):
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
        shown = (
            str(value).lower() if isinstance(value, bool) else f"{value:g}" if isinstance(value, float) else str(value)
        )
        assert rows[f.name] == shown, f.name


def test_the_xid_class_table_lists_the_catalogue() -> None:
    for severity in ("gpu_reset", "node_reboot", "nvlink_fabric", "application", "informational"):
        row = re.search(rf"^\| `{severity}` \| [^|]+ \| ([0-9, ]+) \|", DOC, re.M)
        assert row, severity
        assert [int(c) for c in row.group(1).split(",")] == rules.codes(severity), severity


#: How the runbook and the alert descriptions name a panel: `Dashboard title › Panel title`.
PANEL_REFERENCE = re.compile(r'[`"](FSDP training run|GPU health|FSDP nodes)\s+›\s+([^`"]+)[`"]')


def test_every_panel_a_runbook_or_an_alert_names_exists() -> None:
    titles: dict[str, set[str]] = {}
    variants = (Settings(), Settings(dcgm_xid_count=True))  # the windowed-count panel needs the setting
    for settings in variants:
        for board in dashboards(settings).values():
            titles.setdefault(board["title"], set()).update(p["title"] for p in board["panels"])
    texts = [DOC] + [
        rule["annotations"]["description"]
        for settings in variants
        for g in rules.rule_file(settings)["groups"]
        for rule in g["rules"]
        if "alert" in rule
    ]
    named = [ref for text in texts for ref in PANEL_REFERENCE.findall(text)]
    assert len(named) >= 10  # the runbooks point into the dashboards
    named = [(board, " ".join(panel.split())) for board, panel in named]  # a reference may wrap
    missing = [f"{board} › {panel}" for board, panel in named if panel not in titles[board]]
    assert missing == []
    # every runbook section of an alert points at a panel
    for section in re.split(r"^### ", DOC, flags=re.M)[1:]:
        heading = section.splitlines()[0]
        if heading in rules.alert_names(Settings(dcgm_xid_count=True)):
            assert PANEL_REFERENCE.search(section), f"runbook {heading} names no panel"


def test_every_flag_is_documented() -> None:
    flags = [o for action in build_parser()._actions for o in action.option_strings if o.startswith("--")]
    assert [f for f in flags if f != "--help" and f not in DOC] == []
