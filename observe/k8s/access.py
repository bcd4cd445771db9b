"""Who may reach what a training job exposes: the job's NetworkPolicy and the viewer's Role.

Both are rendered, not applied, like the PyTorchJob (``fsdp-observe job render``, ``job access``):

- ``trainer_network_policy``: the job's pods take connections from each other on every port
  (torchrun's rendezvous, NCCL, gloo), and on the ranks' metrics ports (``metrics-0`` ...) from
  Prometheus (``names.PROMETHEUS_NAMESPACE``, pods labelled ``names.PROMETHEUS_POD_LABELS``) and
  the in-cluster viewer (``names.VIEWER_LABELS`` in ``names.NAMESPACE``); nothing else reaches
  them. Egress is left open (the hub, object storage, the etcd rendezvous, DNS).
- ``etcd_network_policy``: who reaches the etcd rendezvous (v2 API, no authentication): the ranks
  of jobs in the namespaces named, by their ``kubernetes.io/metadata.name`` label (set by the API
  server, immutable), on the client port only. It replaces ``daemonsets/etcd-networkpolicy.yaml``
  (which names ``default``). Within a namespace named, pod labels are still trusted.
- ``viewer_access``: a Role in one namespace with read access to its pods, their logs and its
  PyTorchJobs (what ``fsdp-observe top --kube`` and ``job status|logs`` read), bound to the
  viewer service account and to the people named. Nothing reads pods or logs cluster-wide.

Plain data ready for ``observe.yamlio``; field names follow the Kubernetes v1 API.
"""

from __future__ import annotations

import re
from typing import Any

from observe.errors import UserError
from observe.k8s import names
from observe.k8s.job_settings import JobSettings

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_READ = ["get", "list", "watch"]


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
    """The NetworkPolicy of the job ``s`` (module docstring), named ``<job>-fsdp-observe``."""
    pods = {"matchLabels": {**names.TRAINER_LABELS, "app.kubernetes.io/instance": s.job_name}}
    ports = [{"port": names.trainer_port_name(r), "protocol": "TCP"} for r in range(s.ranks_per_node)]
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


def etcd_network_policy(namespaces: list[str]) -> dict[str, Any]:
    """The etcd rendezvous' NetworkPolicy admitting the ranks of jobs in ``namespaces`` (module docstring).

    Raises:
        UserError: no namespace, or one that is not a valid namespace name.
    """
    if not namespaces:
        raise UserError("--etcd-namespace", "no namespace given", "name every namespace whose jobs use etcd")
    for ns in namespaces:
        if not _DNS1123_LABEL.fullmatch(ns) or len(ns) > 63:
            raise UserError(
                "--etcd-namespace", f"{ns!r} is not a valid namespace name", "use lower-case letters, digits and '-'"
            )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": names.ETCD_SERVICE, "namespace": names.NAMESPACE, "labels": dict(names.ETCD_LABELS)},
        "spec": {
            "podSelector": {"matchLabels": dict(names.ETCD_LABELS)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/metadata.name",
                                        "operator": "In",
                                        "values": sorted(set(namespaces)),
                                    }
                                ]
                            },
                            "podSelector": {"matchLabels": dict(names.TRAINER_LABELS)},
                        }
                    ],
                    "ports": [{"port": "client", "protocol": "TCP"}],
                }
            ],
            "egress": [],
        },
    }


def viewer_access(namespace: str, users: list[str] | None = None, groups: list[str] | None = None) -> list[dict]:
    """A read-only Role for ``namespace`` and its RoleBinding (module docstring).

    Args:
        namespace: a job's namespace.
        users, groups: people to bind besides the viewer service account.

    Raises:
        UserError: a namespace Kubernetes would refuse, or an empty user or group name.
    """
    if not (_DNS1123_LABEL.fullmatch(namespace) and len(namespace) <= 63):
        raise UserError(
            "--namespace",
            f"{namespace!r} is not a namespace name",
            "use lower-case letters, digits and '-', e.g. -n ml-jobs",
        )
    for flag, values in (("--user", users or []), ("--group", groups or [])):
        if any(not v.strip() for v in values):
            raise UserError(flag, "an empty name", f"pass {flag} NAME as your kubeconfig or identity provider names it")
    labels = {"app.kubernetes.io/name": names.APP, "app.kubernetes.io/component": "rbac"}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": names.VIEWER_NAME, "namespace": namespace, "labels": labels},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": list(_READ)},
            {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"], "verbs": list(_READ)},
        ],
    }
    subjects: list[dict[str, str]] = [
        {"kind": "ServiceAccount", "name": names.VIEWER_NAME, "namespace": names.NAMESPACE}
    ]
    subjects += [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users or []]
    subjects += [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups or []]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": names.VIEWER_NAME, "namespace": namespace, "labels": labels},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.VIEWER_NAME},
        "subjects": subjects,
    }
    return [role, binding]
