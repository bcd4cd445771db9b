"""``components/node-condition`` and ``components/node-taint``: off by default, the least RBAC when on.

Built with the real ``kubectl kustomize`` from an overlay, as a user enables them, and validated
strictly for a current Kubernetes.
"""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from observe.agent.node_health import TAINT_KEY
from observe.cli.agent import build_parser
from observe.k8s import names
from tests.support.kube_checks import K8S_VERSION, REPO, kustomize

DAEMONSETS = REPO / "daemonsets"
COMPONENTS = {
    "node-condition": (
        "FSDP_OBSERVE_NODE_CONDITION",
        [{"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["get", "patch"]}],
    ),
    "node-taint": ("FSDP_OBSERVE_NODE_TAINT", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]),
}


def build(tmp_path: Path, *components: str) -> list[dict]:
    overlay = tmp_path / "overlay"
    overlay.mkdir(exist_ok=True)
    rel = os.path.relpath(DAEMONSETS, overlay)
    spec: dict = {"resources": [rel]}
    if components:
        spec["components"] = [f"{rel}/components/{c}" for c in components]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(spec))
    return kustomize(overlay)


def agent_pod(objs: list[dict]) -> dict:
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == names.AGENT_NAME]
    kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
    return ds["spec"]["template"]["spec"]


def agent_rules(objs: list[dict]) -> dict[str, list]:
    """ClusterRole name -> rules, for roles bound to the agent's ServiceAccount."""
    bound = {
        b["roleRef"]["name"]
        for b in objs
        if b["kind"] == "ClusterRoleBinding"
        and {"kind": "ServiceAccount", "name": names.AGENT_NAME, "namespace": names.NAMESPACE} in b["subjects"]
    }
    return {
        r["metadata"]["name"]: r["rules"] for r in objs if r["kind"] == "ClusterRole" and r["metadata"]["name"] in bound
    }


def test_by_default_the_agent_has_no_token_and_no_rbac(tmp_path: Path) -> None:
    objs = build(tmp_path)
    pod = agent_pod(objs)
    assert pod["automountServiceAccountToken"] is False
    assert agent_rules(objs) == {}
    env = {e["name"] for e in pod["containers"][0]["env"]}
    assert not env & {"FSDP_OBSERVE_NODE_CONDITION", "FSDP_OBSERVE_NODE_TAINT"}


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_each_component_switches_its_flag_on_with_its_rules_only(tmp_path: Path, component: str) -> None:
    variable, rules = COMPONENTS[component]
    objs = build(tmp_path, component)
    for obj in objs:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    pod = agent_pod(objs)
    assert pod["automountServiceAccountToken"] is True
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env[variable] == "true" and env[names.NODE_NAME_ENV] is None  # the base's env kept
    assert agent_rules(objs) == {f"fsdp-observe-agent-{component}": rules}
    tolerations = pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    ours = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
    assert (ours in tolerations) == (component == "node-taint")  # a restarted agent still runs on the tainted node


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_the_api_server_egress_names_an_address_not_anywhere(tmp_path: Path, component: str) -> None:
    """Before: ports 443 and 6443 with no ``to``, so the agent's pod (holding a token that may patch
    nodes) could reach any host on them. Now only the addresses named (a placeholder until set)."""
    objs = build(tmp_path, component)
    (policy,) = [o for o in objs if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith(component[5:])]
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    (rule,) = policy["spec"]["egress"]
    assert rule["to"] and all(set(peer) == {"ipBlock"} for peer in rule["to"])
    assert all(peer["ipBlock"]["cidr"].endswith("/32") and "except" not in peer["ipBlock"] for peer in rule["to"])
    assert sorted(p["port"] for p in rule["ports"]) == [443, 6443]
    admitted = [rule["to"][0]["ipBlock"]["cidr"]]
    assert admitted == ["192.0.2.1/32"]  # the documentation address: reaches nothing until set


def test_both_together(tmp_path: Path) -> None:
    objs = build(tmp_path, "node-condition", "node-taint")
    env = {e["name"] for e in agent_pod(objs)["containers"][0]["env"]}
    assert {"FSDP_OBSERVE_NODE_CONDITION", "FSDP_OBSERVE_NODE_TAINT"} <= env
    assert sorted(agent_rules(objs)) == ["fsdp-observe-agent-node-condition", "fsdp-observe-agent-node-taint"]


def test_the_agent_reads_the_switches_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not build_parser().parse_args([]).node_condition
    monkeypatch.setenv("FSDP_OBSERVE_NODE_CONDITION", "true")
    monkeypatch.setenv("FSDP_OBSERVE_NODE_TAINT", "0")
    ns = build_parser().parse_args([])
    assert ns.node_condition and not ns.node_taint
