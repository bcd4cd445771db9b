"""``fsdp-observe top --kube``: pod discovery through the real ``kubernetes`` client, against recorded
API responses over real HTTP (no API server can run here), then pulls of what it found.

``recorded/pods-fsdp-observe-agent.json`` is the agent DaemonSet's pod list in the shape the API
server returns it (two running pods and one still creating, the pod template taken from
``daemonsets/agent-daemonset.yaml``); ``pods-llama2-7b-fsdp.json`` the trainer pods. Both are
checked against the Pod schema here.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import kubernetes_validate
import pytest

from observe.errors import UserError
from observe.k8s import names
from observe.sources.kube import KubeSource, agent_endpoints, trainer_endpoints
from tests.support.fake_apiserver import RECORDED, Reply
from tests.support.fleet import RecordedFleet
from tests.support.kube_checks import K8S_VERSION

AGENT_PODS = f"/api/v1/namespaces/{names.NAMESPACE}/pods"
TRAINER_PODS = "/api/v1/namespaces/default/pods"


@pytest.mark.parametrize("name", ["pods-fsdp-observe-agent.json", "pods-llama2-7b-fsdp.json"])
def test_the_recorded_pods_are_valid_pods(name: str) -> None:
    for pod in json.loads((RECORDED / name).read_text())["items"]:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_discovery_uses_the_shared_selectors_and_named_ports(api_server, kubeconfig) -> None:
    server = api_server(
        {
            ("GET", AGENT_PODS): Reply.recorded("pods-fsdp-observe-agent.json"),
            ("GET", TRAINER_PODS): Reply.recorded("pods-llama2-7b-fsdp.json"),
        }
    )
    source = KubeSource(kubeconfig=kubeconfig(server.url))
    agents, trainers, errors = source.discover()
    assert errors == []
    assert [(e.url, e.node) for e in agents] == [
        ("http://10.1.12.34:9401", "ip-10-1-12-34.us-west-2.compute.internal"),
        ("http://10.1.56.78:9401", "ip-10-1-56-78.us-west-2.compute.internal"),
    ]  # the pending pod has no IP yet
    assert len(trainers) == 16 and trainers[0].url == "http://10.0.12.77:9500/metrics"
    assert {e.node for e in trainers} == {e.node for e in agents}
    selectors = {r.path: r.query["labelSelector"][0] for r in server.calls("GET")}
    assert selectors == {
        AGENT_PODS: names.selector(names.AGENT_LABELS),
        TRAINER_PODS: names.selector(names.TRAINER_LABELS),
    }


def test_forbidden_and_missing_agents_are_reported_not_raised(api_server, kubeconfig) -> None:
    forbidden = Reply(403, (RECORDED / "status-403-pytorchjob.json").read_bytes())
    server = api_server(
        {("GET", AGENT_PODS): Reply(200, b'{"kind": "PodList", "items": []}'), ("GET", TRAINER_PODS): forbidden}
    )
    source = KubeSource(kubeconfig=kubeconfig(server.url))
    snapshot = asyncio.run(source.cycle(None, 5.0))
    source.close()
    assert snapshot.nodes == ()
    assert any("no running agent pods" in e and "kubectl apply -k daemonsets/" in e for e in snapshot.errors)
    assert any("HTTP 403" in e and "fsdp-observe job access -n" in e for e in snapshot.errors)


def test_an_unreachable_api_server_is_reported(kubeconfig) -> None:
    source = KubeSource(kubeconfig=kubeconfig(RecordedFleet.unreachable()))
    snapshot = asyncio.run(source.cycle(None, 5.0))
    source.close()
    assert len(snapshot.errors) == 2 and all("unreachable" in e for e in snapshot.errors)


def test_a_missing_kubeconfig_is_a_source_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no kubeconfig at"):
        KubeSource(kubeconfig=str(tmp_path / "none"))


def test_discovered_pods_are_pulled(api_server, kubeconfig) -> None:
    """The recorded pods, re-addressed to local agents serving recorded snapshots."""
    fleet = RecordedFleet()
    try:
        pods = json.loads((RECORDED / "pods-fsdp-observe-agent.json").read_text())
        for pod, node in zip(pods["items"], ("gpu-node-1", "gpu-node-2"), strict=False):
            port = int(fleet.agent(node).rsplit(":", 1)[1])
            pod["status"]["podIP"] = "127.0.0.1"
            pod["spec"]["containers"][0]["ports"][0]["containerPort"] = port
        server = api_server(
            {
                ("GET", AGENT_PODS): Reply(200, json.dumps(pods).encode()),
                ("GET", TRAINER_PODS): Reply(200, b'{"kind": "PodList", "items": []}'),
            }
        )
        source = KubeSource(kubeconfig=kubeconfig(server.url), timeout=2.0)
        snapshot = asyncio.run(source.cycle(None, 5.0))
        source.close()
        assert [(n.name, n.state) for n in snapshot.nodes] == [("gpu-node-1", "ok"), ("gpu-node-2", "ok")]
        assert snapshot.source.startswith(f"kubernetes {server.url}: 2 agent pods")
        assert agent_endpoints([]) == [] and trainer_endpoints([]) == []
    finally:
        fleet.close()
