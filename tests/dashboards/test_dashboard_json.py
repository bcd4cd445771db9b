"""The generated dashboards and rules read as Grafana and the project expect them to.

Grafana expectations: current panel types (timeseries, never the deprecated graph), every panel
and query on the ``${datasource}`` variable (no hard-coded datasource UID), a unit on every
panel, unique ids and refIds, panels inside the 24-column grid without overlapping, every
``$variable`` defined. Project expectations: every metric name from ``observe.catalog``,
dcgm-exporter's fields or the canonical DCGM layer's records (the only DCGM series a panel reads),
the XID table's meanings and actions from ``observe.xid``, stable UIDs.
"""

from __future__ import annotations

import re

import pytest

from observe import catalog, xid
from observe.monitoring import dialects, fields, rules
from observe.monitoring.dashboards import UIDS, dashboards
from observe.monitoring.settings import Settings
from observe.monitoring.xid_table import XID_ACTION, XID_MEANING

BOARDS = dashboards()
PANEL_TYPES = {"row", "timeseries", "heatmap", "table", "stat", "state-timeline"}
BUILTINS = {"__rate_interval", "__range", "__interval"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SPELLINGS = {sp.name for figure in (*dialects.FIGURES, dialects.XID_WINDOW) for sp in figure.spellings}


def panels(board: dict) -> list[dict]:
    return [p for p in board["panels"] if p["type"] != "row"]


def exprs(board: dict) -> list[str]:
    return [t["expr"] for p in panels(board) for t in p["targets"]]


def known_names() -> set[str]:
    names = set(fields.DCGM) | SPELLINGS | set(dialects.DRIVER_LABELS)  # every dialect's names, the driver labels
    names |= set(fields.NODE_EXPORTER) | set(rules.RECORDED) | {"ALERTS"}  # Prometheus' own
    for m in (*catalog.TRAINER_METRICS, *catalog.AGENT_METRICS):
        names.add(m.name)
        if m.kind == "histogram":
            names |= {f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count"}
    return names


def metric_names(expr: str) -> set[str]:
    return set(
        re.findall(
            r"\b(fsdp_[a-z0-9_]+|DCGM_[A-Z0-9_]+|node_(?:cpu|network|disk|uname|memory|load)[a-z0-9_]*|[a-z_]+:[a-z0-9_]+:[a-z0-9_]+)\b",
            expr,
        )
    )


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
        unit = panel["fieldConfig"]["defaults"].get("unit") or panel.get("options", {}).get("yAxis", {}).get("unit")
        assert unit or panel["type"] == "state-timeline", f"{panel['title']}: no unit"
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

    assert names(BOARDS["training-run.json"]) == ["datasource", "namespace", "run_id", "node", "run"]
    assert names(BOARDS["gpu-health.json"]) == ["datasource", "node", "gpu"]
    assert names(BOARDS["nodes.json"]) == ["datasource", "node", "core_node"]
    node, gpu = BOARDS["gpu-health.json"]["templating"]["list"][1:]
    # by node, not by exporter pod, in every dialect; on a figure MIG instances report too (GPU_UTIL is not)
    assert node["query"] == "label_values(gpu:dcgm_temperature_celsius:max, node)"
    assert "utilization" not in gpu["query"]
    run = BOARDS["training-run.json"]["templating"]["list"][4]  # the phase stack's repeat, never picked by hand
    assert run["hide"] == 2 and "namespace_run_id_phase:" in run["query"]
    nodes = BOARDS["nodes.json"]["templating"]["list"][1]  # node-exporter or the agent: either lists the node
    assert "node_uname_info" in nodes["query"] and "fsdp_node_agent_collections_total" in nodes["query"]
    core = BOARDS["nodes.json"]["templating"]["list"][2]  # the per-core heatmap shows one node at a time
    assert not core["includeAll"] and not core["multi"]
    for board in BOARDS.values():
        for v in board["templating"]["list"][1:]:
            if v is core:
                continue
            assert v["includeAll"] and v["current"]["value"] == ["$__all"]
            assert v["allValue"] == (".*" if v["name"] == "namespace" else ".+")
            assert v["sort"] == 7  # natural: node-2 before node-10


def panel(board: str, title: str) -> dict:
    (found,) = [p for p in panels(BOARDS[board]) if p["title"] == title]
    return found


def test_the_gpu_health_dashboard_charts_every_canonical_figure_in_base_units() -> None:
    board = BOARDS["gpu-health.json"]
    text = "\n".join(exprs(board))
    assert [f.record for f in dialects.FIGURES if f.record not in text] == []
    assert not re.search(r"\bDCGM_[A-Z_]+\b", text)  # no dialect's own name: the layer reads them all
    assert dialects.XID_WINDOW.record not in text  # off by default in dcgm-exporter: only with dcgm_xid_count
    counted = dashboards(Settings(dcgm_xid_count=True))["gpu-health.json"]
    assert dialects.XID_WINDOW.record in "\n".join(exprs(counted))
    # every spelling of every dialect is read by the recording rules
    rule_text = rules.render(Settings(dcgm_xid_count=True))
    assert [name for name in SPELLINGS if name not in rule_text] == []
    units = {p["title"]: p["fieldConfig"]["defaults"].get("unit") for p in panels(board)}
    assert units["Graphics engine active (MIG-safe)"] == units["Tensor-core activity"] == "percentunit"
    assert (units["SM clock"], units["GPU temperature"], units["Power draw"]) == ("hertz", "celsius", "watt")
    assert units["NVLink throughput"] == units["PCIe transmit"] == "Bps"
    # utilisation as a 0-1 ratio (4.9's unit), never a percentage axis a ratio would hug the bottom of
    for title in ("GPU utilisation (not under MIG)", "Memory copy utilisation"):
        assert units[title] == "percentunit" and panel("gpu-health.json", title)["fieldConfig"]["defaults"]["max"] == 1
    # unit conversion happens once, in the layer: no panel scales a DCGM figure again
    for title in ("SM clock", "Framebuffer memory used", "NVLink throughput"):
        expr = panel("gpu-health.json", title)["targets"][0]["expr"]
        assert not re.search(r"\* ?(1e6|1048576|1024000)", expr) and "rate(" not in expr, title
    for title in ("Lost GPUs", "Clock throttle reasons"):
        assert panel("gpu-health.json", title)["type"] == "state-timeline"
    processes = panel("gpu-health.json", "GPU processes (the 10 largest)")
    assert {
        "fsdp_gpu_process_memory_bytes",
        "fsdp_gpu_process_sm_utilization_ratio",
        "fsdp_node_process_info",
    } <= set().union(*(metric_names(t["expr"]) for t in processes["targets"]))
    (table,) = [p for p in panels(board) if p["title"] == "XID errors by GPU and code (agent)"]
    mappings = {
        o["matcher"]["options"]: o["properties"][0]["value"]
        for o in table["fieldConfig"]["overrides"]
        if o["properties"][0]["id"] == "mappings"
    }
    for column, attribute in ((XID_MEANING, "name"), (XID_ACTION, "action")):
        by_code, fallback = mappings[column]
        assert {int(k): v["text"] for k, v in by_code["options"].items()} == {
            code: getattr(info, attribute) for code, info in xid.CATALOGUE.items()
        }
        assert fallback["type"] == "regex"
        assert fallback["options"]["result"]["text"] == getattr(xid.lookup(-1), attribute)
    last = panel("gpu-health.json", "Last XID per GPU (dcgm-exporter, sticky)")["targets"][0]["expr"]
    assert f'{dialects.LAST_XID.record}{{node=~"$node",gpu=~"$gpu",xid!="0"}}' in last  # never "No Error"
    dialect = panel("gpu-health.json", "Nodes by dcgm-exporter dialect")["targets"][0]
    assert dialect["instant"] and dialect["expr"].startswith("count by (dialect, driver_version) (count by (node,")


def test_the_nodes_dashboard_is_useful_before_the_agent_is_deployed() -> None:
    text = "\n".join(exprs(BOARDS["nodes.json"]))
    for name in fields.NODE_EXPORTER[1:]:
        if name != fields.NODE_BOOT_TIME:  # the DCGM XID alert's, not a panel's
            assert name in text, name
    busiest = panel("nodes.json", "Busiest processes (the 10 of all selected nodes)")
    (organize,) = [t for t in busiest["transformations"] if t["id"] == "organize"]
    assert list(organize["options"]["includeByName"]) == [
        "node",
        "pid",
        "user",
        "name",
        "command",
        "Value #A",
        "Value #B",
    ]  # no target labels as columns


def test_the_training_dashboard_has_every_asked_for_panel() -> None:
    titles = {p["title"] for p in panels(BOARDS["training-run.json"])}
    assert {
        "Loss",
        "Global tokens/s",
        "Tokens/s: the 10 slowest ranks and the median",
        "Step-time distribution (local rank 0 of each node)",
        "Mean step time of the 10 slowest ranks, by rank",
        "Worst 10 ranks",
        "Compute per step vs the run's median rank",
        "Data-wait share: the 10 highest ranks",
        "Device memory across ranks",
        "Allocation retries: the 10 ranks retrying most",
        "Gradient norm",
        "Learning rate",
        "Restarts",
        "Checkpoints",
        "Wall time by phase",
        "Phase of each run",
        "Goodput",
        "Scaling efficiency",
        "SM clock of the run's GPUs",
        "XIDs on the run's GPUs",
    } <= titles
    scaling = panel("training-run.json", "Scaling efficiency")
    assert all(t["instant"] and "$__range" in t["expr"] for t in scaling["targets"])
    units = {o["matcher"]["options"]: o["properties"][0]["value"] for o in scaling["fieldConfig"]["overrides"]}
    assert units["Value #A"] == "percentunit"


def test_runs_never_share_a_stack_or_a_heatmap_and_rank_rows_sort_naturally() -> None:
    phase = panel("training-run.json", "Wall time by phase")
    assert phase["repeat"] == "run" and phase["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    # one stack per namespace and run_id: the same run_id in two namespaces never stacks to 2
    assert 'run=~"$run"' in phase["targets"][0]["expr"] and "/ on (run) group_left" in phase["targets"][0]["expr"]
    (share,) = [r for g in rules.rule_file()["groups"] for r in g["rules"] if r.get("record") == rules.PHASE_SHARE]
    assert share["expr"].startswith("label_join(") and '"run", "/", "namespace", "run_id"' in share["expr"]
    for title in (
        "Step-time distribution (local rank 0 of each node)",
        "Mean step time of the 10 slowest ranks, by rank",
    ):
        assert panel("training-run.json", title)["repeat"] == "run_id"
    rows = panel("training-run.json", "Mean step time of the 10 slowest ranks, by rank")["targets"][0]
    assert rows["legendFormat"] == "{{rank}}"  # a number alone: Grafana's heatmap sorts such rows numerically
    cores = panel("nodes.json", "CPU busy: the 10 busiest cores of $core_node")
    assert cores["targets"][0]["legendFormat"] == "{{cpu}}" and "topk(10," in cores["targets"][0]["expr"]


def test_no_panel_turns_missing_data_into_a_reassuring_value() -> None:
    for name, board in BOARDS.items():
        for p in panels(board):
            assert "noValue" not in p["fieldConfig"]["defaults"], (name, p["title"])
            for t in p["targets"]:
                assert "vector(0)" not in t["expr"], (name, p["title"])  # a 0 without any source series
    lost = panel("gpu-health.json", "Lost GPUs (agent)")["targets"][0]["expr"]
    assert (
        lost == 'count(fsdp_gpu_lost{node=~"$node",gpu=~"$gpu"} == 1) or on () '
        '(0 * count(fsdp_gpu_lost{node=~"$node",gpu=~"$gpu"}))'
    )


def test_threshold_lines_sit_inside_the_axis_at_normal_values() -> None:
    for name, board in BOARDS.items():
        for p in panels(board):
            steps = p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
            if p["type"] != "timeseries" or len(steps) < 2:
                continue
            custom = p["fieldConfig"]["defaults"]["custom"]
            assert custom["thresholdsStyle"]["mode"] == "line", (name, p["title"])
            assert custom["axisSoftMax"] > max(s["value"] for s in steps[1:]), (name, p["title"])


def test_per_rank_and_per_gpu_panels_draw_a_bounded_set_of_series() -> None:
    """At 8,192 ranks a panel drawing every rank freezes the browser: those panels pick the worst
    N over the range once (``@ end()``) or aggregate."""
    per_series = (
        "fsdp_train_tokens_per_second",
        "fsdp_train_mfu_ratio",
        "rank:fsdp_train_step_seconds:mean5m",
        "fsdp_train_window_step_seconds",
        "fsdp_gpu_temperature_celsius",
        "fsdp_node_cpu_core_busy_ratio",
        *(f.record for f in dialects.FIGURES),
    )
    for name, board in BOARDS.items():
        for p in panels(board):
            if p["type"] not in ("timeseries", "heatmap", "state-timeline"):
                continue
            for t in p["targets"]:
                if any(m in t["expr"] for m in per_series):
                    assert "@ end()" in t["expr"] or re.match(
                        r"^(min|max|sum|count|avg|quantile)( by \(|\(| \()", t["expr"]
                    ), (name, p["title"], t["expr"])


def test_no_panel_reads_a_dialect_of_dcgm_exporter_directly() -> None:
    """Dashboards read only the canonical records, so a node upgraded to another dialect stays on
    every panel; the dialect lives in one place, the recording rules."""
    for settings in (Settings(), Settings(dcgm_xid_count=True)):
        for board in dashboards(settings).values():
            for expr in exprs(board) + [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]:
                assert not re.search(r"\bDCGM_[A-Z_]+\b|Hostname|hostname|UUID|modelName", expr), expr


def test_the_rules_name_only_known_metrics_and_follow_the_recording_rule_convention() -> None:
    for group in rules.rule_file()["groups"]:
        for rule in group["rules"]:
            unknown = metric_names(rule["expr"]) - known_names()
            assert not unknown, (unknown, rule)
            if "record" in rule:
                level, metric, operations = rule["record"].split(":")
                canonical = {f.metric for f in (*dialects.FIGURES, dialects.XID_WINDOW)} | {"dcgm_exporter_dialect"}
                assert level and operations and (metric in known_names() or metric in canonical)
            else:
                assert rule["labels"]["severity"] in ("critical", "warning") and rule["for"]
                if "Xid" in rule["alert"]:  # Alertmanager routes XIDs on these
                    assert "xid_class" in rule["labels"] or '"xid_class"' in rule["expr"], rule["alert"]
                    assert all(label in rule["expr"] for label in ("node", "gpu", "gpu_uuid", "pci_bus", "xid"))
                extra = (
                    {"xid_name", "recommended_action"}
                    if "Xid" in rule["alert"]
                    else {"recommended_action"}
                    if rule["alert"] in ("FsdpGpuLost", "FsdpGpuReadingStale", "FsdpGpuUnreadable")
                    else {"likely_cause"}
                    if rule["alert"] == "FsdpTrainingStalled"
                    else set()
                )
                assert set(rule["annotations"]) == {"summary", "description", "runbook_url", *extra}
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
    for settings, label in ((Settings(), "xid"), (Settings(dcgm_xid_count=True), "xid")):
        (dcgm,) = [
            r
            for g in rules.rule_file(settings)["groups"]
            for r in g["rules"]
            if r.get("alert") == "FsdpDcgmXidCritical"
        ]
        listed = set(map(int, re.search(label + r'=~"([0-9|]+)"', dcgm["expr"]).group(1).split("|")))
        assert listed == critical
    # A stock exporter has no windowed count: by default only the last-XID field is read.
    assert "DCGM_EXP_XID_ERRORS_COUNT" not in rules.render()
    assert "DCGM_EXP_XID_ERRORS_COUNT" in rules.render(Settings(dcgm_xid_count=True))
