"""``daemonsets/generated/``: the PrometheusRule and dashboard ConfigMaps rendered with ``dashboards/``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from observe.errors import UserError
from observe.k8s import names
from observe.monitoring import alertmanager, dashboards, generate, kube_objects, rules
from observe.monitoring.settings import Settings
from tests.support.kube_checks import K8S_VERSION, REPO, kustomize


def test_the_committed_folder_matches_what_the_settings_generate() -> None:
    """CI's regenerate-and-diff check: daemonsets/generated is what the default settings produce."""
    files = generate.render_k8s(Settings())
    assert generate.differences(files, REPO / "daemonsets" / "generated", generate.OWNED["k8s"]) == []


def test_rules_and_dashboards_become_labelled_objects_in_the_build(tmp_path: Path) -> None:
    copy = tmp_path / "daemonsets"
    shutil.copytree(REPO / "daemonsets", copy)
    shutil.rmtree(copy / "generated")
    written = generate.write(generate.render_k8s(Settings()), copy / "generated", generate.OWNED["k8s"])
    assert sorted(p.name for p in written) == [
        "alertmanagerconfig.yaml",
        *(kube_objects.configmap_file(Path(n).stem) for n in sorted(dashboards.render())),
        "kustomization.yaml",
        "prometheusrule.yaml",
    ]
    objs = kustomize(copy)
    (routing,) = [o for o in objs if o["kind"] == "AlertmanagerConfig"]
    assert routing["spec"] == alertmanager.crd_spec(Settings())
    assert routing["metadata"]["namespace"] == names.NAMESPACE  # the operator matches namespace="fsdp-observe"
    (rule,) = [o for o in objs if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == rules.rule_file(Settings())
    assert rule["metadata"]["namespace"] == names.NAMESPACE
    assert rule["metadata"]["labels"].items() >= names.PROMETHEUS_SELECTOR_LABELS.items()
    maps = {
        o["metadata"]["name"]: o
        for o in objs
        if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"]
    }
    dash = maps["fsdp-observe-dashboard-training-run"]
    kubernetes_validate.validate(dash, K8S_VERSION, strict=True)
    assert json.loads(dash["data"]["training-run.json"]) == dashboards.dashboards()["training-run.json"]
    assert dash["metadata"]["labels"]["app.kubernetes.io/version"]  # the kustomization's labels reach them


def test_writing_is_deterministic_and_removes_stale_files(tmp_path: Path) -> None:
    out = tmp_path / "generated"
    out.mkdir()
    (out / "dashboard-old-configmap.yaml").write_text("stale: true\n")
    (out / "README.txt").write_text("not ours\n")  # not an owned pattern: left alone
    first = {p.name: p.read_text() for p in generate.write(generate.render_k8s(Settings()), out, ("*.yaml",))}
    second = generate.render_k8s(Settings())
    assert first == second
    assert sorted(p.name for p in out.iterdir()) == sorted([*second, "README.txt"])
    assert yaml.safe_load(second["kustomization.yaml"])["resources"] == sorted(
        n for n in second if n != "kustomization.yaml"
    )
    assert generate.differences(second, out, ("*.yaml",)) == []
    (out / "prometheusrule.yaml").write_text("edited by hand\n")
    assert generate.differences(second, out, ("*.yaml",)) == ["prometheusrule.yaml"]


def test_a_dashboard_over_the_configmap_limit_is_one_user_error() -> None:
    with pytest.raises(UserError, match="a ConfigMap holds at most 1 MiB") as err:
        kube_objects.dashboard_configmap("huge", json.dumps({"panels": ["x" * (1024 * 1024)]}))
    assert err.value.fix.endswith("load them into Grafana another way")
