"""The generated Alertmanager configuration under the real ``amtool`` (Debian's prometheus-alertmanager 0.25).

Both forms: ``dashboards/alertmanager.yml`` as it is, and ``daemonsets/generated/alertmanagerconfig.yaml``
validated against the operator's CRD schema (tests/schemas) and translated the way the
prometheus-operator does (receivers renamed ``<namespace>/<name>/<receiver>``, the top route
continued and, under the default OnNamespace strategy, matched on ``namespace``), then checked and
route-tested with amtool like the plain file. amtool resolves routes; it does not exercise
grouping or inhibition, which tests/e2e/test_alerting.py proves against a running Alertmanager.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from observe.errors import UserError
from observe.monitoring import alertmanager, rules
from observe.monitoring.settings import Settings
from tests.support.crd_yaml import load as load_crd

AMTOOL = shutil.which("amtool")
pytestmark = pytest.mark.skipif(
    AMTOOL is None, reason="amtool is missing: apt-get install prometheus-alertmanager (CI installs it)"
)
REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "tests" / "schemas" / "monitoring.coreos.com_alertmanagerconfigs.yaml"
#: One receiver per class, so every route is told apart.
DISTINCT = Settings(
    receiver_node_reboot="reboot-pager",
    receiver_gpu_reset="reset-pager",
    receiver_nvlink_fabric="fabric-pager",
    receiver_application="app-tickets",
    receiver_unknown="catalogue-tickets",
    receiver_training="ml-oncall",
    receiver_default="sink",
)
CLASS_ALERTS = {
    "node_reboot": "FsdpGpuXidNodeReboot",
    "gpu_reset": "FsdpGpuXidGpuReset",
    "nvlink_fabric": "FsdpGpuXidNvlinkFabric",
    "application": "FsdpGpuXidApplicationBurst",
    "unknown": "FsdpGpuXidUnknown",
}


def amtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([AMTOOL, *args], capture_output=True, text=True, timeout=60)


def routes_to(config: Path, *labels: str) -> str:
    """The receiver(s) amtool resolves ``labels`` to."""
    done = amtool("config", "routes", "test", f"--config.file={config}", *labels)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def write(tmp_path: Path, cfg: dict[str, Any], name: str = "alertmanager.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def test_amtool_accepts_the_committed_file() -> None:
    committed = REPO / "dashboards" / alertmanager.CONFIG_FILE
    done = amtool("check-config", str(committed))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout and " - 3 inhibit rules" in done.stdout
    assert f" - {len(alertmanager.receiver_names(Settings()))} receivers" in done.stdout


def test_amtool_refuses_a_broken_route_tree(tmp_path: Path) -> None:
    """The harness can fail: a route naming a receiver that is not defined."""
    cfg = alertmanager.config()
    cfg["receivers"] = cfg["receivers"][:1]
    done = amtool("check-config", str(write(tmp_path, cfg)))
    assert done.returncode != 0 and "undefined receiver" in done.stdout + done.stderr


@pytest.mark.parametrize("xid_class", sorted(CLASS_ALERTS))
def test_each_severity_class_routes_to_the_receiver_its_setting_names(tmp_path: Path, xid_class: str) -> None:
    path = write(tmp_path, alertmanager.config(DISTINCT))
    expected = getattr(DISTINCT, alertmanager.CLASS_RECEIVERS[xid_class])
    labels = (f"alertname={CLASS_ALERTS[xid_class]}", f"xid_class={xid_class}", "node=gpu-node-1", "gpu=3")
    assert routes_to(path, *labels) == expected
    # dcgm-exporter's variant carries the class in the same label and routes the same way
    if xid_class in rules.CRITICAL_XID_CLASSES:
        assert routes_to(path, "alertname=FsdpDcgmXidCritical", f"xid_class={xid_class}") == expected
    verify = amtool("config", "routes", "test", f"--config.file={path}", f"--verify.receivers={expected}", *labels)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    wrong = amtool("config", "routes", "test", f"--config.file={path}", "--verify.receivers=sink", *labels)
    assert wrong.returncode != 0  # amtool's verification can fail


def test_lost_gpus_runs_and_foreign_alerts(tmp_path: Path) -> None:
    path = write(tmp_path, alertmanager.config(DISTINCT))
    assert routes_to(path, "alertname=FsdpGpuLost", "node=gpu-node-1") == "reboot-pager"
    assert routes_to(path, "alertname=FsdpGpuReadingStale", "node=gpu-node-1") == "reset-pager"
    assert routes_to(path, "alertname=FsdpGpuUnreadable", "node=gpu-node-1") == "reset-pager"
    for name in alertmanager.TRAINING_ALERTS:
        assert routes_to(path, f"alertname={name}", "namespace=ml", "run_id=llama-ft") == "ml-oncall"
    # someone else's alert, even one carrying our labels, stays on the root route
    assert routes_to(path, "alertname=KubePodCrashLooping", "xid_class=node_reboot") == "sink"


def test_grouping_and_intervals_come_from_the_settings() -> None:
    s = Settings(group_wait="10s", group_interval="2m", repeat_interval="12h")
    route = alertmanager.config(s)["route"]
    assert (route["group_wait"], route["group_interval"], route["repeat_interval"]) == ("10s", "2m", "12h")
    (ours,) = route["routes"]
    by = {r["matchers"][0]: r["group_by"] for r in ours["routes"]}
    assert by['xid_class="node_reboot"'] == ["node", "xid_class"]  # one node's burst: one notification
    assert by['alertname="FsdpGpuLost"'] == ["node", "alertname"]
    assert by[f'alertname=~"{"|".join(alertmanager.TRAINING_ALERTS)}"'] == ["namespace", "run_id", "alertname"]
    assert ours["matchers"] == [f'alertname=~"{"|".join(rules.alert_names(s))}"']
    counted = alertmanager.config(Settings(dcgm_xid_count=True))["route"]["routes"][0]["matchers"][0]
    assert "FsdpDcgmXidApplicationBurst" in counted


def test_inhibitions() -> None:
    inhibit = alertmanager.config()["inhibit_rules"]
    assert inhibit == [
        {
            "source_matchers": ['xid_class="node_reboot"'],
            "target_matchers": ['xid_class=~"gpu_reset|application"'],
            "equal": ["node"],
        },
        {
            "source_matchers": ['alertname="FsdpGpuLost"'],
            "target_matchers": ['xid_class=~".+"'],
            "equal": ["node", "gpu_uuid"],
        },
        {
            "source_matchers": ['alertname="FsdpGpuLost"'],
            "target_matchers": ['alertname=~"FsdpGpuReadingStale|FsdpGpuUnreadable"'],
            "equal": ["node", "gpu_uuid"],
        },
    ]


# --- receivers --------------------------------------------------------------------------------

RECEIVERS = [
    {
        "name": "fsdp-observe-gpu-page",
        "pagerduty_configs": [
            {"routing_key_file": "/etc/alertmanager/secrets/pagerduty-routing-key", "severity": "critical"}
        ],
    },
    {
        "name": "fsdp-observe-gpu-ticket",
        "slack_configs": [{"api_url_file": "/etc/alertmanager/secrets/slack-webhook-url", "channel": "#gpu-health"}],
    },
    {
        "name": "fsdp-observe-training",
        "webhook_configs": [
            {
                "url": "http://alert-bridge.monitoring.svc:8080/alerts",
                "http_config": {"authorization": {"credentials_file": "/etc/alertmanager/secrets/bridge-token"}},
            }
        ],
    },
]


def test_receivers_merge_by_name_and_amtool_accepts_the_result(tmp_path: Path) -> None:
    merged = alertmanager.with_receivers(alertmanager.config(), RECEIVERS)
    assert [r["name"] for r in merged["receivers"]] == alertmanager.receiver_names(Settings())
    assert merged["receivers"][0] == {"name": "fsdp-observe-default"}  # not given: stays without integration
    assert merged["receivers"][1]["pagerduty_configs"][0]["routing_key_file"].endswith("pagerduty-routing-key")
    done = amtool("check-config", str(write(tmp_path, merged)))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "receivers, message",
    [
        (
            [{"name": "fsdp-observe-gpu-pager"}],
            "--receivers: fsdp-observe-gpu-pager: no route sends to this receiver; did you mean fsdp-observe-gpu-page?",
        ),
        (
            [
                {
                    "name": "fsdp-observe-gpu-ticket",
                    "slack_configs": [{"api_url": "https://hooks.slack.com/services/T/B/x"}],
                }
            ],
            "--receivers: fsdp-observe-gpu-ticket: api_url: a secret written into the configuration; put it in a file "
            "readable by Alertmanager and use api_url_file",
        ),
        (
            [{"name": "fsdp-observe-gpu-page", "pagerduty_configs": [{"routing_key": "R0UT1NGK3Y"}]}],
            "--receivers: fsdp-observe-gpu-page: routing_key: a secret written into the configuration; put it in a file "
            "readable by Alertmanager and use routing_key_file",
        ),
        ({"fsdp-observe-gpu-page": {}}, "--receivers: expected a list of receivers, each a mapping with a name"),
    ],
)
def test_bad_receivers_are_one_user_error(receivers: Any, message: str) -> None:
    with pytest.raises(UserError) as err:
        alertmanager.with_receivers(alertmanager.config(), receivers)
    assert str(err.value).startswith(message)


def test_the_cli_writes_the_merged_file_and_refuses_an_inline_secret(tmp_path: Path) -> None:
    receivers = tmp_path / "receivers.yaml"
    receivers.write_text(yaml.safe_dump({"receivers": RECEIVERS}))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "observe.cli", "dashboards", "--no-k8s", "--out", str(out)]
    done = subprocess.run([*cmd, "--receivers", str(receivers)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load((out / alertmanager.CONFIG_FILE).read_text())
    assert written["receivers"] == alertmanager.with_receivers(alertmanager.config(), RECEIVERS)["receivers"]
    assert amtool("check-config", str(out / alertmanager.CONFIG_FILE)).returncode == 0
    receivers.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "fsdp-observe-training",
                    "webhook_configs": [{"url": "http://x", "http_config": {"bearer_token": "s3cr3t"}}],
                }
            ]
        )
    )
    before = (out / alertmanager.CONFIG_FILE).read_text()
    bad = subprocess.run([*cmd, "--receivers", str(receivers)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == (
        "error: --receivers: fsdp-observe-training: bearer_token: a secret written into the "
        "configuration; put it in a file readable by Alertmanager and use bearer_token_file\n"
    )
    assert (out / alertmanager.CONFIG_FILE).read_text() == before  # nothing written


# --- the AlertmanagerConfig ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    crd = load_crd(SCHEMA)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    assert version["served"] and version["storage"]
    return version["schema"]["openAPIV3Schema"]


def committed_resource() -> dict:
    return yaml.safe_load((REPO / "daemonsets" / "generated" / alertmanager.RESOURCE_FILE).read_text())


def test_the_alertmanagerconfig_validates_against_the_operator_crd(crd_schema: dict) -> None:
    from tests.support.kube_checks import unknown_fields, validate_against

    resource = committed_resource()
    assert resource["spec"] == alertmanager.crd_spec(Settings())
    validate_against(resource, crd_schema)
    assert unknown_fields(resource, crd_schema) == []
    # the CRD leaves child routes open (x-kubernetes-preserve-unknown-fields); the operator reads
    # them as routes, so check each against the route schema
    route_schema = crd_schema["properties"]["spec"]["properties"]["route"]
    children = resource["spec"]["route"]["routes"]
    assert len(children) == len(alertmanager.CLASS_RECEIVERS) + 3
    for child in children:
        validate_against(child, route_schema)
        assert unknown_fields(child, route_schema) == []


def test_the_crd_validation_can_fail(crd_schema: dict) -> None:
    import jsonschema

    from tests.support.kube_checks import unknown_fields, validate_against

    resource = committed_resource()
    resource["spec"]["route"]["groupWait"] = "30 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate_against(resource, crd_schema)
    resource = committed_resource()
    resource["spec"]["inhibitRules"][0]["sourceMatchers"] = resource["spec"]["inhibitRules"][0].pop("sourceMatch")
    assert unknown_fields(resource, crd_schema) == [".spec.inhibitRules[0].sourceMatchers"]


def operator_translation(resource: dict, namespace: str = "fsdp-observe", on_namespace: bool = True) -> dict:
    """The Alertmanager configuration the prometheus-operator writes for one AlertmanagerConfig
    (``pkg/alertmanager/amcfg.go``): receivers prefixed ``<namespace>/<name>/``, its top route a
    continued child of a ``null`` root, and a ``namespace`` matcher under OnNamespace."""
    prefix = f"{namespace}/{resource['metadata']['name']}/"
    keys = {
        "groupBy": "group_by",
        "groupWait": "group_wait",
        "groupInterval": "group_interval",
        "repeatInterval": "repeat_interval",
    }

    def matchers(items: list[dict]) -> list[str]:
        return [f'{m["name"]}{m.get("matchType", "=")}"{m["value"]}"' for m in items]

    def route(r: dict, top: bool = False) -> dict:
        out: dict[str, Any] = {"receiver": prefix + r["receiver"]}
        out["matchers"] = matchers(r.get("matchers", [])) + (
            [f'namespace="{namespace}"'] if top and on_namespace else []
        )
        out.update({keys[k]: v for k, v in r.items() if k in keys})
        if top:
            out["continue"] = True
        if r.get("routes"):
            out["routes"] = [route(child) for child in r["routes"]]
        return out

    spec = resource["spec"]
    scope = [f'namespace="{namespace}"'] if on_namespace else []
    return {
        "route": {"receiver": "null", "routes": [route(spec["route"], top=True)]},
        "inhibit_rules": [
            {
                "source_matchers": matchers(i["sourceMatch"]) + scope,
                "target_matchers": matchers(i["targetMatch"]) + scope,
                "equal": i["equal"],
            }
            for i in spec["inhibitRules"]
        ],
        "receivers": [{"name": "null"}, *({"name": prefix + r["name"]} for r in spec["receivers"])],
    }


@pytest.mark.parametrize("xid_class", sorted(CLASS_ALERTS))
def test_the_alertmanagerconfig_routes_each_class_like_the_plain_file(tmp_path: Path, xid_class: str) -> None:
    from observe.monitoring import kube_objects

    resource = kube_objects.alertmanager_config(alertmanager.crd_spec(DISTINCT))
    path = write(tmp_path, operator_translation(resource))
    done = amtool("check-config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    expected = getattr(DISTINCT, alertmanager.CLASS_RECEIVERS[xid_class])
    labels = (f"alertname={CLASS_ALERTS[xid_class]}", f"xid_class={xid_class}", "node=gpu-node-1")
    # the agent's XID alerts carry its namespace (the ServiceMonitor's target label): they arrive
    assert routes_to(path, *labels, "namespace=fsdp-observe") == f"fsdp-observe/fsdp-observe/{expected}"
    # an alert from elsewhere does not, under the operator's default strategy
    assert routes_to(path, *labels, "namespace=gpu-operator") == "null"
    lenient = write(tmp_path, operator_translation(resource, on_namespace=False), "lenient.yml")
    assert routes_to(lenient, *labels, "namespace=gpu-operator") == f"fsdp-observe/fsdp-observe/{expected}"
    assert routes_to(lenient, "alertname=KubePodCrashLooping", f"xid_class={xid_class}") == "null"
