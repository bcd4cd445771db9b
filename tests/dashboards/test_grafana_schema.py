"""Every generated dashboard validates against Grafana 11.6's dashboard schema.

The schemas are those of grafana-foundation-sdk's build for Grafana 11.6 (the version pinned in
pyproject.toml), rebuilt from its typed models (tests/support/grafana_schema.py says why and
how): the dashboard, each panel (the panel model, then its ``options`` and
``fieldConfig.defaults.custom`` against the panel plugin's schema), each variable and each
Prometheus query. What those schemas require but Grafana fills in from plugin defaults is in
``OVER_REQUIRED`` below, each entry with its reason; nothing else is excused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

grafana_models = pytest.importorskip("grafana_foundation_sdk.models", reason="pip install -e '.[test]' (Python 3.11+)")

from grafana_foundation_sdk.models import (  # noqa: E402
    dashboard,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)

from observe.monitoring import dashboards as boards  # noqa: E402
from observe.monitoring.settings import Settings  # noqa: E402
from tests.support.grafana_schema import GRAFANA_VERSION, schema_of  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PANEL_PLUGINS = {
    "timeseries": timeseries,
    "stat": stat,
    "table": table,
    "heatmap": heatmap,
    "state-timeline": statetimeline,
}

#: (schema, JSON path suffix of an object, key): keys the generated schemas mark required although
#: Grafana fills them from the panel plugin's defaults when a dashboard leaves them out (as its
#: own provisioned dashboards do). Each is excused only there; "*" is any schema.
OVER_REQUIRED: set[tuple[str, str, str]] = {
    # VizLegendOptions.showLegend: every panel plugin's legend defaults it to true.
    ("*", ".legend", "showLegend"),
    # The state timeline's legend calcs default to none ([]), as the timeseries' do.
    ("statetimeline.Options", ".legend", "calcs"),
    # VizTooltipOptions.sort: defaults to "none" (the timeseries panels here set it).
    ("*", ".tooltip", "sort"),
    # Table: the frame shown first (0) and the cell inspect toggle (false) are plugin defaults.
    ("table.Options", "$", "frameIndex"),
    ("common.TableFieldOptions", "$", "inspect"),
    # Stat (Grafana 11): layout and percent-change options added in 10.x/11.x default in the
    # plugin (wideLayout true, no percent change).
    ("stat.Options", "$", "wideLayout"),
    ("stat.Options", "$", "showPercentChange"),
    ("stat.Options", "$", "percentChangeColorMode"),
}


def committed() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((REPO / "dashboards").glob("*.json"))}


def check(instance: Any, cls: type, where: str) -> list[str]:
    """Schema errors of ``instance`` against ``cls``'s schema, less the OVER_REQUIRED entries."""
    name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__qualname__}"
    errors = []
    for error in jsonschema.Draft7Validator(schema_of(cls)).iter_errors(instance):
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1]
            if any(
                schema in (name, "*") and path.endswith(suffix) and key == missing
                for schema, suffix, key in OVER_REQUIRED
            ):
                continue
        errors.append(f"{where} [{name}] {path}: {error.message}")
    return errors


def dashboard_errors(board: dict) -> list[str]:
    """Every schema error of one dashboard: the dashboard, its panels, plugins, queries, variables."""
    errors = check({**board, "panels": []}, dashboard.Dashboard, board["uid"])
    for panel in board["panels"]:
        where = f"{board['uid']} / {panel.get('title')}"
        if panel["type"] == "row":
            errors += check(panel, dashboard.RowPanel, where)
            continue
        bare = copy.deepcopy(panel)
        targets = bare.pop("targets", [])
        errors += check({**bare, "targets": []}, dashboard.Panel, where)
        plugin = PANEL_PLUGINS.get(panel["type"])
        if plugin is None:
            errors.append(f"{where}: panel type {panel['type']} is not one the dashboards use")
            continue
        errors += check(panel.get("options", {}), plugin.Options, where + " options")
        custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if custom is not None and hasattr(plugin, "FieldConfig"):
            errors += check(custom, plugin.FieldConfig, where + " fieldConfig.defaults.custom")
        for query in targets:
            errors += check(query, prometheus.Dataquery, f"{where} / {query.get('refId')}")
    return errors


@pytest.mark.parametrize("name", sorted(boards.UIDS))
def test_the_committed_dashboard_validates_against_grafana_11_6(name: str) -> None:
    assert GRAFANA_VERSION == "11.6"
    errors = dashboard_errors(committed()[name])
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("settings", [Settings(dcgm_xid_count=True, top_n=3)], ids=["other-settings"])
def test_dashboards_of_other_settings_validate_too(settings: Settings) -> None:
    errors = [e for board in boards.dashboards(settings).values() for e in dashboard_errors(board)]
    assert not errors, "\n".join(errors)


def test_the_check_finds_what_grafanalib_gets_wrong() -> None:
    """The check can fail: grafanalib's raw legacy keys and string threshold base are reported."""
    board = copy.deepcopy(committed()["gpu-health.json"])
    board["style"] = "dark"
    (panel,) = [p for p in board["panels"] if p["title"] == "GPU temperature"]
    panel["fieldConfig"]["defaults"]["thresholds"]["steps"][0]["value"] = "null"
    panel["targets"][0]["intervalFactor"] = 2
    panel["targets"][0]["metric"] = ""
    errors = "\n".join(dashboard_errors(board))
    assert "Additional properties are not allowed ('style' was unexpected)" in errors
    assert "'null' is not valid" in errors
    assert "('metric' was unexpected)" in errors


def test_the_schema_version_is_what_grafana_11_6_saves() -> None:
    assert {b["schemaVersion"] for b in committed().values()} == {dashboard.Dashboard().schema_version} == {41}
