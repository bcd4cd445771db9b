"""The receiver examples of docs/alerting.md (``examples/alerting/``) work as written, hold no secret,
and every notification template in them parses and runs (``amtool template render``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from observe.monitoring import alertmanager
from observe.monitoring.settings import Settings
from tests.support.crd_yaml import load as load_crd
from tests.support.kube_checks import REPO, SCHEMAS, kustomize, unknown_fields, validate_against

AMTOOL = shutil.which("amtool")
pytestmark = pytest.mark.skipif(AMTOOL is None, reason="amtool is missing: apt-get install prometheus-alertmanager")
EXAMPLES = REPO / "examples" / "alerting"
#: What a secret would look like if one were written into an example.
SECRET_SHAPES = re.compile(r"hooks\.slack\.com/services/T|xox[bp]-|[0-9a-f]{32}|R0[0-9A-Z]{30}")


def templates(obj: object) -> list[str]:
    """Every string in ``obj`` that holds a Go template."""
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in templates(v)]
    if isinstance(obj, list):
        return [t for v in obj for t in templates(v)]
    return [obj] if isinstance(obj, str) and "{{" in obj else []


def render(template: str, tmp_path: Path) -> subprocess.CompletedProcess:
    glob = tmp_path / "t.tmpl"
    glob.write_text('{{ define "t" }}' + template + "{{ end }}")
    return subprocess.run(
        [AMTOOL, "template", "render", f"--template.glob={glob}", '--template.text={{ template "t" . }}'],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_receivers_example_merges_and_amtool_accepts_it(tmp_path: Path) -> None:
    receivers = yaml.safe_load((EXAMPLES / "receivers.yaml").read_text())["receivers"]
    assert {r["name"] for r in receivers} <= set(alertmanager.receiver_names(Settings()))
    merged = alertmanager.with_receivers(alertmanager.config(), receivers)  # refuses inline secrets
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(merged))
    done = subprocess.run([AMTOOL, "check-config", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    found = templates(receivers)
    assert len(found) >= 8
    for template in found:
        done = render(template, tmp_path)
        assert done.returncode == 0, (template, done.stderr)


def test_the_template_check_can_fail(tmp_path: Path) -> None:
    assert render("{{ range .Alerts }}{{ .Labels.xid }", tmp_path).returncode != 0


def test_the_kube_prometheus_stack_example_builds_and_fits_the_crd(tmp_path: Path) -> None:
    crd = load_crd(SCHEMAS / "monitoring.coreos.com_alertmanagerconfigs.yaml")
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = version["schema"]["openAPIV3Schema"]
    (resource,) = [o for o in kustomize(EXAMPLES / "kube-prometheus-stack") if o["kind"] == "AlertmanagerConfig"]
    validate_against(resource, schema)
    assert unknown_fields(resource, schema) == []
    generated = alertmanager.crd_spec(Settings())
    assert (
        resource["spec"]["route"] == generated["route"]
        and resource["spec"]["inhibitRules"] == generated["inhibitRules"]
    )  # the patch touched only the receivers
    assert [r["name"] for r in resource["spec"]["receivers"]] == [r["name"] for r in generated["receivers"]]
    refs = [
        ref
        for r in resource["spec"]["receivers"]
        for configs in r.values()
        if isinstance(configs, list)
        for c in configs
        for ref in (c.get("apiURL"), c.get("routingKey"), c.get("urlSecret"))
        if ref
    ]
    assert len(refs) == 3 and {ref["name"] for ref in refs} == {"fsdp-observe-alerting"}  # Secret references
    for template in templates(resource["spec"]["receivers"]):
        done = render(template, tmp_path)
        assert done.returncode == 0, (template, done.stderr)


def test_no_example_holds_a_secret() -> None:
    for path in EXAMPLES.rglob("*.yaml"):
        assert not SECRET_SHAPES.search(path.read_text()), path


def test_docs_alerting_lists_every_alert_with_its_receiver_setting() -> None:
    from observe.monitoring import rules
    from observe.monitoring.settings import RECEIVER_FIELDS

    doc = (REPO / "docs" / "alerting.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (Fsdp\w+) \|(?:[^|]*\|){3} ([^|]+) \|", doc, re.M)}
    assert sorted(rows) == sorted(rules.alert_names(Settings(dcgm_xid_count=True)))
    for name, receiver in rows.items():
        setting = re.match(r"`(receiver_\w+)`|the class's receiver", receiver.strip())
        assert setting, (name, receiver)
        assert setting.group(1) is None or setting.group(1) in RECEIVER_FIELDS
    for field in ("group_wait", "group_interval", "repeat_interval", "--receivers", "amtool config routes test"):
        assert field in doc
