"""Who may reach what a training job exposes: the job's NetworkPolicy, the viewer's and the operator's Roles.

All are rendered, not applied, like the job (``fsdp-observe job render``, ``job access``):

- ``trainer_network_policy``: the job's pods take connections from each other on every port
  (torchrun's rendezvous, NCCL, gloo), and on the ranks' metrics ports (``metrics-0`` ...) from
  Prometheus (``names.PROMETHEUS_NAMESPACE``, pods labelled ``names.PROMETHEUS_POD_LABELS``) and
  the in-cluster viewer (``names.VIEWER_LABELS`` in ``names.NAMESPACE``); nothing else reaches
  them. Egress is left open (the hub, object storage, the etcd rendezvous, Trainer's progress
  endpoint, DNS). The ports are named as the job's kind declares them (``JobKind.policy_ports``).
- ``viewer_access``: a Role in one namespace with read access to its pods, their logs and its jobs
  of every kind (``observe.k8s.kinds.KINDS``: PyTorchJobs, TrainJobs; what ``fsdp-observe top --kube``
  and ``job status|logs`` read), bound to the viewer service account and to the people named; with
  ``operator=True`` also an operator Role for the people named (not the viewer) that may stop the
  jobs too (``job stop``: delete, or patch to suspend). Nothing reads pods or logs cluster-wide, and
  no rule of either reaches Secrets.

Plain data ready for ``observe.yamlio``; field names follow the Kubernetes v1 API.
"""

from __future__ import annotations

from typing import Any

from observe.errors import UserError
from observe.k8s import names
from observe.k8s.job_settings import JobSettings
from observe.k8s.kinds import KINDS, kind_of
from observe.k8s.names import DNS1123_LABEL

_READ = ["get", "list", "watch"]
#: What ``job stop`` does to a job (delete it, or patch ``suspend``) and, in namespace
#: ``fsdp-observe``, to the etcd rendezvous behind it (read its Service, delete its pod).
_STOP = ["delete", "patch"]
OPERATOR_NAME = "fsdp-observe-operator"


def _prometheus_and_viewer() -> list[dict[str, Any]]:
    """Peers (``from`` entries) for Prometheus' pods and the viewer's."""
    return [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": names.PROMETHEUS_NAMESPACE}},
            "podSelector": {"matchLabels": dict(names.PROMETHEUS_POD_LABELS)},
        },
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": names.NAMESPACE}},
            "podSelector": {"matchLabels": dict(names.VIEWER_LABELS)},
        },
    ]


def trainer_network_policy(s: JobSettings) -> dict[str, Any]:
    """The NetworkPolicy of the job ``s`` (module docstring), named ``<job>-fsdp-observe``.

    Raises:
        UserError: ``JOB_KIND`` names no kind.
    """
    pods = {"matchLabels": {**names.TRAINER_LABELS, "app.kubernetes.io/instance": s.job_name}}
    ports = kind_of(s).policy_ports(s)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": f"{s.job_name}-fsdp-observe",
            "namespace": s.namespace,
            "labels": {**names.TRAINER_LABELS, "app.kubernetes.io/instance": s.job_name},
        },
        "spec": {
            "podSelector": pods,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": pods}]},
                {"from": _prometheus_and_viewer(), "ports": ports},
            ],
        },
    }


def viewer_access(
    namespace: str, users: list[str] | None = None, groups: list[str] | None = None, operator: bool = False
) -> list[dict]:
    """A read-only Role for ``namespace`` and its RoleBinding; with ``operator``, also the
    operator Role and its RoleBinding (module docstring).

    Args:
        namespace: a job's namespace.
        users, groups: people to bind besides the viewer service account (and, with
            ``operator``, the only ones bound to the operator Role).
        operator: also render the operator Role.

    Raises:
        UserError: a namespace Kubernetes would refuse, an empty user or group name, or
            ``operator`` with nobody to bind.
    """
    if not (DNS1123_LABEL.fullmatch(namespace) and len(namespace) <= 63):
        raise UserError(
            "--namespace",
            f"{namespace!r} is not a namespace name",
            "use lower-case letters, digits and '-', e.g. -n ml-jobs",
        )
    for flag, values in (("--user", users or []), ("--group", groups or [])):
        if any(not v.strip() for v in values):
            raise UserError(flag, "an empty name", f"pass {flag} NAME as your kubeconfig or identity provider names it")
    people = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users or []]
    people += [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups or []]
    if operator and not people:
        raise UserError("--operator", "binds nobody", "name who may stop jobs: --user NAME or --group NAME")
    read = [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": list(_READ)},
        *({"apiGroups": [kind.group], "resources": [kind.plural], "verbs": list(_READ)} for kind in KINDS),
    ]
    viewer = [{"kind": "ServiceAccount", "name": names.VIEWER_NAME, "namespace": names.NAMESPACE}, *people]
    out = _role_and_binding(names.VIEWER_NAME, namespace, read, viewer)
    if operator:
        stop = [{"apiGroups": [kind.group], "resources": [kind.plural], "verbs": [*_READ, *_STOP]} for kind in KINDS]
        stop += [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": list(_READ)},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
            {"apiGroups": [""], "resources": ["services"], "verbs": ["get"]},
        ]
        out += _role_and_binding(OPERATOR_NAME, namespace, stop, people)
    return out


def _role_and_binding(name: str, namespace: str, rules: list[dict], subjects: list[dict]) -> list[dict]:
    labels = {"app.kubernetes.io/name": names.APP, "app.kubernetes.io/component": "rbac"}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": subjects,
    }
    return [role, binding]
