"""``daemonsets/generated/``: the PrometheusRule and dashboard ConfigMaps written from ``dashboards/``."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kube_checks import K8S_VERSION, REPO, kustomize
from observe.k8s import generated, names

DASHBOARD = {"title": "FSDP training", "uid": "fsdp-training", "schemaVersion": 39, "panels": [
    {"type": "timeseries", "title": "Tokens/s", "targets": [{"expr": "sum(fsdp_train_tokens_per_second)"}]}]}
RULES = {"groups": [{"name": "fsdp-observe.rules", "rules": [
    {"record": "run_id:fsdp_train_tokens_per_second:sum", "expr": "sum by (run_id) (fsdp_train_tokens_per_second)"},
    {"alert": "FsdpTrainingStalled", "expr": "time() - fsdp_train_last_step_timestamp_seconds > 600", "for": "5m",
     "labels": {"severity": "critical"}, "annotations": {"summary": "Run {{ $labels.run_id }} made no step for 10m"}},
]}]}


def fake_dashboards(root: Path) -> Path:
    """A dashboards/ folder like the dashboards generator writes (one dashboard, one rule file)."""
    folder = root / "dashboards"
    folder.mkdir()
    (folder / "FSDP Training.json").write_text(json.dumps(DASHBOARD, indent=2, sort_keys=True) + "\n")
    (folder / generated.RULES_FILE).write_text(yaml.safe_dump(RULES, sort_keys=False))
    return folder


def test_the_committed_folder_matches_the_committed_dashboards() -> None:
    """CI's regenerate-and-diff check: daemonsets/generated is what dashboards/ produces."""
    assert generated.differences(REPO / "dashboards", REPO / "daemonsets" / "generated") == []


def test_rules_and_dashboards_become_labelled_objects_in_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "daemonsets"
    shutil.copytree(REPO / "daemonsets", copy)
    written = generated.write(fake_dashboards(tmp_path), copy / "generated")
    assert sorted(p.name for p in written) == [
        "dashboard-fsdp-training-configmap.yaml", "kustomization.yaml", "prometheusrule.yaml"]
    objs = kustomize(copy)
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == RULES
    assert rule["metadata"]["namespace"] == names.NAMESPACE
    assert rule["metadata"]["labels"].items() >= names.PROMETHEUS_SELECTOR_LABELS.items()
    (dash,) = [o for o in objs if o["kind"] == "ConfigMap"]
    kubernetes_validate.validate(dash, K8S_VERSION, strict=True)
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dash["metadata"]["name"] == "fsdp-observe-dashboard-fsdp-training"
    assert json.loads(dash["data"]["fsdp-training.json"]) == DASHBOARD
    assert dash["metadata"]["labels"]["app.kubernetes.io/version"]  # the kustomization's labels reach them


def test_writing_is_deterministic_and_removes_stale_files(tmp_path: Path) -> None:
    dashboards, out = fake_dashboards(tmp_path), tmp_path / "generated"
    first = {p.name: p.read_text() for p in generated.write(dashboards, out)}
    (dashboards / "FSDP Training.json").unlink()
    second = {p.name: p.read_text() for p in generated.write(dashboards, out)}
    assert sorted(p.name for p in out.iterdir()) == ["kustomization.yaml", "prometheusrule.yaml"]
    assert second["prometheusrule.yaml"] == first["prometheusrule.yaml"]
    assert yaml.safe_load(second["kustomization.yaml"])["resources"] == ["prometheusrule.yaml"]
    assert generated.differences(dashboards, out) == []


def test_check_mode_names_what_is_out_of_date(tmp_path: Path) -> None:
    dashboards, out = fake_dashboards(tmp_path), tmp_path / "generated"
    cmd = [sys.executable, "-m", "observe.k8s.generated", "--dashboards", str(dashboards), "--out", str(out)]
    stale = subprocess.run([*cmd, "--check"], capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1
    assert "out of date: dashboard-fsdp-training-configmap.yaml, kustomization.yaml, prometheusrule.yaml" in stale.stderr
    assert subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0
    assert subprocess.run([*cmd, "--check"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.parametrize("name, text, needle", [
    ("broken.json", "{not json", "broken.json is not valid JSON"),
    ("huge.json", json.dumps({"panels": ["x" * (1024 * 1024)]}), "a ConfigMap holds at most 1 MiB"),
    (generated.RULES_FILE, "groups: {a: b}\n", "has no 'groups' list"),
], ids=["broken-json", "over-1MiB", "rules-without-groups"])  # short ids: pytest puts the id in
# PYTEST_CURRENT_TEST, and a 1 MiB value there makes every subprocess fail with E2BIG
def test_a_broken_input_is_one_error(tmp_path: Path, name: str, text: str, needle: str) -> None:
    folder = tmp_path / "dashboards"
    folder.mkdir()
    (folder / name).write_text(text)
    proc = subprocess.run([sys.executable, "-m", "observe.k8s.generated", "--dashboards", str(folder),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written
