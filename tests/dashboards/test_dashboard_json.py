"""The generated dashboards and rules read as Grafana and the project expect them to.

Grafana expectations: current panel types (timeseries, never the deprecated graph), every panel
and query on the ``${datasource}`` variable (no hard-coded datasource UID), a unit on every
panel, unique ids and refIds, panels inside the 24-column grid without overlapping, every
``$variable`` defined. Project expectations: every metric name from ``observe.catalog`` or
dcgm-exporter's fields, the six DCGM fields of the EKS walkthrough, the XID table's meanings and
actions from ``observe.xid``, stable UIDs.
"""

from __future__ import annotations

import re

import pytest

from observe import catalog, xid
from observe.monitoring import rules
from observe.monitoring.dashboards import UIDS, XID_ACTION, XID_MEANING, dashboards
from observe.monitoring.settings import DCGM, Settings

BOARDS = dashboards()
PANEL_TYPES = {"row", "timeseries", "heatmap", "table", "stat"}
BUILTINS = {"__rate_interval", "__range", "__interval"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WALKTHROUGH = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_SM_CLOCK",
               "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")


def panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] != "row"]


def exprs(board: dict) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p["targets"]]


def known_names() -> set[str]:
    names = set(DCGM) | set(rules.RECORDED)
    for m in (*catalog.TRAINER_METRICS, *catalog.AGENT_METRICS):
        names.add(m.name)
        if m.kind == "histogram":
            names |= {f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count"}
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(fsdp_[a-z0-9_]+|DCGM_[A-Z0-9_]+|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b", expr))


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_panels_are_current_types_on_the_datasource_variable_with_units(name: str) -> None:
    board = BOARDS[name]
    assert board["uid"] == UIDS[name] and board["schemaVersion"] >= 36
    for panel in board["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["description"], panel["title"]
        assert panel["targets"] and all(t["datasource"] == DATASOURCE for t in panel["targets"])
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit, f"{panel['title']}: no unit"
        if panel["type"] == "table":  # a value column with a unit, or only label columns
            values = [o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"].startswith("Value")]
            for o in values:
                assert any(p["id"] == "unit" for p in o["properties"]), panel["title"]


def test_no_datasource_uid_is_hard_coded() -> None:
    def walk(value, where=""):
        if isinstance(value, dict):
            if "datasource" in value and isinstance(value["datasource"], dict):
                assert value["datasource"]["uid"] == "${datasource}", where
            for key, item in value.items():
                walk(item, f"{where}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")
    for name, board in BOARDS.items():
        walk(board, name)
        (ds,) = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
        assert ds["name"] == "datasource" and ds["query"] == "prometheus"


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_ids_and_the_grid(name: str) -> None:
    board = BOARDS[name]
    ids = [p["id"] for p in board["panels"]]
    assert ids == list(range(1, len(ids) + 1))
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_variable_used_is_defined_and_every_metric_is_known(name: str) -> None:
    board = BOARDS[name]
    defined = {v["name"] for v in board["templating"]["list"]} | BUILTINS
    queries = exprs(board) + [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    for expr in queries:
        used = set(re.findall(r"\$\{?([A-Za-z_]\w*)", expr))
        assert used <= defined, (used - defined, expr)
        unknown = metric_names(expr) - known_names()
        assert not unknown, (unknown, expr)


def test_the_variables_each_dashboard_offers() -> None:
    def names(board: dict) -> list[str]:
        return [v["name"] for v in board["templating"]["list"]]
    assert names(BOARDS["training-run.json"]) == ["datasource", "namespace", "run_id", "node"]
    assert names(BOARDS["gpu-health.json"]) == ["datasource", "node", "gpu"]
    assert names(BOARDS["nodes.json"]) == ["datasource", "node"]
    node = BOARDS["gpu-health.json"]["templating"]["list"][1]
    assert node["query"] == "label_values(DCGM_FI_DEV_GPU_UTIL, Hostname)"  # by node, not by exporter pod
    for board in BOARDS.values():
        for v in board["templating"]["list"][1:]:
            assert v["includeAll"] and v["current"]["value"] == ["$__all"]
            assert v["allValue"] == (".*" if v["name"] == "namespace" else ".+")


def test_the_gpu_health_dashboard_charts_the_walkthrough_fields_and_the_xid_table() -> None:
    board = BOARDS["gpu-health.json"]
    text = "\n".join(exprs(board))
    for name in WALKTHROUGH:
        assert name in text, name
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in panels(board)}
    assert units["GPU utilisation"] == units["Memory copy utilisation"] == "percent"
    assert (units["SM clock"], units["GPU temperature"], units["Power draw"]) == ("hertz", "celsius", "watt")
    (table,) = [p for p in panels(board) if p["title"] == "XID errors by GPU and code"]
    mappings = {o["matcher"]["options"]: o["properties"][0]["value"] for o in table["fieldConfig"]["overrides"]
                if o["properties"][0]["id"] == "mappings"}
    for column, attribute in ((XID_MEANING, "name"), (XID_ACTION, "action")):
        by_code, fallback = mappings[column]
        assert {int(k): v["text"] for k, v in by_code["options"].items()} == {
            code: getattr(info, attribute) for code, info in xid.CATALOGUE.items()}
        assert fallback["type"] == "regex"
        assert fallback["options"]["result"]["text"] == getattr(xid.lookup(-1), attribute)


def test_the_training_dashboard_has_every_asked_for_panel() -> None:
    titles = {p["title"] for p in panels(BOARDS["training-run.json"])}
    assert {"Loss", "Global tokens/s", "Tokens/s per rank", "MFU per rank", "Step time p50 by rank",
            "Step time p95 by rank", "Data-wait share per rank", "Memory per rank", "Gradient norm", "Learning rate",
            "Restarts", "Checkpoints", "Wall time by phase", "Goodput", "Scaling efficiency", "Step time per rank",
            "GPU utilisation", "GPU power", "GPU temperature"} <= titles
    (scaling,) = [p for p in panels(BOARDS["training-run.json"]) if p["title"] == "Scaling efficiency"]
    assert all(t["instant"] and "$__range" in t["expr"] for t in scaling["targets"])
    units = {o["matcher"]["options"]: o["properties"][0]["value"] for o in scaling["fieldConfig"]["overrides"]}
    assert units["Value #A"] == "percentunit"


def test_the_dcgm_dialect_setting_reaches_every_dcgm_query() -> None:
    for label, other in (("hostname", "Hostname"), ("Hostname", "hostname")):
        boards = dashboards(Settings(dcgm_hostname_label=label, dcgm_uuid_label="uuid", dcgm_model_label="model_name"))
        for board in boards.values():
            for expr in exprs(board):
                if "DCGM_" in expr:
                    assert f'{label}=~"$node"' in expr and f'"{other}"' not in expr and '"UUID"' not in expr, expr


def test_the_rules_name_only_known_metrics_and_follow_the_recording_rule_convention() -> None:
    for group in rules.rule_file()["groups"]:
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - known_names()
            assert not unknown, (unknown, rule)
            if "record" in rule:
                level, metric, operations = rule["record"].split(":")
                assert level and operations and metric in known_names()
            else:
                assert rule["labels"]["severity"] in ("critical", "warning") and rule["for"]
                assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}
                assert rule["annotations"]["runbook_url"].endswith("#" + rule["alert"].lower())
                text = rule["annotations"]["description"]
                assert "$labels.node" in text or ".Labels.node" in text, rule["alert"]  # the node(s)
                assert "$labels.run_id" in text or ".Labels.run_id" in text, rule["alert"]  # the run(s)
                if rule["alert"] != "FsdpThroughputDrop":  # a per-run alert: its GPUs are many
                    assert "$labels.gpu_uuid" in text, rule["alert"]


def test_xid_alert_classes_come_from_the_catalogue() -> None:
    critical = set(rules.codes(*rules.CRITICAL_XID_CLASSES))
    assert {48, 79, 74, 95, 119} <= critical and not critical & {13, 31, 43, 45, 92}
    assert critical | set(rules.codes("application", "informational")) == set(xid.CATALOGUE)
    (dcgm,) = [r for g in rules.rule_file()["groups"] for r in g["rules"] if r.get("alert") == "FsdpDcgmXidCritical"]
    listed = set(map(int, re.search(r'xid=~"([0-9|]+)"', dcgm["expr"]).group(1).split("|")))
    assert listed == critical
    assert "DCGM_FI_DEV_XID_ERRORS" not in rules.render()  # never the sticky last-value gauge
