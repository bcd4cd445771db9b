"""Small helpers over grafanalib: panels with a unit and the ``${datasource}`` variable, heatmaps,
state timelines, a grid layout with stable ids, and deterministic JSON.

Every panel and query points at the datasource template variable rather than a fixed UID.
grafanalib's legacy output is rewritten in one place, ``observe.monitoring.normalise``, which
``to_json`` applies to every dashboard; the builders here only choose what a panel shows.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attr
import grafanalib.core as g
from grafanalib._gen import DashboardEncoder

from observe.monitoring.normalise import normalise

#: Every panel and query uses the datasource the dashboard's ``datasource`` variable selects.
DATASOURCE_VARIABLE = "datasource"
GRID_WIDTH = 24
#: Grafana's variable sort "natural ascending" (rank 2 before rank 10).
SORT_NATURAL = 7


def datasource(plugin: str = "prometheus") -> dict[str, str]:
    """The datasource reference of every panel and target: the ``${datasource}`` variable."""
    return {"type": plugin, "uid": f"${{{DATASOURCE_VARIABLE}}}"}


def target(
    expr: str,
    legend: str = "",
    ref: str = "A",
    instant: bool = False,
    table: bool = False,
    plugin: str = "prometheus",
    heatmap: bool = False,
) -> g.Target:
    """One PromQL query. ``instant`` for tables and single values; ``table`` for format=table;
    ``heatmap`` for histogram buckets (format=heatmap: Grafana de-accumulates the ``le`` series)."""
    fmt = "table" if table else "heatmap" if heatmap else "time_series"
    return g.Target(
        expr=expr, legendFormat=legend, refId=ref, instant=instant, step=None, format=fmt, datasource=datasource(plugin)
    )


def threshold_steps(*steps: tuple[float, str]) -> list[g.Threshold]:
    """Threshold steps: green below the first ``(value, colour)``."""
    return [
        g.Threshold("green", 0, 0.0),
        *(g.Threshold(colour, i + 1, float(value)) for i, (value, colour) in enumerate(steps)),
    ]


def repeat_by(variable: str, per_row: int = 4) -> g.Repeat:
    """Repeat a panel once per selected value of ``variable`` (one stack or heatmap per run)."""
    return g.Repeat(direction="h", variable=variable, maxPerRow=per_row)


def _heatmap(
    panel: g.Panel,
    *,
    value_unit: str | None,
    scheme: str,
    reverse: bool,
    rows: str,
    y_unit: str | None,
    cell_unit: str,
    y_histogram: bool,
) -> dict[str, Any]:
    """The heatmap panel JSON both heatmap kinds share (``calculate: false``: rows from the data)."""
    defaults: dict[str, Any] = {
        "custom": {
            "hideFrom": {"legend": False, "tooltip": False, "viz": False},
            "scaleDistribution": {"type": "linear"},
        }
    }
    if value_unit:
        defaults["unit"] = value_unit
    y_axis: dict[str, Any] = {"axisPlacement": "left", "reverse": False, **({"unit": y_unit} if y_unit else {})}
    return panel.panel_json(
        {
            "type": "heatmap",
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {
                "calculate": False,
                "cellGap": 1,
                "color": {
                    "mode": "scheme",
                    "scheme": scheme,
                    "scale": "exponential",
                    "exponent": 0.5,
                    "steps": 64,
                    "reverse": reverse,
                    "fill": "dark-orange",
                },
                "rowsFrame": {"layout": rows},
                "yAxis": y_axis,
                "cellValues": {"unit": cell_unit},
                "legend": {"show": True},
                "tooltip": {"mode": "single", "yHistogram": y_histogram, "showColorScale": True},
                "showValue": "never",
                "exemplars": {"color": "rgba(255,0,255,0.7)"},
                "filterValues": {"le": 1e-9},
            },
        }
    )


@attr.s
class RowsHeatmap(g.Panel):
    """A heatmap whose rows are the query's series (e.g. one row per rank), coloured by value.

    Grafana's heatmap panel with ``calculate: false`` takes each series as one row and keeps the
    frames' order unless every row name is a number, which it then sorts numerically: give a
    legend that is only a number (``{{rank}}``) for rank 2 to come before rank 10.
    """

    unit = attr.ib(default="s")

    def to_json_data(self) -> dict[str, Any]:
        """The panel as Grafana's dashboard JSON (grafanalib's serialisation hook)."""
        return _heatmap(
            self,
            value_unit=self.unit,
            scheme="Oranges",
            reverse=False,
            rows="auto",
            y_unit=None,
            cell_unit=self.unit,
            y_histogram=False,
        )


@attr.s
class BucketsHeatmap(g.Panel):
    """A heatmap of a Prometheus histogram's buckets over time (``sum by (le) (rate(..._bucket))``,
    targets with ``format: heatmap``): how many observations fell in each bucket, all ranks together.

    The row count is the bucket count (a few dozen) whatever the number of ranks.
    """

    unit = attr.ib(default="s")

    def to_json_data(self) -> dict[str, Any]:
        """The panel as Grafana's dashboard JSON (grafanalib's serialisation hook)."""
        return _heatmap(
            self,
            value_unit=None,
            scheme="Spectral",
            reverse=True,
            rows="ge",
            y_unit=self.unit,
            cell_unit="short",
            y_histogram=True,
        )


def heatmap(
    kind: type[RowsHeatmap] | type[BucketsHeatmap],
    title: str,
    targets: list[g.Target],
    unit: str,
    description: str,
    *,
    repeat: g.Repeat | None = None,
    plugin: str = "prometheus",
) -> g.Panel:
    """A ``RowsHeatmap`` or ``BucketsHeatmap`` on the ``${datasource}`` variable."""
    fields: dict[str, Any] = {
        "title": title,
        "dataSource": datasource(plugin),
        "targets": targets,
        "unit": unit,
        "description": description,
        "repeat": repeat or g.Repeat(),
    }
    return kind(**fields)


def timeseries(
    title: str,
    targets: list[g.Target],
    unit: str,
    description: str,
    *,
    stack: bool = False,
    min_: float | None = None,
    max_: float | None = None,
    thresholds: list[g.Threshold] | None = None,
    soft_min: float | None = None,
    soft_max: float | None = None,
    repeat: g.Repeat | None = None,
    plugin: str = "prometheus",
) -> g.TimeSeries:
    """A timeseries panel with a unit (Grafana unit id), a legend table and optional stacking.

    ``soft_min``/``soft_max`` widen the auto-scaled y axis to at least that range (Grafana's
    axisSoftMin/axisSoftMax): threshold lines are drawn only inside the axis range, so a panel
    with thresholds sets ``soft_max`` above the highest one.
    """
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=datasource(plugin),
        targets=targets,
        unit=unit,
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        fillOpacity=60 if stack else 10,
        stacking={"mode": "normal", "group": "A"} if stack else {"mode": "none", "group": "A"},
        valueMin=min_,
        valueMax=max_,
        drawStyle="line",
        showPoints="auto",
        thresholds=thresholds or [],
        thresholdsStyleMode="line" if thresholds else "off",
        maxDataPoints=None,
        spanNulls=False,
        repeat=repeat or g.Repeat(),
        extraJson={
            "fieldConfig": {
                "defaults": {
                    "custom": {  # grafanalib types these as int
                        key: value
                        for key, value in (("axisSoftMin", soft_min), ("axisSoftMax", soft_max))
                        if value is not None
                    }
                }
            }
        },
    )


def state_timeline(
    title: str,
    targets: list[g.Target],
    description: str,
    *,
    states: dict[float, tuple[str, str]],
    plugin: str = "prometheus",
) -> g.StateTimeline:
    """A state timeline: one row per series, coloured by a discrete state.

    ``states`` maps each value to ``(text, colour)``, e.g. ``{0: ("ok", "green"), 1: ("lost", "red")}``.
    """
    mappings = [
        {
            "type": "value",
            "options": {
                f"{value:g}": {"text": text, "color": colour, "index": i}
                for i, (value, (text, colour)) in enumerate(sorted(states.items()))
            },
        }
    ]
    return g.StateTimeline(
        title=title,
        description=description,
        dataSource=datasource(plugin),
        targets=targets,
        mappings=mappings,
        showValue="never",
        mergeValues=True,
        rowHeight=0.8,
        legendDisplayMode="list",
        tooltipMode="single",
        maxDataPoints=None,
    )


def table(
    title: str,
    targets: list[g.Target],
    description: str,
    *,
    overrides: list[dict] | None = None,
    transformations: list[dict] | None = None,
    unit: str = "none",
    plugin: str = "prometheus",
) -> g.Table:
    """A table of instant query results (labels as columns)."""
    return g.Table(
        title=title,
        description=description,
        dataSource=datasource(plugin),
        targets=targets,
        unit=unit,
        overrides=overrides or [],
        transformations=transformations or [],
        filterable=True,
        maxDataPoints=None,
    )


def organize(keep: Sequence[str], rename: dict[str, str] | None = None) -> dict[str, Any]:
    """Grafana's organize transformation keeping only ``keep`` columns, in that order."""
    return {
        "id": "organize",
        "options": {
            "excludeByName": {},
            "includeByName": dict.fromkeys(keep, True),
            "indexByName": {name: i for i, name in enumerate(keep)},
            "renameByName": rename or {},
        },
    }


def merged_table(
    title: str,
    queries: Sequence[tuple[str, str, str]],
    description: str,
    keep: Sequence[str],
    plugin: str = "prometheus",
) -> g.Table:
    """A table of instant queries joined on their labels (Grafana's merge transformation).

    ``queries``: (expr, unit, column name) per value column; ``keep``: the label columns shown,
    in order, before the value columns.
    """
    refs = [chr(ord("A") + i) for i in range(len(queries))]
    values = [f"Value #{ref}" for ref in refs]
    return table(
        title,
        [
            target(expr, ref=ref, instant=True, table=True, plugin=plugin)
            for ref, (expr, _, _) in zip(refs, queries, strict=True)
        ],
        description,
        transformations=[{"id": "merge", "options": {}}, organize([*keep, *values])],
        overrides=[
            override(value, unit=unit, displayName=name) for value, (_, unit, name) in zip(values, queries, strict=True)
        ],
        plugin=plugin,
    )


def stat(
    title: str,
    targets: list[g.Target],
    unit: str,
    description: str,
    *,
    thresholds: list[g.Threshold] | None = None,
    plugin: str = "prometheus",
) -> g.Stat:
    """A single-value panel: the value now (instant queries, no sparkline: a count over 8,192 GPUs
    at every step of the range would cost seconds for one number); missing data reads "No data"."""
    for t in targets:
        t.instant = True
    return g.Stat(
        title=title,
        description=description,
        dataSource=datasource(plugin),
        targets=targets,
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="none",
        colorMode="value",
        textMode="value_and_name",
        thresholds=thresholds or threshold_steps(),
        maxDataPoints=None,
    )


def override(field: str, **properties: Any) -> dict[str, Any]:
    """A field override by name: ``override("Value #A", unit="percentunit", displayName="x")``."""
    return {
        "matcher": {"id": "byName", "options": field},
        "properties": [{"id": key, "value": value} for key, value in properties.items()],
    }


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


def variable(
    name: str,
    label: str,
    query: str,
    all_value: str | None,
    plugin: str = "prometheus",
    multi: bool = True,
    regex: str = "",
) -> g.Template:
    """A query variable, sorted naturally: with "All" (``all_value`` is the regex "All" stands
    for), or, with ``all_value=None``, one value at a time (Grafana starts on the first)."""
    template = g.Template(
        name=name,
        label=label,
        query=query,
        dataSource=datasource(plugin),
        includeAll=all_value is not None,
        allValue=all_value,
        multi=multi and all_value is not None,
        refresh=2,
        sort=SORT_NATURAL,
        type="query",
        regex=regex,
    )
    if all_value is not None:
        template._current = {"selected": True, "text": ["All"], "value": ["$__all"]}  # starts on "All"
    return template


def datasource_variable(plugin: str = "prometheus") -> g.Template:
    """The ``datasource`` variable every panel reads (no hard-coded datasource UID)."""
    return g.Template(
        name=DATASOURCE_VARIABLE,
        label="Data source",
        query=plugin,
        type="datasource",
        default="default",
        includeAll=False,
        multi=False,
    )


def _prune(value: Any) -> Any:
    """Drop ``None`` values (Grafana reads a missing key as unset)."""
    if isinstance(value, dict):
        return {k: _prune(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def to_json(dashboard: g.Dashboard) -> dict[str, Any]:
    """The dashboard as plain JSON data in Grafana 11.6's shape (``observe.monitoring.normalise``)."""
    return normalise(_prune(json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder))))


def dumps(data: dict[str, Any]) -> str:
    """Deterministic text: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
