"""Load Kubernetes credentials the way kubectl does (kubeconfig, else the pod's service account).

Shared by ``fsdp-observe job`` (``observe.k8s.client``) and the TUI's pod discovery
(``observe.sources.kube``); it imports only the ``kubernetes`` client, so the TUI may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

_INCLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
KUBECONFIG_FIX = "set KUBECONFIG or pass --kubeconfig FILE (on EKS: aws eks update-kubeconfig --name CLUSTER)"


def load(kubeconfig: str | None = None, context: str | None = None) -> tuple[client.Configuration, str]:
    """A client configuration and the namespace to default to.

    Reads ``kubeconfig`` (else ``$KUBECONFIG``, else ``~/.kube/config``); inside a pod with no
    kubeconfig, the pod's service account. The namespace is the context's, else ``default``.
    One retry, no backoff: an unreachable server fails within seconds.

    Raises:
        kubernetes.config.config_exception.ConfigException: no kubeconfig, an unknown context.
        OSError, ValueError: an unreadable or broken file.
    """
    cfg = client.Configuration()
    namespace = "default"
    in_cluster = (
        kubeconfig is None
        and "KUBECONFIG" not in os.environ
        and not Path(os.path.expanduser("~/.kube/config")).exists()
        and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    if in_cluster:
        config.load_incluster_config(client_configuration=cfg)
        if _INCLUSTER_NAMESPACE.exists():
            namespace = _INCLUSTER_NAMESPACE.read_text().strip()
    else:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
        contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else active
        namespace = (chosen or {}).get("context", {}).get("namespace") or namespace
    cfg.retries = 1
    return cfg, namespace


def explain(exc: Exception, kubeconfig: str | None, context: str | None) -> tuple[str, str, str]:
    """``(flag, problem, fix)`` for an error ``load`` raised, for a one-line user error."""
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    if isinstance(exc, ConfigException):
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "No configuration found" in text:
            return "kubeconfig", f"no kubeconfig at {where}", KUBECONFIG_FIX
        if context and context in text:
            return "--context", f"no context {context!r} in {where}", "list them with kubectl config get-contexts"
        return "kubeconfig", f"{where}: {text}", KUBECONFIG_FIX
    return "kubeconfig", f"cannot read it ({exc})", KUBECONFIG_FIX
