"""The one post-processing step on grafanalib's output: current Grafana's dashboard JSON.

grafanalib 0.7.1 (the generator the project keeps) writes the shape of old Grafana releases.
``normalise`` rewrites its plain-JSON output, in place of patches scattered over the panel
builders, into what Grafana 11.6's schema describes (``tests/dashboards/test_grafana_schema.py``
checks every file against it):

- ``schemaVersion`` 41, the version Grafana 11.6 saves, so the file claims no migration it has
  not had (grafanalib hard-codes 12, and the project once wrote 39);
- no legacy keys: ``__inputs``, ``hideControls``, ``rows``, ``sharedCrosshair``, ``style``,
  ``timepicker.time_options`` (removed by Grafana's V41 migration); on panels ``editable`` and
  ``error``; on tables the Angular-era ``columns``, ``fontSize``, ``color`` and ``mappings``; on
  rows everything but what a row has; on targets ``query``, ``metric``, ``target`` and
  ``intervalFactor``; on variables ``useTags``, the interval-only ``auto*`` keys and an empty
  ``current``;
- threshold steps as ``{color, value}`` with a JSON ``null`` base (grafanalib: the string
  ``"null"`` and graph-panel keys ``index``, ``line``, ``op``, ``yaxis``);
- no ``noValue`` (grafanalib's stat default ``"none"`` reads as "no lost GPUs" when the agent is
  not there; Grafana's own text for missing data is "No data");
- ``maxDataPoints`` only where a builder asked for it (grafanalib's 100 made heatmap cells
  coarser than the timeseries beside them), ``spanNulls: false`` (a gap in scraping stays a
  gap), tables' ``cellOptions`` (the V38 shape), every target's ``range`` next to ``instant``.

Standard library only; input and output are plain JSON data.
"""

from __future__ import annotations

import copy
from typing import Any

#: What Grafana 11.6 writes (and migrates dashboards to) on save.
SCHEMA_VERSION = 41
#: grafanalib's Panel default for maxDataPoints; any other value was asked for.
GRAFANALIB_MAX_DATA_POINTS = 100

_TOP_LEGACY = ("__inputs", "hideControls", "rows", "sharedCrosshair", "style")
_PANEL_LEGACY = ("editable", "error")
_TABLE_LEGACY = ("columns", "fontSize", "color", "mappings")
_ROW_KEYS = ("type", "id", "title", "gridPos", "collapsed", "panels", "repeat")
_TARGET_LEGACY = ("query", "metric", "target", "intervalFactor", "step")
_VARIABLE_LEGACY = ("useTags",)
_INTERVAL_ONLY = ("auto", "auto_min", "auto_count")


def normalise(board: dict[str, Any]) -> dict[str, Any]:
    """A copy of grafanalib's dashboard JSON in Grafana 11.6's shape (see the module docstring)."""
    out = copy.deepcopy(board)
    for key in _TOP_LEGACY:
        out.pop(key, None)
    out["schemaVersion"] = SCHEMA_VERSION
    out.get("timepicker", {}).pop("time_options", None)
    out["panels"] = [_panel(p) for p in out.get("panels", [])]
    for variable in out.get("templating", {}).get("list", []):
        _variable(variable)
    return out


def _panel(panel: dict[str, Any]) -> dict[str, Any]:
    if panel.get("type") == "row":
        row = {k: panel[k] for k in _ROW_KEYS if k in panel}
        row["panels"] = [_panel(p) for p in row.get("panels", [])]
        return row
    for key in _PANEL_LEGACY:
        panel.pop(key, None)
    if panel.get("maxDataPoints") == GRAFANALIB_MAX_DATA_POINTS:
        del panel["maxDataPoints"]
    if panel.get("type") == "table":
        for key in _TABLE_LEGACY:
            panel.pop(key, None)
    config = panel.setdefault("fieldConfig", {})
    config.setdefault("overrides", [])
    defaults = config.setdefault("defaults", {})
    defaults.pop("noValue", None)
    if "thresholds" in defaults:
        defaults["thresholds"] = _thresholds(defaults["thresholds"])
    custom = defaults.get("custom", {})
    if "spanNulls" in custom:
        custom["spanNulls"] = False
    if panel.get("type") == "table" and "displayMode" in custom:
        del custom["displayMode"]
        custom.setdefault("cellOptions", {"type": "auto"})
    for target in panel.get("targets", []):
        for key in _TARGET_LEGACY:
            target.pop(key, None)
        target["range"] = not target.get("instant", False)
    return panel


def _thresholds(config: dict[str, Any]) -> dict[str, Any]:
    steps = [{"color": step["color"], "value": step.get("value")} for step in config.get("steps", [])]
    if steps:
        steps[0]["value"] = None  # the base step: from -Infinity
    return {"mode": config.get("mode", "absolute"), "steps": steps}


def _variable(variable: dict[str, Any]) -> None:
    for key in _VARIABLE_LEGACY:
        variable.pop(key, None)
    if variable.get("type") != "interval":
        for key in _INTERVAL_ONLY:
            variable.pop(key, None)
    current = variable.get("current")
    if isinstance(current, dict):
        current.pop("tags", None)
        if not current.get("text") and not current.get("value"):
            del variable["current"]  # nothing chosen yet: Grafana starts on the first value
