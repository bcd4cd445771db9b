"""Find the agent DaemonSet's pods and the trainer pods through the Kubernetes API, then pull them.

Discovery uses the label selectors the manifests and ``fsdp-observe job render`` set
(``observe.k8s.names``): agent pods in the add-on's namespace, trainer pods in the job's. A pod's
address is its pod IP and the container port named like the manifest's (``metrics`` for the
agent, ``metrics-<local_rank>`` for each rank of a PyTorchJob), or, for a TrainJob's ranks, the
port in the pod's ``fsdp-observe/metrics-port-<local_rank>`` annotation; the node is
``spec.nodeName``. Only running pods with an IP are pulled. Discovery runs again every
``rediscover_seconds`` (pods come and go with restarts and elastic jobs) in a worker thread, and
its failures are shown, never raised: the last good discovery keeps being pulled.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from observe.catalog import AGENT_PORT
from observe.errors import UserError
from observe.k8s import names
from observe.k8s.kubeconfig import explain, load
from observe.sources.direct import DirectSource, Endpoint
from observe.sources.view import ClusterSnapshot

#: Seconds between two discoveries.
REDISCOVER_SECONDS = 30.0
#: (connect, read) seconds for one list call.
LIST_TIMEOUT = (3.0, 10.0)


def agent_endpoints(pods: list[dict]) -> list[Endpoint]:
    """Agent URLs of running pods (``http://<pod IP>:<port named metrics>``), one per node."""
    out = []
    for pod in pods:
        ip, node = _running(pod)
        if ip is None:
            continue
        port = next(
            (
                p.get("containerPort")
                for c in pod.get("spec", {}).get("containers", [])
                for p in c.get("ports") or []
                if p.get("name") == names.AGENT_PORT_NAME
            ),
            AGENT_PORT,
        )
        out.append(Endpoint(f"http://{_host(ip)}:{port}", node))
    return sorted(out, key=lambda e: (e.node or "", e.url))


def trainer_endpoints(pods: list[dict]) -> list[Endpoint]:
    """Each rank's ``/metrics`` URL of running trainer pods: ports named ``metrics-<local_rank>``
    (a PyTorchJob's pods declare them), or annotated ``fsdp-observe/metrics-port-<local_rank>`` (a
    TrainJob's pods, which cannot declare them)."""
    out: set[Endpoint] = set()
    for pod in pods:
        ip, node = _running(pod)
        if ip is None:
            continue
        ports = [
            port["containerPort"]
            for container in pod.get("spec", {}).get("containers", [])
            for port in container.get("ports") or []
            if str(port.get("name", "")).startswith("metrics-") and port.get("containerPort")
        ]
        annotations = pod.get("metadata", {}).get("annotations") or {}
        ports += [
            int(value)
            for key, value in annotations.items()
            if key.startswith(names.METRICS_PORT_ANNOTATION) and str(value).isdigit()
        ]
        out.update(Endpoint(f"http://{_host(ip)}:{port}/metrics", node) for port in ports)
    return sorted(out, key=lambda e: (e.node or "", e.url))


def _running(pod: dict) -> tuple[str | None, str | None]:
    status = pod.get("status", {})
    if status.get("phase") != "Running" or not status.get("podIP"):
        return None, None
    return status["podIP"], pod.get("spec", {}).get("nodeName")


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


class KubeSource:
    """Pods found through the Kubernetes API, pulled like ``DirectSource``.

    Args:
        namespace: the training job's namespace (default: the kubeconfig context's).
        agent_namespace: the agent DaemonSet's (default ``observe.k8s.names.NAMESPACE``).
        selector: trainer pods' label selector (default: ``names.TRAINER_LABELS``).
        kubeconfig, context: as kubectl's flags. concurrency, timeout: as ``DirectSource``.

    Raises:
        UserError: the kubeconfig cannot be loaded (checked at once, before the UI starts).
    """

    def __init__(
        self,
        namespace: str | None = None,
        agent_namespace: str | None = None,
        selector: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        concurrency: int = 64,
        timeout: float = 1.5,
        rediscover_seconds: float = REDISCOVER_SECONDS,
    ) -> None:
        try:
            cfg, default_namespace = load(kubeconfig, context)
        except (ConfigException, OSError, ValueError) as exc:
            raise UserError(*explain(exc, kubeconfig, context)) from None
        self.core = client.CoreV1Api(client.ApiClient(cfg))
        self.server = cfg.host
        self.namespace = namespace or default_namespace
        self.agent_namespace = agent_namespace or names.NAMESPACE
        self.agent_selector = names.selector(names.AGENT_LABELS)
        self.trainer_selector = selector or names.selector(names.TRAINER_LABELS)
        self.rediscover_seconds = rediscover_seconds
        self.direct = DirectSource([], [], concurrency=concurrency, timeout=timeout)
        self._discovered_at: float | None = None
        self._errors: tuple[str, ...] = ()

    @property
    def description(self) -> str:
        """``kubernetes SERVER: N agent pods, M trainer endpoints``."""
        return (
            f"kubernetes {self.server}: {len(self.direct.agents)} agent pods ({self.agent_namespace}), "
            f"{len(self.direct.trainers)} trainer endpoints ({self.namespace})"
        )

    def discover(self) -> tuple[list[Endpoint], list[Endpoint], list[str]]:
        """List agent and trainer pods; ``(agents, trainers, errors)``. Errors are one line each."""
        results, errors = [], []
        for what, namespace, selector in (
            ("agent pods", self.agent_namespace, self.agent_selector),
            ("trainer pods", self.namespace, self.trainer_selector),
        ):
            try:
                # With _preload_content=False the client returns the urllib3 response (raw JSON).
                pods: Any = self.core.list_namespaced_pod(
                    namespace, label_selector=selector, _request_timeout=LIST_TIMEOUT, _preload_content=False
                )
                results.append(json.loads(pods.data).get("items", []))
            except ApiException as exc:
                errors.append(
                    f"listing {what} in {namespace}: HTTP {exc.status} {exc.reason}"
                    + (f" (ask for read access: fsdp-observe job access -n {namespace})" if exc.status == 403 else "")
                )
                results.append(None)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
                errors.append(
                    f"listing {what} in {namespace}: API server {self.server} unreachable "
                    f"({str(exc).splitlines()[0][:100] if str(exc) else type(exc).__name__})"
                )
                results.append(None)
        agents = agent_endpoints(results[0]) if results[0] is not None else None
        trainers = trainer_endpoints(results[1]) if results[1] is not None else None
        if agents is not None and not agents:
            errors.append(
                f"no running agent pods in {self.agent_namespace} with labels {self.agent_selector}: "
                "is the DaemonSet installed (kubectl apply -k daemonsets/)?"
            )
        return (
            agents if agents is not None else self.direct.agents,
            trainers if trainers is not None else self.direct.trainers,
            errors,
        )

    async def cycle(self, focus: str | None, deadline: float) -> ClusterSnapshot:
        """Discover (every ``rediscover_seconds``, in a worker thread), then pull like ``DirectSource``."""
        started = time.monotonic()
        if self._discovered_at is None or started - self._discovered_at >= self.rediscover_seconds:
            try:
                agents, trainers, errors = await asyncio.wait_for(asyncio.to_thread(self.discover), deadline)
            except asyncio.TimeoutError:
                agents, trainers = self.direct.agents, self.direct.trainers
                errors = [f"listing pods: no answer from {self.server} within {deadline:.1f} s"]
            self.direct.set_endpoints(agents, trainers)
            self._discovered_at, self._errors = time.monotonic(), tuple(errors)
        remaining = max(0.2, deadline - (time.monotonic() - started))
        snapshot = await self.direct.cycle(focus, remaining)
        return replace(
            snapshot,
            source=self.description,
            errors=(*self._errors, *snapshot.errors),
            cycle_seconds=time.monotonic() - started,
            trainer_hint=f"no running trainer pods in {self.namespace} with labels {self.trainer_selector}",
        )

    def close(self) -> None:
        """Close the pulls' connections."""
        self.direct.close()
