"""Who reaches the agent (9401), the trainer exporters (9500+) and the etcd rendezvous (2379) under
the NetworkPolicies ``daemonsets/`` ships and ``job render`` renders. No CNI runs here, so
``network_policy.admits`` stands in for the one enforcing them (its semantics are the API's).
Pods are built from the real manifests' labels and ports."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from observe.catalog import AGENT_PORT
from observe.cli import job as job_cmd
from observe.k8s import names
from observe.k8s.access import trainer_network_policy, viewer_access
from observe.k8s.job_settings import load_settings
from observe.k8s.kinds import pytorchjob
from observe.k8s.kinds.pytorchjob import render
from tests.support.kube_checks import K8S_VERSION, REPO, kustomize
from tests.support.network_policy import Pod, admits

DAEMONSETS = REPO / "daemonsets"
JOB_NS = "ml-jobs"
OPERATOR_PORT, NCCL_PORT = pytorchjob.OPERATOR_PORT, 43127


def template_labels(objs: list[dict], name: str) -> dict[str, str]:
    (o,) = [o for o in objs if o["metadata"]["name"] == name and "template" in o.get("spec", {})]
    return o["spec"]["template"]["metadata"]["labels"]


@pytest.fixture(scope="module")
def world() -> dict:
    built = kustomize(DAEMONSETS)
    viewer = kustomize(DAEMONSETS / "viewer")
    settings = load_settings(REPO / "examples" / "llama2-7b.env", [f"NAMESPACE={JOB_NS}"])
    job = render(settings, run_id="np-1")
    other = render(
        load_settings(REPO / "examples" / "llama2-7b.env", [f"NAMESPACE={JOB_NS}", "JOB_NAME=other"]), run_id="np-2"
    )
    policies = [o for o in built if o["kind"] == "NetworkPolicy"] + [trainer_network_policy(settings)]
    rank_ports = {names.trainer_port_name(r): names.trainer_port(r) for r in range(settings.ranks_per_node)}
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    return {
        "policies": policies,
        "agent": Pod(names.NAMESPACE, template_labels(built, names.AGENT_NAME), {"metrics": AGENT_PORT}),
        "etcd": Pod(names.NAMESPACE, template_labels(built, names.ETCD_SERVICE), {"client": names.ETCD_CLIENT_PORT}),
        "rank": Pod(JOB_NS, worker, rank_ports),
        "peer rank": Pod(JOB_NS, worker, rank_ports),
        "other job's rank": Pod(
            JOB_NS, other["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
        ),
        "prometheus": Pod(names.PROMETHEUS_NAMESPACE, {**names.PROMETHEUS_POD_LABELS, "prometheus": "kps"}),
        "viewer": Pod(names.NAMESPACE, template_labels(viewer, "fsdp-observe-viewer")),
        "tenant pod": Pod(JOB_NS, {"app": "notebook"}),
        "tenant pod elsewhere": Pod("team-b", {"app": "web"}),
        "prometheus look-alike": Pod("team-b", dict(names.PROMETHEUS_POD_LABELS)),
        "viewer look-alike": Pod("team-b", dict(names.VIEWER_LABELS)),
        "htop": Pod(names.NAMESPACE, {"app.kubernetes.io/name": "htop", "app.kubernetes.io/component": "debug"}),
    }


@pytest.mark.parametrize(
    "source, target, port, admitted",
    [
        ("prometheus", "agent", AGENT_PORT, True),
        ("viewer", "agent", AGENT_PORT, True),
        ("tenant pod", "agent", AGENT_PORT, False),
        ("tenant pod elsewhere", "agent", AGENT_PORT, False),
        ("prometheus look-alike", "agent", AGENT_PORT, False),
        ("viewer look-alike", "agent", AGENT_PORT, False),
        ("rank", "agent", AGENT_PORT, False),
        ("htop", "agent", AGENT_PORT, False),
        ("prometheus", "agent", 22, False),
        ("rank", "etcd", names.ETCD_CLIENT_PORT, True),
        ("other job's rank", "etcd", names.ETCD_CLIENT_PORT, True),
        ("tenant pod", "etcd", names.ETCD_CLIENT_PORT, False),
        ("prometheus", "etcd", names.ETCD_CLIENT_PORT, False),
        ("viewer", "etcd", names.ETCD_CLIENT_PORT, False),
        ("prometheus", "rank", names.trainer_port(0), True),
        ("prometheus", "rank", names.trainer_port(7), True),
        ("viewer", "rank", names.trainer_port(3), True),
        ("prometheus", "rank", OPERATOR_PORT, False),
        ("tenant pod", "rank", names.trainer_port(0), False),
        ("tenant pod elsewhere", "rank", names.trainer_port(0), False),
        ("other job's rank", "rank", names.trainer_port(0), False),
        ("peer rank", "rank", OPERATOR_PORT, True),
        ("peer rank", "rank", NCCL_PORT, True),
        ("peer rank", "rank", names.trainer_port(1), True),
        ("tenant pod", "htop", 8080, False),
        ("agent", "prometheus", 9090, False),
        ("agent", "tenant pod elsewhere", 443, False),
        ("etcd", "tenant pod", 80, False),
    ],
)
def test_who_reaches_what(world: dict, source: str, target: str, port: int, admitted: bool) -> None:
    assert admits(world["policies"], world[source], world[target], port) is admitted


def test_without_the_policies_everyone_reaches_everything(world: dict) -> None:
    """The stand-in is not trivially closed: with no policies the tenant reaches the agent (as before)."""
    assert admits([], world["tenant pod elsewhere"], world["agent"], AGENT_PORT)


def test_the_policies_validate_and_select_what_they_claim(world: dict) -> None:
    for policy in world["policies"]:
        kubernetes_validate.validate({"metadata": {"namespace": "x"}, **policy}, K8S_VERSION, strict=True)
    agent = next(p for p in world["policies"] if p["metadata"]["name"] == names.AGENT_NAME)
    assert agent["spec"]["podSelector"]["matchLabels"] == names.AGENT_LABELS
    assert agent["spec"]["egress"] == []


def test_job_render_emits_the_policy_beside_the_job(capsys) -> None:
    assert job_cmd.main(["render", "--config", str(REPO / "examples" / "llama2-7b.env"), "--run-id", "r-1"]) == 0
    job, policy = yaml.safe_load_all(capsys.readouterr().out)
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == job["metadata"]["namespace"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
    assert selected.items() <= pod_labels.items()
    ports = [p["port"] for p in policy["spec"]["ingress"][1]["ports"]]
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert ports == [p["name"] for p in container["ports"] if p["name"].startswith("metrics-")]


# --- RBAC: the viewer reads namespaces it is given, nothing cluster-wide -------------------------------


def test_no_cluster_wide_read_of_pods_or_logs() -> None:
    built = kustomize(DAEMONSETS)
    assert not [o for o in built if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    role = next(o for o in built if o["kind"] == "Role")
    binding = next(o for o in built if o["kind"] == "RoleBinding")
    assert role["metadata"]["namespace"] == names.NAMESPACE == binding["metadata"]["namespace"]
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.VIEWER_NAME}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": names.VIEWER_NAME, "namespace": names.NAMESPACE}]


def test_job_access_renders_a_read_only_role_for_one_namespace(capsys) -> None:
    assert job_cmd.main(["access", "-n", JOB_NS, "--user", "alice", "--group", "ml"]) == 0
    role, binding = yaml.safe_load_all(capsys.readouterr().out)
    for obj in (role, binding):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert obj["metadata"]["namespace"] == JOB_NS
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {
        ("", "pods"),
        ("", "pods/log"),
        ("kubeflow.org", "pytorchjobs"),
        ("trainer.kubeflow.org", "trainjobs"),
    }
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [
        ("ServiceAccount", names.VIEWER_NAME),
        ("User", "alice"),
        ("Group", "ml"),
    ]
    assert viewer_access(JOB_NS) == [role, {**binding, "subjects": binding["subjects"][:1]}]


def test_job_access_operator_may_stop_jobs_of_every_kind_and_read_no_secret(capsys) -> None:
    assert job_cmd.main(["access", "-n", JOB_NS, "--user", "alice", "--operator"]) == 0
    viewer, viewer_binding, operator, operator_binding = yaml.safe_load_all(capsys.readouterr().out)
    for obj in (viewer, viewer_binding, operator, operator_binding):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    assert (operator["metadata"]["name"], operator_binding["roleRef"]["name"]) == ("fsdp-observe-operator",) * 2
    verbs = {
        (g, r): set(rule["verbs"]) for rule in operator["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    for job in (("kubeflow.org", "pytorchjobs"), ("trainer.kubeflow.org", "trainjobs")):
        assert verbs[job] == {"get", "list", "watch", "delete", "patch"}  # delete, or patch to suspend
        assert {"delete", "patch"}.isdisjoint(v for rule in viewer["rules"] for v in rule["verbs"])
    # the people named, never the viewer's service account, may stop jobs
    assert [(s["kind"], s["name"]) for s in operator_binding["subjects"]] == [("User", "alice")]
    for role in (viewer, operator):  # nothing reads Secrets, nor anything cluster-wide
        assert all("secrets" not in rule["resources"] and "*" not in rule["resources"] for rule in role["rules"])
        assert role["kind"] == "Role"
    from observe.cli import main

    assert main(["job", "access", "-n", JOB_NS, "--operator"]) == 2  # an operator Role bound to nobody
    assert "error: --operator: binds nobody" in capsys.readouterr().err


def test_job_access_refuses_a_bad_namespace(capsys) -> None:
    from observe.cli import main

    assert main(["job", "access", "-n", "Not_A_Namespace"]) == 2
    assert "error: --namespace: 'Not_A_Namespace' is not a namespace name" in capsys.readouterr().err
