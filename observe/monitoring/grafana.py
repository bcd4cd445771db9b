"""Small helpers over grafanalib: panels with a unit and the ``${datasource}`` variable, a
row-per-series heatmap, a grid layout with stable ids, and deterministic JSON.

grafanalib 0.7 writes some legacy defaults (``intervalFactor: 2``, an old heatmap schema); the
helpers here set what current Grafana (10/11) reads: timeseries panels (never the deprecated
``graph``), the heatmap panel's ``options.calculate: false`` form, ``schemaVersion`` 39, and every
panel and query pointing at the datasource template variable rather than a fixed UID.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attr
import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

#: Every panel and query uses the datasource the dashboard's ``datasource`` variable selects.
DATASOURCE_VARIABLE = "datasource"
SCHEMA_VERSION = 39
GRID_WIDTH = 24


def datasource(plugin: str = "prometheus") -> dict[str, str]:
    """The datasource reference of every panel and target: the ``${datasource}`` variable."""
    return {"type": plugin, "uid": f"${{{DATASOURCE_VARIABLE}}}"}


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = False,
           plugin: str = "prometheus") -> g.Target:
    """One PromQL query. ``instant`` for tables and single values; ``table`` for format=table."""
    return g.Target(expr=expr, legendFormat=legend, refId=ref, instant=instant, intervalFactor=1, step=None,
                    format="table" if table else "time_series", datasource=datasource(plugin))


def threshold_steps(*steps: tuple[float, str]) -> list[g.Threshold]:
    """Threshold steps: green below the first ``(value, colour)``."""
    return [g.Threshold("green", 0, 0.0),
            *(g.Threshold(colour, i + 1, float(value)) for i, (value, colour) in enumerate(steps))]


@attr.s
class RowsHeatmap(g.Panel):
    """A heatmap whose rows are the query's series (e.g. one row per rank), coloured by value.

    Grafana's heatmap panel with ``calculate: false`` takes each series as one row; the colour
    scale uses ``unit``.
    """

    unit = attr.ib(default="s")

    def to_json_data(self) -> dict[str, Any]:
        """The panel as Grafana's dashboard JSON (grafanalib's serialisation hook)."""
        return self.panel_json({
            "type": "heatmap",
            "fieldConfig": {"defaults": {"unit": self.unit, "custom": {
                "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                "scaleDistribution": {"type": "linear"}}}},
            "options": {
                "calculate": False,
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential", "exponent": 0.5,
                          "steps": 64, "reverse": False, "fill": "dark-orange"},
                "rowsFrame": {"layout": "auto"},
                "yAxis": {"axisPlacement": "left", "reverse": False},
                "cellValues": {"unit": self.unit},
                "legend": {"show": True},
                "tooltip": {"mode": "single", "yHistogram": False, "showColorScale": True},
                "showValue": "never",
            },
        })


def rows_heatmap(**fields: Any) -> RowsHeatmap:
    """``RowsHeatmap(**fields)`` (``title``, ``dataSource``, ``unit``, ``description``, ``targets``...).

    grafanalib is untyped, so mypy's attrs plugin sees only the fields this module adds (``unit``),
    not ``g.Panel``'s; this one call site takes the panel's fields as keywords.
    """
    return RowsHeatmap(**fields)


def timeseries(title: str, targets: list[g.Target], unit: str, description: str, *, stack: bool = False,
               min_: float | None = None, max_: float | None = None, thresholds: list[g.Threshold] | None = None,
               points: bool = False, plugin: str = "prometheus") -> g.TimeSeries:
    """A timeseries panel with a unit (Grafana unit id), a legend table and optional stacking."""
    return g.TimeSeries(
        title=title, description=description, dataSource=datasource(plugin), targets=targets, unit=unit,
        legendDisplayMode="table", legendPlacement="bottom", legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi", tooltipSort="desc", fillOpacity=60 if stack else 10,
        stacking={"mode": "normal", "group": "A"} if stack else {"mode": "none", "group": "A"},
        valueMin=min_, valueMax=max_, drawStyle="points" if points else "line", showPoints="auto",
        thresholds=thresholds or [], thresholdsStyleMode="line" if thresholds else "off",
        maxDataPoints=None, spanNulls=True)


def table(title: str, targets: list[g.Target], description: str, *, overrides: list[dict] | None = None,
          transformations: list[dict] | None = None, unit: str = "none", plugin: str = "prometheus") -> g.Table:
    """A table of instant query results (labels as columns)."""
    return g.Table(title=title, description=description, dataSource=datasource(plugin), targets=targets, unit=unit,
                   overrides=overrides or [], transformations=transformations or [], filterable=True,
                   maxDataPoints=None)


def merged_table(title: str, first: str, second: str, description: str, columns: tuple[tuple[str, str], ...],
                 plugin: str = "prometheus") -> g.Table:
    """A table of two instant queries joined on their labels (Grafana's merge transformation).

    ``columns``: (unit, column name) of the first and the second query's value.
    """
    (unit_a, name_a), (unit_b, name_b) = columns
    return table(title, [target(first, instant=True, table=True, plugin=plugin),
                         target(second, ref="B", instant=True, table=True, plugin=plugin)], description,
                 transformations=[{"id": "merge", "options": {}},
                                  {"id": "organize", "options": {"excludeByName": {"Time": True}}}],
                 overrides=[override("Value #A", unit=unit_a, displayName=name_a),
                            override("Value #B", unit=unit_b, displayName=name_b)], plugin=plugin)


def stat(title: str, targets: list[g.Target], unit: str, description: str, *,
         thresholds: list[g.Threshold] | None = None, plugin: str = "prometheus") -> g.Stat:
    """A single-value panel (last value of each series)."""
    return g.Stat(title=title, description=description, dataSource=datasource(plugin), targets=targets, format=unit,
                  reduceCalc="lastNotNull", graphMode="area", colorMode="value", textMode="value_and_name",
                  thresholds=thresholds or threshold_steps(), maxDataPoints=None)


def override(field: str, **properties: Any) -> dict[str, Any]:
    """A field override by name: ``override("Value #A", unit="percentunit", displayName="x")``."""
    return {"matcher": {"id": "byName", "options": field},
            "properties": [{"id": key, "value": value} for key, value in properties.items()]}


def layout(sections: Sequence[tuple[str, Sequence[Sequence[g.Panel]]]], height: int = 8) -> list[g.Panel]:
    """Panels with grid positions and ids: each section is a row header, then lines of panels
    sharing the width equally."""
    out: list[g.Panel] = []
    y, next_id = 0, 1
    for title, lines in sections:
        out.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=GRID_WIDTH, x=0, y=y), id=next_id))
        y, next_id = y + 1, next_id + 1
        for line in lines:
            width = GRID_WIDTH // len(line)
            for i, panel in enumerate(line):
                out.append(attr.evolve(panel, gridPos=g.GridPos(h=height, w=width, x=i * width, y=y), id=next_id))
                next_id += 1
            y += height
    return out


def variable(name: str, label: str, query: str, all_value: str, plugin: str = "prometheus",
             multi: bool = True) -> g.Template:
    """A query variable with "All" (``all_value`` is the regex "All" stands for)."""
    template = g.Template(name=name, label=label, query=query, dataSource=datasource(plugin), includeAll=True,
                          allValue=all_value, multi=multi, refresh=2, sort=1, type="query")
    template._current = {"selected": True, "text": ["All"], "value": ["$__all"]}  # starts on "All"
    return template


def datasource_variable(plugin: str = "prometheus") -> g.Template:
    """The ``datasource`` variable every panel reads (no hard-coded datasource UID)."""
    return g.Template(name=DATASOURCE_VARIABLE, label="Data source", query=plugin, type="datasource",
                      default="default", includeAll=False, multi=False)


def _prune(value: Any) -> Any:
    """Drop ``None`` values (Grafana reads a missing key as unset)."""
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def to_json(dashboard: g.Dashboard) -> dict[str, Any]:
    """The dashboard as plain JSON data (``None`` values dropped)."""
    return _prune(json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder)))


def dumps(data: dict[str, Any]) -> str:
    """Deterministic text: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
