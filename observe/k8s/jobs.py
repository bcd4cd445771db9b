"""``fsdp-observe job status|logs|stop``: a PyTorchJob's state, its leader, its logs, its end.

The leader is the pod whose torchrun elastic agent hosts rank 0: every agent logs the rendezvous
result (``master_addr=<host>``, at INFO, which the rendered job enables with ``LOGLEVEL=INFO``),
as the AWS EKS walkthrough finds it with ``kubectl logs <pod> | grep master_addr=``.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO, cast

from observe.errors import UserError
from observe.k8s import names
from observe.k8s.client import REQUEST_TIMEOUT, Kube, api_errors
from observe.k8s.job_settings import ETCD_BACKENDS

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
_MASTER_ADDR = re.compile(rb"master_addr=(\S+)")
#: Pods whose logs are searched for ``master_addr=`` before giving up.
LEADER_SEARCH_PODS = 3


@dataclass(frozen=True)
class PodState:
    """One worker pod as ``job status`` shows it.

    Attributes:
        name: pod name (``<job>-worker-<i>``).
        index: the operator's replica index, ``None`` when the label is missing.
        state: ``Running``, a container's waiting/terminated reason (``CrashLoopBackOff``,
            ``OOMKilled``, ``Completed``...), ``Terminating``, or the pod phase.
        ready: ``ready/total`` containers.
        restarts: container restarts summed.
        node: node name, ``None`` before scheduling.
        ip: pod IP, ``None`` before it has one.
        has_log: whether a container has started (so ``kubectl logs`` has something).
    """

    name: str
    index: int | None
    state: str
    ready: str
    restarts: int
    node: str | None
    ip: str | None
    has_log: bool


@dataclass(frozen=True)
class JobStatus:
    """A PyTorchJob, its rendezvous settings, its pods and its leader."""

    name: str
    namespace: str
    condition: str
    reason: str
    since: str
    elastic: dict[str, Any]
    pods: list[PodState]
    master_addr: str | None
    leader: str | None
    leader_source: str | None


def get_job(kube: Kube, name: str) -> dict[str, Any]:
    """The PyTorchJob object as the API returns it (a dict)."""
    with api_errors(kube, f"pytorchjob {name}"):
        job = kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, kube.namespace, PLURAL, name, _request_timeout=REQUEST_TIMEOUT
        )
        return cast(dict[str, Any], job)


def list_pods(kube: Kube, name: str) -> list[Any]:
    """The job's pods (``V1Pod``), in replica-index order."""
    with api_errors(kube, f"pods of pytorchjob {name}"):
        pods = kube.core.list_namespaced_pod(
            kube.namespace, label_selector=f"{names.JOB_NAME_LABEL}={name}", _request_timeout=REQUEST_TIMEOUT
        ).items
    return sorted(pods, key=lambda p: (_index(p) is None, _index(p) or 0, p.metadata.name))


def pod_state(pod: Any) -> PodState:
    """Summarise a ``V1Pod`` for the status table."""
    statuses = pod.status.container_statuses or []
    state = pod.status.phase or "Unknown"
    for cs in statuses:
        if cs.state and cs.state.waiting and cs.state.waiting.reason:
            state = cs.state.waiting.reason
            break
        if cs.state and cs.state.terminated:
            t = cs.state.terminated
            state = f"{t.reason or 'Terminated'} (exit {t.exit_code})" if t.exit_code else (t.reason or "Completed")
            break
    if state == "Pending":
        unscheduled = [c for c in pod.status.conditions or [] if c.type == "PodScheduled" and c.status == "False"]
        if unscheduled and unscheduled[0].reason:
            state = f"Pending ({unscheduled[0].reason})"
    if pod.metadata.deletion_timestamp:
        state = "Terminating"
    started = any(cs.state and (cs.state.running or cs.state.terminated) for cs in statuses) or any(
        cs.last_state and cs.last_state.terminated for cs in statuses
    )
    return PodState(
        name=pod.metadata.name,
        index=_index(pod),
        state=state,
        ready=f"{sum(1 for cs in statuses if cs.ready)}/{len(pod.spec.containers)}",
        restarts=sum(cs.restart_count or 0 for cs in statuses),
        node=pod.spec.node_name,
        ip=pod.status.pod_ip,
        has_log=started,
    )


def _index(pod: Any) -> int | None:
    value = (pod.metadata.labels or {}).get(names.REPLICA_INDEX_LABEL)
    return int(value) if value is not None and value.isdigit() else None


def job_status(kube: Kube, name: str) -> JobStatus:
    """Read the job, its pods, and find its leader.

    Raises:
        UserError: the job does not exist, the API is unreachable or forbidden.
    """
    job = get_job(kube, name)
    pods = [pod_state(p) for p in list_pods(kube, name)]
    conditions = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    last = conditions[-1] if conditions else {}
    master_addr, source = find_master_addr(kube, pods)
    return JobStatus(
        name=name,
        namespace=kube.namespace,
        condition=last.get("type", "Pending"),
        reason=last.get("reason", ""),
        since=last.get("lastTransitionTime", ""),
        elastic=(job.get("spec") or {}).get("elasticPolicy") or {},
        pods=pods,
        master_addr=master_addr,
        leader=match_leader(master_addr, pods),
        leader_source=source,
    )


def find_master_addr(kube: Kube, pods: list[PodState]) -> tuple[str | None, str | None]:
    """The last ``master_addr=`` in the first worker logs that have one: ``(value, pod)``.

    A log the API refuses (a container between restarts) is skipped for the next worker's.
    """
    for pod in [p for p in pods if p.has_log][:LEADER_SEARCH_PODS]:
        try:
            found = last_master_addr(_log_lines(kube, pod.name, follow=False))
        except UserError:
            continue
        if found:
            return found, pod.name
    return None, None


def last_master_addr(lines: Iterable[bytes]) -> str | None:
    """The value of the last ``master_addr=`` in a torchrun log (the latest rendezvous wins)."""
    found = None
    for line in lines:
        match = _MASTER_ADDR.search(line)
        if match:
            found = match.group(1).decode(errors="replace")
    return found


def match_leader(master_addr: str | None, pods: list[PodState]) -> str | None:
    """The pod ``master_addr`` names: by host name (its first DNS label) or by pod IP."""
    if not master_addr:
        return None
    host = master_addr.split(".")[0] if not re.fullmatch(r"[0-9.]+", master_addr) else None
    for pod in pods:
        if pod.name == host or (pod.ip and pod.ip == master_addr):
            return pod.name
    return None


def format_status(st: JobStatus) -> str:
    """The text ``job status`` prints."""
    e = st.elastic
    endpoint = f" at {e['rdzvHost']}:{e.get('rdzvPort', '')}".rstrip(":") if e.get("rdzvHost") else ""
    lines = [
        f"pytorchjob {st.namespace}/{st.name}: {st.condition}"
        + (f" ({st.reason})" if st.reason else "")
        + (f" since {st.since}" if st.since else ""),
        f"rendezvous: {e.get('rdzvBackend', 'c10d')}{endpoint}, id {e.get('rdzvId', 'n/a')}, "
        f"nodes {e.get('minReplicas', '?')}..{e.get('maxReplicas', '?')}, max restarts {e.get('maxRestarts', '?')}",
    ]
    if st.master_addr:
        who = st.leader or "no pod of this job"
        lines.append(f"leader: {who} (master_addr={st.master_addr} in {st.leader_source}'s log)")
    else:
        lines.append("leader: not elected yet (no master_addr= in the workers' logs)")
    rows = [("POD", "STATE", "READY", "RESTARTS", "NODE")]
    rows += [
        (p.name + (" *" if p.name == st.leader else ""), p.state, p.ready, str(p.restarts), p.node or "-")
        for p in st.pods
    ]
    if not st.pods:
        lines.append("no pods yet")
    else:
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip() for row in rows]
    return "\n".join(lines)


# --- logs ------------------------------------------------------------------------------------


def _log_lines(kube: Kube, pod: str, follow: bool, tail: int | None = None) -> Iterator[bytes]:
    """Lines (bytes, with their newline) of the trainer container's log, streamed."""
    # (connect, no read timeout) while following: urllib3 takes None, the client's stubs do not say so.
    timeout: Any = (REQUEST_TIMEOUT[0], None) if follow else REQUEST_TIMEOUT
    with api_errors(kube, f"log of pod {pod}"):
        # With _preload_content=False the client returns the urllib3 response, not a str.
        resp: Any = kube.core.read_namespaced_pod_log(
            pod,
            kube.namespace,
            container=names.TRAINER_CONTAINER,
            follow=follow,
            tail_lines=tail,
            _preload_content=False,
            _request_timeout=timeout,
        )
        try:
            pending = b""
            for chunk in resp.stream(64 * 1024):
                pending += chunk
                *done, pending = pending.split(b"\n")
                for line in done:
                    yield line + b"\n"
            if pending:
                yield pending
        finally:
            resp.release_conn()


def write_logs(
    kube: Kube, name: str, all_workers: bool, follow: bool, tail: int | None, out: TextIO | None = None
) -> None:
    """Print the leader's log, or every worker's with a ``[pod]`` prefix.

    Raises:
        UserError: no pods, or (leader only) no leader found yet.
    """
    out = out or sys.stdout
    get_job(kube, name)  # a clear "not found" before anything else
    pods = [pod_state(p) for p in list_pods(kube, name)]
    started = [p for p in pods if p.has_log]
    if not started:
        raise UserError(
            f"pytorchjob {name}", "no worker has started yet", f"wait, then retry; see fsdp-observe job status {name}"
        )
    if not all_workers:
        master_addr, _ = find_master_addr(kube, started)
        leader = match_leader(master_addr, started)
        if leader is None:
            raise UserError(
                f"pytorchjob {name}",
                "no leader found (no master_addr= naming a worker in their logs)",
                "pass --all to read every worker",
            )
        _copy(_log_lines(kube, leader, follow, tail), out, prefix=None)
        return
    lock = threading.Lock()
    errors: list[UserError] = []

    def pump(pod: str) -> None:
        try:
            _copy(_log_lines(kube, pod, follow, tail), out, prefix=f"[{pod}] ", lock=lock)
        except UserError as exc:
            errors.append(exc)

    if not follow:
        for pod in started:
            pump(pod.name)
    else:
        threads = [threading.Thread(target=pump, args=(p.name,), daemon=True) for p in started]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]


def _copy(lines: Iterable[bytes], out: TextIO, prefix: str | None, lock: threading.Lock | None = None) -> None:
    for raw in lines:
        text = raw.decode(errors="replace")
        if prefix:
            text = prefix + text
        if not text.endswith("\n"):
            text += "\n"
        if lock is None:
            out.write(text)
        else:
            with lock:
                out.write(text)
                out.flush()
    out.flush()


# --- stop ------------------------------------------------------------------------------------


def stop_job(kube: Kube, name: str, out: TextIO | None = None, err: TextIO | None = None) -> None:
    """Delete the job (its pods go with it); with an etcd rendezvous, restart the etcd pod.

    The walkthrough's stop script deleted the etcd pod by hand, because torchrun's rendezvous
    state outlives the job in etcd and a job that reuses it meets ``RendezvousClosedError``. Here
    the etcd Service named by ``elasticPolicy.rdzvHost`` is looked up and the pods it selects are
    deleted; their Deployment starts a fresh, empty etcd.
    """
    out, err = out or sys.stdout, err or sys.stderr
    job = get_job(kube, name)
    with api_errors(kube, f"pytorchjob {name}"):
        kube.custom.delete_namespaced_custom_object(
            GROUP,
            VERSION,
            kube.namespace,
            PLURAL,
            name,
            propagation_policy="Foreground",
            _request_timeout=REQUEST_TIMEOUT,
        )
    out.write(f"deleted pytorchjob {kube.namespace}/{name} (its pods are deleted with it)\n")
    elastic = (job.get("spec") or {}).get("elasticPolicy") or {}
    if elastic.get("rdzvBackend") not in ETCD_BACKENDS:
        return
    host = elastic.get("rdzvHost") or ""
    service = service_of_host(host, kube.namespace)
    if service is None:
        err.write(
            f"note: rendezvous host {host!r} is not a Service of this cluster; restart that etcd yourself "
            "so the next job starts from an empty rendezvous\n"
        )
        return
    svc_name, svc_ns = service
    with api_errors(kube, f"service {svc_name}", svc_ns):
        spec = kube.core.read_namespaced_service(svc_name, svc_ns, _request_timeout=REQUEST_TIMEOUT).spec
        selector = spec.selector if spec is not None else None
        if not selector:
            err.write(f"note: service {svc_ns}/{svc_name} selects no pods; restart etcd yourself\n")
            return
        pods = kube.core.list_namespaced_pod(
            svc_ns, label_selector=names.selector(selector), _request_timeout=REQUEST_TIMEOUT
        ).items
        for pod in pods:
            pod_name = str(pod.metadata.name) if pod.metadata is not None else ""
            kube.core.delete_namespaced_pod(pod_name, svc_ns, _request_timeout=REQUEST_TIMEOUT)
            out.write(f"restarted etcd: deleted pod {svc_ns}/{pod_name} (its Deployment starts a fresh one)\n")
    if not pods:
        err.write(f"note: no pod behind service {svc_ns}/{svc_name}; nothing to restart\n")


def service_of_host(host: str, default_namespace: str) -> tuple[str, str] | None:
    """``(service, namespace)`` for a cluster DNS name (``etcd``, ``etcd.ns``, ``etcd.ns.svc[...]``).

    Returns ``None`` for an IP address or a name outside the cluster (``etcd.example.com``).
    """
    if not host or re.fullmatch(r"[0-9.]+|\[?[0-9a-fA-F:]+\]?", host):
        return None
    labels = host.split(".")
    if len(labels) == 1:
        return labels[0], default_namespace
    if len(labels) == 2 or labels[2] == "svc":
        return labels[0], labels[1]
    return None
