"""``daemonsets/``: builds with the real ``kubectl kustomize``, validates strictly for a current
Kubernetes, and agrees with the code (``observe/k8s/names.py``, the catalog's ports, pyproject)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import tomllib
import yaml

from observe.catalog import AGENT_PORT
from observe.k8s import names
from tests.support.kube_checks import K8S_VERSION, REPO, kustomize

DAEMONSETS = REPO / "daemonsets"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
#: Kinds kubernetes-validate has no schema for; SHAPES below checks the fields they use.
CRD_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}
#: Fields of the prometheus-operator monitoring.coreos.com/v1 API these manifests may use
#: (https://prometheus-operator.dev/docs/api-reference/api/), so a misspelt key fails here.
SHAPES = {
    "spec.PodMonitor": {"namespaceSelector", "selector", "podMetricsEndpoints", "jobLabel", "podTargetLabels"},
    "spec.ServiceMonitor": {"namespaceSelector", "selector", "endpoints", "jobLabel", "targetLabels"},
    "spec.PrometheusRule": {"groups"},
    # validated in full against the operator's CRD schema by tests/dashboards/test_alertmanager.py
    "spec.AlertmanagerConfig": {"route", "inhibitRules", "receivers"},
    "endpoint": {
        "port",
        "path",
        "interval",
        "scrapeTimeout",
        "scheme",
        "honorLabels",
        "relabelings",
        "metricRelabelings",
    },
    "relabeling": {"sourceLabels", "separator", "targetLabel", "regex", "replacement", "action", "modulus"},
    "namespaceSelector": {"any", "matchNames"},
}


@pytest.fixture(scope="module")
def built() -> list[dict]:
    return kustomize(DAEMONSETS)


@pytest.fixture(scope="module")
def debug_built() -> list[dict]:
    return kustomize(DAEMONSETS / "debug") + kustomize(DAEMONSETS / "viewer")


def by_kind(objs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def pod_templates(objs: list[dict]) -> list[tuple[str, dict]]:
    return [(o["metadata"]["name"], o["spec"]["template"]) for o in objs if o["kind"] in ("DaemonSet", "Deployment")]


# --- builds and validates ------------------------------------------------------------------------


def test_everything_validates_strictly(built, debug_built) -> None:
    kinds = set()
    for obj in built + debug_built:
        kinds.add(obj["kind"])
        if obj["kind"] in CRD_KINDS:
            check_monitoring_shape(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert {
        "Namespace",
        "ServiceAccount",
        "DaemonSet",
        "Service",
        "ServiceMonitor",
        "PodMonitor",
        "Role",
        "RoleBinding",
        "Deployment",
        "NetworkPolicy",
    } <= kinds


def test_the_kubernetes_validate_command_passes_the_build(tmp_path: Path) -> None:
    """The same check CI users run: ``kubernetes-validate --strict -k 1.34.0`` on the built stream."""
    for source, name in (
        (DAEMONSETS, "main.yaml"),
        (DAEMONSETS / "debug", "debug.yaml"),
        (DAEMONSETS / "viewer", "viewer.yaml"),
    ):
        out = tmp_path / name
        out.write_text(yaml.safe_dump_all(kustomize(source)))
        proc = subprocess.run(
            [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S_VERSION, str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "ERROR" not in proc.stdout + proc.stderr


def check_monitoring_shape(obj: dict) -> None:
    spec = obj["spec"]
    assert set(spec) <= SHAPES[f"spec.{obj['kind']}"], obj["metadata"]["name"]
    for endpoint in spec.get("podMetricsEndpoints", []) + spec.get("endpoints", []):
        assert set(endpoint) <= SHAPES["endpoint"]
        for relabel in endpoint.get("relabelings", []):
            assert set(relabel) <= SHAPES["relabeling"]
    assert set(spec.get("namespaceSelector", {})) <= SHAPES["namespaceSelector"]
    # kube-prometheus-stack only picks up monitors and rules carrying its release label.
    assert obj["metadata"]["labels"].items() >= names.PROMETHEUS_SELECTOR_LABELS.items()


def test_a_misspelt_monitor_field_is_caught(built) -> None:
    monitor = dict(by_kind(built, "PodMonitor", "fsdp-observe-trainer"))
    monitor["spec"] = {**monitor["spec"], "podMetricEndpoints": monitor["spec"]["podMetricsEndpoints"]}
    with pytest.raises(AssertionError):
        check_monitoring_shape(monitor)


def test_one_resource_per_file_and_no_orphans() -> None:
    listed: set[Path] = set()
    for kustomization in DAEMONSETS.rglob("kustomization.yaml"):
        spec = yaml.safe_load(kustomization.read_text())
        entries = spec.get("resources", []) + [p["path"] for p in spec.get("patches", []) if "path" in p]
        for entry in entries:
            path = (kustomization.parent / entry).resolve()
            if path.is_file():
                docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
                assert len(docs) == 1, f"{path.name} holds {len(docs)} resources"
                listed.add(path)
    files = {p.resolve() for p in DAEMONSETS.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files == listed, f"not in any kustomization: {sorted(str(p) for p in files - listed)}"


# --- labels, selectors, versions ---------------------------------------------------------------------


def test_labels_carry_the_version_and_selectors_never_do(built, debug_built) -> None:
    for obj in built + debug_built:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "fsdp-observe"
        assert labels["app.kubernetes.io/version"] == VERSION
        assert "app.kubernetes.io/name" in labels or obj["kind"] == "Namespace"
    selectors = [
        o["spec"]["selector"]["matchLabels"] for o in built + debug_built if o["kind"] in ("DaemonSet", "Deployment")
    ]
    selectors += [o["spec"]["selector"] for o in built if o["kind"] == "Service"]
    for selector in selectors:
        assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/component"}
    for name, template in pod_templates(built + debug_built):
        owner = next(
            o for o in built + debug_built if o["metadata"]["name"] == name and "template" in o.get("spec", {})
        )
        assert owner["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        assert template["metadata"]["labels"]["app.kubernetes.io/version"] == VERSION


def test_both_kustomizations_use_the_project_images_at_the_project_version() -> None:
    """The agent DaemonSet: the slim agent image; the debug DaemonSets: the trainer image (htop, nvtop)."""
    images = [
        yaml.safe_load((d / "kustomization.yaml").read_text())["images"] for d in (DAEMONSETS, DAEMONSETS / "debug")
    ]
    assert images[0] == [{"name": "fsdp-observe-agent", "newName": "fsdp-observe-agent", "newTag": VERSION}]
    assert images[1] == [{"name": "fsdp-observe", "newName": "fsdp-observe", "newTag": VERSION}]


def dockerfile_stages() -> dict[str, str]:
    """The Dockerfile's build stages, ``{target: its text}`` (``FROM ... AS target``)."""
    text = (REPO / "Dockerfile").read_text()
    parts = re.split(r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_agent_image_is_slim_and_separate_from_the_trainer_image() -> None:
    """No container engine runs here: the Dockerfile's stages are checked as text."""
    stages = dockerfile_stages()
    assert list(stages) == ["agent", "trainer"]  # the trainer is the default (last) target
    installs = {name: re.findall(r"pip install [^\n]*", text) for name, text in stages.items()}
    assert installs["agent"] == ["pip install --no-cache-dir '.[agent]'"]  # no torch, no CUDA libraries
    froms = re.findall(r"^FROM\s+(\S+)", (REPO / "Dockerfile").read_text(), flags=re.M)
    assert froms[0] == "python:3.12-slim-bookworm"  # the agent's base never carries CUDA
    assert "pip install --no-cache-dir torch" in stages["trainer"] and "'.[trainer,etcd]'" in stages["trainer"]


def test_everything_is_in_the_add_on_namespace(built) -> None:
    namespaced = [o for o in built if o["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {names.NAMESPACE}
    assert by_kind(built, "Namespace")["metadata"]["name"] == names.NAMESPACE


# --- pods: hardening, resources, a comment on each privilege kept ----------------------------------------


def test_every_container_has_requests_limits_and_a_read_only_root(built, debug_built) -> None:
    """Hardening every pod shares (the Pod Security levels and their exceptions:
    tests/k8s/test_pod_security.py)."""
    for name, template in pod_templates(built + debug_built):
        spec = template["spec"]
        # the viewer pod lists pods through the API with its service account's token
        assert spec.get("automountServiceAccountToken") is (name == "fsdp-observe-viewer"), name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        if name != names.AGENT_NAME:  # uid 0 for its one capability (agent-daemonset.yaml)
            assert spec["securityContext"]["runAsNonRoot"] is True, name
        for c in spec["containers"]:
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (name, kind)
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert not sc.get("privileged"), name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            ports = c.get("ports", [])
            assert all(p.get("name") for p in ports), name
            for probe in ("livenessProbe", "readinessProbe"):
                if probe in c:
                    assert isinstance(c[probe]["httpGet"]["port"], str), (name, "probe by port name")


PRIVILEGES = re.compile(
    r"^\s*(hostPID: true|privileged: true|runAsUser: 0|hostPath:|add: \[.+\]|"
    r"automountServiceAccountToken: true|pod-security.kubernetes.io/enforce: privileged)\s*$"
)


def test_each_privilege_kept_has_a_comment_above_it() -> None:
    """STYLE: a comment on each privilege kept (hostPID, privileged, root, hostPath, an added
    capability, a service-account token, the namespace's Pod Security level)."""
    seen = 0
    for path in DAEMONSETS.rglob("*.yaml"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if PRIVILEGES.match(line):
                seen += 1
                above = lines[i - 1].strip() if i else ""
                # directly above, or above the list item / key that holds it
                above2 = lines[i - 2].strip() if i > 1 else ""
                assert above.startswith("#") or (above.startswith("- name:") and above2.startswith("#")), (
                    f"{path.relative_to(REPO)}:{i + 1}: {line.strip()} without a comment"
                )
    assert seen >= 7


def test_the_agent_matches_the_contract_in_names_py(built) -> None:
    ds = by_kind(built, "DaemonSet", names.AGENT_NAME)
    assert ds["spec"]["selector"]["matchLabels"] == names.AGENT_LABELS
    spec = ds["spec"]["template"]["spec"]
    (agent,) = spec["containers"]
    assert agent["image"] == f"fsdp-observe-agent:{VERSION}"
    assert tuple(agent["command"]) == names.AGENT_COMMAND
    assert agent["ports"] == [{"name": names.AGENT_PORT_NAME, "containerPort": AGENT_PORT, "protocol": "TCP"}]
    for probe in ("livenessProbe", "readinessProbe"):
        assert agent[probe]["httpGet"] == {"path": names.AGENT_HEALTH_PATH, "port": names.AGENT_PORT_NAME}
    env = {e["name"]: e for e in agent["env"]}
    assert env[names.NODE_NAME_ENV]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert {k: env[k]["value"] for k in names.AGENT_NVIDIA_ENV} == names.AGENT_NVIDIA_ENV
    assert "hostPID" not in spec  # only in components/agent-host-processes
    assert agent["securityContext"]["capabilities"]["add"] == list(names.AGENT_CAPABILITIES)
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    # no hostPath: the kernel log comes through syslog(2); the XID cursor lives in an emptyDir
    assert [v["name"] for v in spec["volumes"]] == ["tmp", "state"]
    state = names.AGENT_COMMAND[names.AGENT_COMMAND.index("--state-dir") + 1]
    assert {"name": "state", "mountPath": state} in agent["volumeMounts"]  # writable: the XID cursor
    assert {"name": "state", "emptyDir": {"sizeLimit": "1Mi"}} in spec["volumes"]
    assert "hostNetwork" not in spec  # the agent serves on the pod IP
    assert "nvidia.com/gpu" not in agent["resources"]["limits"]  # it must not take GPUs from training


def test_the_agent_service_and_servicemonitor_find_the_agent(built) -> None:
    service = by_kind(built, "Service", names.AGENT_NAME)
    assert service["spec"]["selector"] == names.AGENT_LABELS and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": names.AGENT_PORT_NAME, "port": AGENT_PORT, "targetPort": names.AGENT_PORT_NAME, "protocol": "TCP"}
    ]
    monitor = by_kind(built, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == names.AGENT_LABELS
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [names.AGENT_PORT_NAME]


def test_the_trainer_podmonitor_scrapes_every_rank_of_any_namespace(built) -> None:
    monitor = by_kind(built, "PodMonitor", "fsdp-observe-trainer")
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["selector"]["matchLabels"] == names.TRAINER_LABELS
    ports = [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]]
    assert ports == [names.trainer_port_name(r) for r in range(names.MAX_RANKS_PER_NODE)]
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["podMetricsEndpoints"])


def test_etcd_serves_the_v2_api_where_rendered_jobs_look(built) -> None:
    deployment = by_kind(built, "Deployment", names.ETCD_SERVICE)
    (etcd,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--enable-v2=true" in etcd["args"]
    assert re.fullmatch(r"quay\.io/coreos/etcd:v3\.5\.\d+", etcd["image"])  # 3.6 dropped the v2 API
    service = by_kind(built, "Service", names.ETCD_SERVICE)
    assert f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc" == names.ETCD_HOST
    assert service["spec"]["ports"][0]["port"] == names.ETCD_CLIENT_PORT
    # job stop finds the etcd pod through this selector
    assert service["spec"]["selector"] == names.ETCD_LABELS == deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_debug_daemonsets_idle_with_the_tools_of_the_image(debug_built) -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    for tool in ("htop", "nvtop"):
        ds = by_kind(debug_built, "DaemonSet", f"fsdp-observe-{tool}")
        spec = ds["spec"]["template"]["spec"]
        assert spec["hostPID"] is True
        assert spec["containers"][0]["command"] == ["sleep", "infinity"]
        assert spec["containers"][0]["image"] == f"fsdp-observe:{VERSION}"
        assert re.search(rf"apt-get install [^\n]*\b{tool}\b", dockerfile)
    assert "'.[trainer,etcd]'" in dockerfile  # the etcd rendezvous backends need python-etcd in the image


def overlay_with(tmp_path: Path, component: str) -> dict:
    """The agent DaemonSet's pod spec built with ``component``."""
    overlay = tmp_path / component
    overlay.mkdir()
    rel = os.path.relpath(DAEMONSETS, overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [rel], "components": [f"{rel}/components/{component}"]})
    )
    ds = by_kind(kustomize(overlay), "DaemonSet", names.AGENT_NAME)
    kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
    return ds["spec"]["template"]["spec"]


def test_the_host_processes_component_adds_hostpid_and_nothing_else(tmp_path: Path, built) -> None:
    spec = overlay_with(tmp_path, "agent-host-processes")
    default = dict(by_kind(built, "DaemonSet", names.AGENT_NAME)["spec"]["template"]["spec"])
    assert spec.pop("hostPID") is True
    assert spec == default


def test_the_restricted_component_drops_the_capability_and_root(tmp_path: Path) -> None:
    spec = overlay_with(tmp_path, "agent-restricted")
    sc = spec["containers"][0]["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": []} and sc["runAsUser"] == 65534
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}


def test_kubectl_is_there() -> None:
    """The manifest tests need kubectl (kustomize is built in); CI must install it."""
    assert shutil.which("kubectl")
