"""Which connections a set of NetworkPolicies admits, for the manifest tests: a stand-in for the
CNI plugin that enforces them on a real cluster (none runs here).

Semantics of networking.k8s.io/v1 (https://kubernetes.io/docs/concepts/services-networking/network-policies/):
a pod is isolated for ingress (egress) when a policy in its namespace selects it and lists
``Ingress`` (``Egress``) in ``policyTypes``; then a connection is admitted when any such policy
has a rule whose peers and ports match. A peer with ``podSelector`` alone selects pods of the
policy's namespace; with ``namespaceSelector`` alone, all pods of the matching namespaces; with
both, the pods matching the first in namespaces matching the second. No ``ports`` means every
port; a named port is resolved through the target pod's container ports. ``ipBlock`` peers are
not modelled (these manifests have none). Traffic from the pod's own node (the kubelet's
probes) is always admitted by the standard and is not asked about here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Pod:
    """A pod as the policies see it: namespace (and that namespace's labels), labels, named ports."""

    namespace: str
    labels: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def namespace_labels(self) -> dict[str, str]:
        """``kubernetes.io/metadata.name``, which the API server sets on every namespace."""
        return {"kubernetes.io/metadata.name": self.namespace}


def _matches(selector: dict | None, labels: dict[str, str]) -> bool:
    """A label selector (``matchLabels`` and ``matchExpressions``; ``{}`` selects everything)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if (
            (op == "In" and labels.get(key) not in values)
            or (op == "NotIn" and labels.get(key) in values)
            or (op == "Exists" and key not in labels)
            or (op == "DoesNotExist" and key in labels)
        ):
            return False
    return True


def _peer(peer: dict, policy_namespace: str, other: Pod) -> bool:
    if "ipBlock" in peer:
        raise NotImplementedError("ipBlock peers are not modelled")
    if "namespaceSelector" in peer:
        if not _matches(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return _matches(peer.get("podSelector", {}), other.labels)


def _port(rule_ports: list[dict] | None, target: Pod, port: int) -> bool:
    if not rule_ports:
        return True
    for p in rule_ports:
        want = p.get("port")
        number = target.ports.get(want) if isinstance(want, str) else want
        end = p.get("endPort", number)
        if want is None or (number is not None and number <= port <= end):
            return True
    return False


def _direction(policies: list[dict], pod: Pod, kind: str) -> list[dict]:
    """Policies in ``pod``'s namespace that select it and isolate it in ``kind`` (Ingress/Egress)."""
    out = []
    for p in policies:
        spec = p["spec"]
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if "egress" in spec else ["Ingress"])
        if (
            p["metadata"].get("namespace") == pod.namespace
            and kind in types
            and _matches(spec["podSelector"], pod.labels)
        ):
            out.append(p)
    return out


def _rule(rule: dict, peers_key: str, policy_namespace: str, other: Pod, target: Pod, port: int) -> bool:
    """One ingress or egress rule: no peers means every peer, no ports every port."""
    peers = rule.get(peers_key)
    peer_ok = not peers or any(_peer(peer, policy_namespace, other) for peer in peers)
    return peer_ok and _port(rule.get("ports"), target, port)


def admits(policies: list[dict], source: Pod, target: Pod, port: int) -> bool:
    """Whether a connection from ``source`` to ``target``'s TCP ``port`` is admitted, both ways checked."""
    ingress = _direction(policies, target, "Ingress")
    if ingress and not any(
        _rule(rule, "from", target.namespace, source, target, port)
        for p in ingress
        for rule in p["spec"].get("ingress") or []
    ):
        return False
    egress = _direction(policies, source, "Egress")
    if egress and not any(
        _rule(rule, "to", source.namespace, target, target, port)
        for p in egress
        for rule in p["spec"].get("egress") or []
    ):
        return False
    return True
