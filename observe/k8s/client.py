"""A connection to the Kubernetes API through the official ``kubernetes`` client, with every
failure a user can fix (no kubeconfig, unreachable server, expired credentials, missing RBAC,
no such job, the job kind's API not installed) turned into one ``UserError`` line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from observe.errors import UserError
from observe.k8s.kubeconfig import explain
from observe.k8s.kubeconfig import load as kubeconfig_load

#: (connect, read) seconds for one API call; log streams with ``--follow`` have no read limit.
REQUEST_TIMEOUT = (5.0, 60.0)


@dataclass
class Kube:
    """API handles for one cluster and the namespace commands default to.

    Attributes:
        core: ``CoreV1Api`` (pods, logs, services).
        custom: ``CustomObjectsApi`` (the jobs of every kind: PyTorchJobs, TrainJobs).
        namespace: ``--namespace``, else the kubeconfig context's, else ``default``.
        server: the API server URL, for error messages.
    """

    core: client.CoreV1Api
    custom: client.CustomObjectsApi
    namespace: str
    server: str


def connect(kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None) -> Kube:
    """Load credentials the way kubectl does and return API handles.

    Reads ``kubeconfig`` (else ``$KUBECONFIG``, else ``~/.kube/config``); inside a pod with no
    kubeconfig, the pod's service account. Nothing is sent to the server yet.

    Raises:
        UserError: no kubeconfig, an unknown context, or an unreadable file.
    """
    try:
        cfg, default_ns = kubeconfig_load(kubeconfig, context)
    except (ConfigException, OSError, ValueError) as exc:
        raise UserError(*explain(exc, kubeconfig, context)) from None
    api = client.ApiClient(cfg)
    return Kube(client.CoreV1Api(api), client.CustomObjectsApi(api), namespace or default_ns, cfg.host)


@contextmanager
def api_errors(
    kube: Kube, what: str, namespace: str | None = None, missing_api: tuple[str, str] | None = None
) -> Iterator[None]:
    """Turn errors of API calls made inside the block into one-line ``UserError``s.

    Args:
        kube: the connection (for the server URL).
        what: the object the calls concern, e.g. ``pytorchjob fsdp``; named in 404s.
        namespace: its namespace, named in 404s and 403s.
        missing_api: ``(problem, fix)`` for the API server's bare ``404 page not found``, which
            says the calls' API group is not installed (a job kind's CRD); a generic line otherwise.
    """
    ns = namespace or kube.namespace
    try:
        yield
    except urllib3.exceptions.HTTPError as exc:
        reason = getattr(exc, "reason", None) or exc
        if isinstance(reason, urllib3.exceptions.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(reason):
            raise UserError(
                f"API server {kube.server}",
                f"TLS verification failed ({_short(reason)})",
                "check the server address and certificate-authority-data in your kubeconfig",
            ) from None
        raise UserError(
            f"API server {kube.server}",
            f"unreachable ({_short(reason)})",
            "check the cluster is up and kubectl cluster-info works, or pass --context/--kubeconfig",
        ) from None
    except ApiException as exc:
        raise api_error(exc, kube, what, ns, missing_api) from None


def api_error(
    exc: ApiException, kube: Kube, what: str, ns: str, missing_api: tuple[str, str] | None = None
) -> UserError:
    """The one-line ``UserError`` for an API error answer (``api_errors``' arguments)."""
    status = status_body(exc)
    message = status.get("message") or exc.reason or "no message"
    if exc.status == 0:
        return UserError(
            f"API server {kube.server}", _short(message), "check the server's certificate in your kubeconfig"
        )
    if exc.status == 401:
        return UserError(
            f"API server {kube.server}",
            "rejected the credentials (401 Unauthorized)",
            "refresh them (on EKS: aws eks update-kubeconfig --name CLUSTER)",
        )
    if exc.status == 403:
        return UserError(
            what,
            f"forbidden in namespace {ns}: {_short(message)}",
            f"ask for read access (fsdp-observe job access -n {ns} --user <you> | kubectl apply "
            "-f -); stop also needs the operator Role (job access --operator)",
        )
    if exc.status == 404 and not status:
        # A bare "404 page not found": the API group itself is missing.
        problem, fix = missing_api or (
            "the API server has no such resource (404 page not found)",
            "check kubectl api-resources",
        )
        return UserError(what, problem, fix)
    if exc.status == 404:
        return UserError(what, f"not found in namespace {ns}", "check the name with kubectl get, and pass -n NAMESPACE")
    return UserError(
        what, f"API error {exc.status} {exc.reason}: {_short(message)}", "retry, or check kubectl get events"
    )


def status_body(exc: ApiException) -> dict:
    """The ``Status`` object of an error response, or ``{}`` when the body is not one."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) and body.get("kind") == "Status" else {}


def _short(text: object) -> str:
    """First line of an error text, without urllib3's object reprs."""
    line = str(text).splitlines()[0] if str(text) else ""
    if "Connection refused" in line:
        return "connection refused"
    if "timed out" in line:
        return "connection timed out"
    if "Name or service not known" in line or "nodename nor servname" in line:
        return "host name not found"
    verify = re.search(r"certificate verify failed: ([^(]*)", line)
    if verify:
        return f"certificate verify failed: {verify.group(1).strip()}"
    return line[:200]
