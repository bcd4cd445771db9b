"""``fsdp-observe job status|logs|stop``: a job's state, its leader, its logs, its end, for every kind.

A job is looked up by name in each kind of ``observe.k8s.kinds.KINDS`` (or in the one ``--kind``
names); the kind then says how its pods are found, how its status reads and what stopping means.

The leader is the pod whose torchrun agent hosts rank 0: every agent logs the rendezvous result
(``master_addr=<host>``, at INFO, which rendered jobs enable with ``LOGLEVEL=INFO``), as the AWS EKS
walkthrough finds it with ``kubectl logs <pod> | grep master_addr=``. The host is a pod's name
(a PyTorchJob's ``<job>-worker-<i>``), its host name (a TrainJob's ``<job>-node-0-0``) or its IP.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, cast

from kubernetes.client.exceptions import ApiException

from observe.errors import UserError
from observe.k8s import names
from observe.k8s.client import REQUEST_TIMEOUT, Kube, api_error, api_errors, status_body
from observe.k8s.kinds import KINDS, JobKind, JobState

_MASTER_ADDR = re.compile(rb"master_addr=(\S+)")
#: Pods whose logs are searched for ``master_addr=`` before giving up.
LEADER_SEARCH_PODS = 3


@dataclass(frozen=True)
class PodState:
    """One pod of a job as ``job status`` shows it.

    Attributes:
        name: pod name (``<job>-worker-<i>``, ``<job>-node-0-<i>-<random>``).
        index: its node rank as its kind labels it, ``None`` when the label is missing.
        state: ``Running``, a container's waiting/terminated reason (``CrashLoopBackOff``,
            ``OOMKilled``, ``Completed``...), ``Terminating``, or the pod phase.
        ready: ``ready/total`` containers.
        restarts: container restarts summed.
        node: node name, ``None`` before scheduling.
        ip: pod IP, ``None`` before it has one.
        has_log: whether a container has started (so ``kubectl logs`` has something).
        hostname: ``spec.hostname`` when set (a JobSet's pods have one), else ``None``.
    """

    name: str
    index: int | None
    state: str
    ready: str
    restarts: int
    node: str | None
    ip: str | None
    has_log: bool
    hostname: str | None = None


@dataclass(frozen=True)
class JobStatus:
    """A job of some kind, its state, what its kind says of it, its pods and its leader."""

    kind: JobKind
    name: str
    namespace: str
    state: JobState
    details: list[str]
    pods: list[PodState]
    master_addr: str | None
    leader: str | None
    leader_source: str | None


def what(kind: JobKind, name: str) -> str:
    """How errors name a job: ``pytorchjob NAME``."""
    return f"{kind.kind.lower()} {name}"


def missing_api(kind: JobKind) -> tuple[str, str]:
    """``api_errors``' ``(problem, fix)`` for a cluster without ``kind``'s API."""
    return f"the cluster has no {kind.api_version} {kind.kind} API", kind.install


def find_job(kube: Kube, name: str, kinds: Sequence[JobKind] = KINDS) -> tuple[JobKind, dict[str, Any]]:
    """The job called ``name`` in the namespace: its kind and the object as the API returns it.

    Each kind of ``kinds`` is asked in turn; the first that has the job wins. A kind whose API the
    cluster lacks, or that this user may not read, is passed over for the next.

    Raises:
        UserError: no kind has it (naming the kinds whose API exists), the cluster has none of
            their APIs (naming what to install), reading is forbidden, or the API server failed.
    """
    present: list[JobKind] = []  # kinds whose API the cluster has
    forbidden: UserError | None = None
    for kind in kinds:
        with api_errors(kube, what(kind, name)):  # anything but the answers below is one line at once
            try:
                job = kube.custom.get_namespaced_custom_object(
                    kind.group, kind.version, kube.namespace, kind.plural, name, _request_timeout=REQUEST_TIMEOUT
                )
                return kind, cast(dict[str, Any], job)
            except ApiException as exc:
                if exc.status == 403:
                    forbidden = forbidden or api_error(exc, kube, what(kind, name), kube.namespace)
                elif exc.status == 404 and status_body(exc):  # a Status: the API is there, the job is not
                    present.append(kind)
                elif exc.status != 404:  # a bare "404 page not found" says this kind's API is not installed
                    raise
    if forbidden is not None:
        raise forbidden
    if present:
        raise UserError(
            f"{'/'.join(k.kind.lower() for k in present)} {name}",
            f"not found in namespace {kube.namespace}",
            f"list jobs with kubectl get {','.join(k.plural for k in present)} -A, and pass -n NAMESPACE",
        )
    if len(kinds) == 1:
        raise UserError(what(kinds[0], name), *missing_api(kinds[0]))
    raise UserError(
        f"job {name}",
        "the cluster has " + " and ".join(f"no {k.api_version} {k.kind} API" for k in kinds),
        ", or ".join(k.install.split(" (")[0] for k in kinds) + " (docs/kubernetes.md, prerequisites)",
    )


def list_pods(kube: Kube, kind: JobKind, name: str) -> list[Any]:
    """The job's pods (``V1Pod``), in node-rank order."""
    with api_errors(kube, f"pods of {what(kind, name)}"):
        pods = kube.core.list_namespaced_pod(
            kube.namespace, label_selector=kind.pod_selector(name), _request_timeout=REQUEST_TIMEOUT
        ).items

    def index(pod: Any) -> int | None:
        return kind.node_index(pod.metadata.labels or {})

    return sorted(pods, key=lambda p: (index(p) is None, index(p) or 0, p.metadata.name))


def pod_state(pod: Any, kind: JobKind | None = None) -> PodState:
    """Summarise a ``V1Pod`` of a job of ``kind`` (default: the first of ``KINDS``) for the status table."""
    kind = kind or KINDS[0]
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
        index=kind.node_index(pod.metadata.labels or {}),
        state=state,
        ready=f"{sum(1 for cs in statuses if cs.ready)}/{len(pod.spec.containers)}",
        restarts=sum(cs.restart_count or 0 for cs in statuses),
        node=pod.spec.node_name,
        ip=pod.status.pod_ip,
        has_log=started,
        hostname=pod.spec.hostname,
    )


def job_status(kube: Kube, name: str, kinds: Sequence[JobKind] = KINDS) -> JobStatus:
    """Find the job (``find_job``), read its pods, and find its leader.

    Raises:
        UserError: the job does not exist, the API is unreachable or forbidden.
    """
    kind, job = find_job(kube, name, kinds)
    pods = [pod_state(p, kind) for p in list_pods(kube, kind, name)]
    master_addr, source = find_master_addr(kube, kind, pods)
    return JobStatus(
        kind=kind,
        name=name,
        namespace=kube.namespace,
        state=kind.state(job),
        details=kind.describe(job),
        pods=pods,
        master_addr=master_addr,
        leader=match_leader(master_addr, pods),
        leader_source=source,
    )


def find_master_addr(kube: Kube, kind: JobKind, pods: list[PodState]) -> tuple[str | None, str | None]:
    """The last ``master_addr=`` in the first worker logs that have one: ``(value, pod)``.

    A log the API refuses (a container between restarts) is skipped for the next worker's.
    """
    for pod in [p for p in pods if p.has_log][:LEADER_SEARCH_PODS]:
        try:
            found = last_master_addr(_log_lines(kube, kind, pod.name, follow=False))
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
    """The pod ``master_addr`` names: by its first DNS label (a pod's name or host name) or by pod IP."""
    if not master_addr:
        return None
    host = master_addr.split(".")[0] if not re.fullmatch(r"[0-9.]+", master_addr) else None
    for pod in pods:
        if host is not None and host in (pod.name, pod.hostname):
            return pod.name
        if pod.ip and pod.ip == master_addr:
            return pod.name
    return None


def format_status(st: JobStatus) -> str:
    """The text ``job status`` prints."""
    s = st.state
    lines = [
        f"{st.kind.kind.lower()} {st.namespace}/{st.name}: {s.condition}"
        + (f" ({s.reason})" if s.reason else "")
        + (f" since {s.since}" if s.since else ""),
        *st.details,
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


def _log_lines(kube: Kube, kind: JobKind, pod: str, follow: bool, tail: int | None = None) -> Iterator[bytes]:
    """Lines (bytes, with their newline) of the trainer container's log, streamed."""
    # (connect, no read timeout) while following: urllib3 takes None, the client's stubs do not say so.
    timeout: Any = (REQUEST_TIMEOUT[0], None) if follow else REQUEST_TIMEOUT
    with api_errors(kube, f"log of pod {pod}"):
        # With _preload_content=False the client returns the urllib3 response, not a str.
        resp: Any = kube.core.read_namespaced_pod_log(
            pod,
            kube.namespace,
            container=kind.container,
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
    kube: Kube,
    name: str,
    all_workers: bool,
    follow: bool,
    tail: int | None,
    out: TextIO | None = None,
    kinds: Sequence[JobKind] = KINDS,
) -> None:
    """Print the leader's log, or every worker's with a ``[pod]`` prefix.

    Raises:
        UserError: no such job (``find_job``), no pods, or (leader only) no leader found yet.
    """
    out = out or sys.stdout
    kind, _ = find_job(kube, name, kinds)  # a clear "not found" before anything else
    pods = [pod_state(p, kind) for p in list_pods(kube, kind, name)]
    started = [p for p in pods if p.has_log]
    if not started:
        raise UserError(
            what(kind, name), "no worker has started yet", f"wait, then retry; see fsdp-observe job status {name}"
        )
    if not all_workers:
        master_addr, _ = find_master_addr(kube, kind, started)
        leader = match_leader(master_addr, started)
        if leader is None:
            raise UserError(
                what(kind, name),
                "no leader found (no master_addr= naming a worker in their logs)",
                "pass --all to read every worker",
            )
        _copy(_log_lines(kube, kind, leader, follow, tail), out, prefix=None)
        return
    lock = threading.Lock()
    errors: list[UserError] = []

    def pump(pod: str) -> None:
        try:
            _copy(_log_lines(kube, kind, pod, follow, tail), out, prefix=f"[{pod}] ", lock=lock)
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


def stop_job(
    kube: Kube,
    name: str,
    out: TextIO | None = None,
    err: TextIO | None = None,
    kinds: Sequence[JobKind] = KINDS,
    suspend: bool = False,
) -> None:
    """Delete the job (its pods go with it) or, with ``suspend``, suspend it (its pods are deleted,
    the object stays, to be resumed); then, when its kind keeps rendezvous state in an etcd
    (``JobKind.etcd_host``), restart that etcd's pod.

    The walkthrough's stop script deleted the etcd pod by hand, because torchrun's rendezvous
    state outlives the job in etcd and a job that reuses it meets ``RendezvousClosedError``. Here
    the etcd Service named by the job's rendezvous host is looked up and the pods it selects are
    deleted; their Deployment starts a fresh, empty etcd.

    Raises:
        UserError: no such job, no access, or the API failed.
    """
    out, err = out or sys.stdout, err or sys.stderr
    kind, job = find_job(kube, name, kinds)
    ref = f"{kind.kind.lower()} {kube.namespace}/{name}"
    with api_errors(kube, what(kind, name), missing_api=missing_api(kind)):
        if suspend:
            kube.custom.patch_namespaced_custom_object(
                kind.group,
                kind.version,
                kube.namespace,
                kind.plural,
                name,
                kind.suspend_patch(),
                _request_timeout=REQUEST_TIMEOUT,
            )
        else:
            kube.custom.delete_namespaced_custom_object(
                kind.group,
                kind.version,
                kube.namespace,
                kind.plural,
                name,
                propagation_policy="Foreground",
                _request_timeout=REQUEST_TIMEOUT,
            )
    if suspend:
        out.write(f"suspended {ref} (its pods are deleted; the job stays, with its status, until resumed or deleted)\n")
    else:
        out.write(f"deleted {ref} (its pods are deleted with it)\n")
    host = kind.etcd_host(job)
    if host is None:
        return
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
