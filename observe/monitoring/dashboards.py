"""Grafana dashboards for FSDP runs, their GPUs and their nodes, generated with grafanalib.

``dashboards(settings)`` returns file name → dashboard JSON data for ``dashboards/``:

- ``training-run.json`` (uid ``fsdp-training-run``, ``observe.monitoring.board_training``);
- ``gpu-health.json`` (uid ``fsdp-gpu-health``, ``observe.monitoring.board_gpu``);
- ``nodes.json`` (uid ``fsdp-nodes``, ``observe.monitoring.board_nodes``).

Every metric name comes from ``observe.catalog`` or ``observe.monitoring.fields``; every choice a
cluster makes (datasource plugin, selectors, DCGM dialect, thresholds) from
``observe.monitoring.settings.Settings``. Panels and queries point at the ``${datasource}``
variable. The JSON is grafanalib's output after ``observe.monitoring.normalise``: Grafana 11.6's
dashboard schema (``schemaVersion`` 41), which Grafana 11.x and 12.x load.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grafanalib.core as g

from observe.monitoring.board_gpu import gpu_health
from observe.monitoring.board_nodes import nodes
from observe.monitoring.board_training import training_run
from observe.monitoring.grafana import datasource_variable, dumps, to_json
from observe.monitoring.settings import Settings

TAGS = ["fsdp-observe"]
UIDS = {"training-run.json": "fsdp-training-run", "gpu-health.json": "fsdp-gpu-health", "nodes.json": "fsdp-nodes"}
TITLES = {"training-run.json": "FSDP training run", "gpu-health.json": "GPU health", "nodes.json": "FSDP nodes"}
Board = Callable[[Settings], tuple[str, list[g.Template], list[g.Panel]]]
BUILDERS: dict[str, Board] = {"gpu-health.json": gpu_health, "nodes.json": nodes, "training-run.json": training_run}


def _dashboard(file: str, s: Settings) -> dict[str, Any]:
    description, templates, panels = BUILDERS[file](s)
    board = g.Dashboard(
        title=TITLES[file],
        uid=UIDS[file],
        description=description,
        tags=TAGS,
        timezone="browser",
        refresh="30s",
        graphTooltip=1,
        time=g.Time("now-3h", "now"),
        editable=True,
        templating=g.Templating(list=[datasource_variable(s.datasource_type), *templates]),
        panels=panels,
        links=[
            {
                "type": "dashboards",
                "tags": TAGS,
                "asDropdown": False,
                "includeVars": False,
                "keepTime": True,
                "title": "fsdp-observe",
                "icon": "external link",
                "targetBlank": False,
                "url": "",
                "tooltip": "",
            }
        ],
    )
    return to_json(board)


def dashboards(settings: Settings | None = None) -> dict[str, dict[str, Any]]:
    """File name → dashboard JSON data, for ``dashboards/``."""
    s = settings or Settings()
    return {name: _dashboard(name, s) for name in sorted(BUILDERS)}


def render(settings: Settings | None = None) -> dict[str, str]:
    """File name → deterministic JSON text (sorted keys)."""
    return {name: dumps(data) for name, data in dashboards(settings).items()}
