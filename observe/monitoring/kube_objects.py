"""The Kubernetes wrappers of the generated monitoring files, for ``daemonsets/generated/``.

Kustomize cannot read files outside its root, nor wrap a rule file into a ``PrometheusRule``, so
``observe.monitoring.generate`` also renders, from the same in-memory objects:

- ``prometheusrule.yaml``: the rule file's groups as a ``monitoring.coreos.com/v1``
  ``PrometheusRule`` with the label kube-prometheus-stack's rule selector matches;
- ``dashboard-<name>-configmap.yaml`` per dashboard: a ConfigMap labelled
  ``grafana_dashboard: "1"``, which the Grafana sidecar of kube-prometheus-stack loads;
- ``alertmanagerconfig.yaml``: the Alertmanager route tree, inhibitions and receiver names
  (``observe.monitoring.alertmanager``) as a ``monitoring.coreos.com/v1alpha1``
  ``AlertmanagerConfig``, which kube-prometheus-stack's Alertmanager selects;
- ``kustomization.yaml`` listing them (``daemonsets/kustomization.yaml`` includes the folder).
"""

from __future__ import annotations

import re
from typing import Any

from observe.errors import UserError
from observe.k8s import names

#: kube-prometheus-stack's Grafana sidecar loads ConfigMaps carrying this label.
DASHBOARD_LABELS = {"grafana_dashboard": "1"}
#: The API server refuses ConfigMaps whose data exceeds 1 MiB (etcd's request limit).
CONFIGMAP_LIMIT_BYTES = 1024 * 1024


def prometheus_rule(rule_file: dict[str, Any]) -> dict[str, Any]:
    """A ``PrometheusRule`` holding the groups of a Prometheus rule file (``{"groups": [...]}``)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": names.APP,
            "labels": {
                "app.kubernetes.io/name": names.APP,
                "app.kubernetes.io/component": "rules",
                **names.PROMETHEUS_SELECTOR_LABELS,
            },
        },
        "spec": {"groups": rule_file["groups"]},
    }


def alertmanager_config(spec: dict[str, Any]) -> dict[str, Any]:
    """An ``AlertmanagerConfig`` (``monitoring.coreos.com/v1alpha1``, the version kube-prometheus-stack
    serves and stores) with ``spec`` (``observe.monitoring.alertmanager.crd_spec``). Its namespace
    comes from ``daemonsets/kustomization.yaml``."""
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {
            "name": names.APP,
            "labels": {
                "app.kubernetes.io/name": names.APP,
                "app.kubernetes.io/component": "alerting",
                **names.PROMETHEUS_SELECTOR_LABELS,
            },
        },
        "spec": spec,
    }


def dashboard_configmap(stem: str, text: str) -> dict[str, Any]:
    """A ConfigMap carrying one Grafana dashboard's JSON ``text`` as ``<stem>.json``.

    Raises:
        UserError: the ConfigMap would pass the API server's 1 MiB limit (settings that make a
            dashboard that large are the user's to change).
    """
    size = len(text.encode())
    if size > CONFIGMAP_LIMIT_BYTES:
        raise UserError(
            "dashboards",
            f"dashboard {stem} is {size} bytes; a ConfigMap holds at most 1 MiB",
            "write the dashboards with --no-k8s and load them into Grafana another way",
        )
    key = slug(stem)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{names.APP}-dashboard-{key}",
            "labels": {
                "app.kubernetes.io/name": names.APP,
                "app.kubernetes.io/component": "dashboards",
                **DASHBOARD_LABELS,
            },
        },
        "data": {f"{key}.json": text},
    }


def configmap_file(stem: str) -> str:
    """The file name under ``daemonsets/generated/`` of dashboard ``stem``'s ConfigMap."""
    return f"dashboard-{slug(stem)}-configmap.yaml"


def slug(stem: str) -> str:
    """A DNS-1123-safe form of a file stem (``FSDP Overview`` → ``fsdp-overview``)."""
    return re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")


def kustomization(resources: list[str]) -> dict[str, Any]:
    """A ``kustomization.yaml`` listing ``resources`` (sorted)."""
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": sorted(resources)}
