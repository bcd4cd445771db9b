"""Prometheus' target relabelling (``keep`` and ``replace``), for monitors no Prometheus can try here.

A stand-in: Prometheus discovers pods only through a Kubernetes API server, so a PodMonitor's
relabelling of pod targets cannot run against a real Prometheus in these tests. This follows
Prometheus' documented semantics (``relabel_config``): source label values joined by
``separator`` (default ``;``), matched by ``regex`` anchored at both ends (default ``(.*)``);
``keep`` drops the target when it does not match; ``replace`` (the default action) writes
``replacement`` (default ``$1``, with ``$N`` and ``${N}`` groups) to ``targetLabel`` when it does.
"""

from __future__ import annotations

import re
from typing import Any


def relabel(labels: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, str] | None:
    """``labels`` after ``configs`` (camelCase PodMonitor keys), or ``None`` when a ``keep`` drops it.

    Raises:
        ValueError: an action this stand-in does not implement.
    """
    out = dict(labels)
    for c in configs:
        value = c.get("separator", ";").join(out.get(name, "") for name in c.get("sourceLabels", []))
        match = re.fullmatch(c.get("regex", "(.*)"), value)
        action = c.get("action", "replace")
        if action == "keep":
            if match is None:
                return None
        elif action == "replace":
            if match is not None:
                replacement = re.sub(r"\$\{?(\d+)\}?", r"\\\1", c.get("replacement", "$1"))
                out[c["targetLabel"]] = match.expand(replacement)
        else:
            raise ValueError(f"relabel action {action!r} is not implemented here")
    return out


def pod_targets(pod: dict[str, Any]) -> list[dict[str, str]]:
    """The targets Prometheus' pod discovery makes of a v1 Pod: one per declared container port
    (``__address__`` = ``<pod IP>:<port>``), one per container without ports; with the pod's IP,
    labels and annotations as ``__meta_kubernetes_pod_*`` labels (names sanitised to ``_``)."""
    meta, status = pod["metadata"], pod.get("status", {})
    common = {"__meta_kubernetes_pod_ip": status.get("podIP", ""), "__meta_kubernetes_pod_name": meta["name"]}
    for kind in ("label", "annotation"):
        for key, value in (meta.get(f"{kind}s") or {}).items():
            common[f"__meta_kubernetes_pod_{kind}_{re.sub(r'[^a-zA-Z0-9_]', '_', key)}"] = value
    targets = []
    for container in pod["spec"]["containers"]:
        ports = container.get("ports") or [None]
        for port in ports:
            address = (
                f"{common['__meta_kubernetes_pod_ip']}:{port['containerPort']}"
                if port
                else common["__meta_kubernetes_pod_ip"]
            )
            target = {**common, "__address__": address, "__meta_kubernetes_pod_container_name": container["name"]}
            if port:
                target["__meta_kubernetes_pod_container_port_name"] = port.get("name", "")
            targets.append(target)
    return targets
