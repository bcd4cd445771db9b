"""GPU health on the Kubernetes Node object: a condition of our own, and a NoSchedule taint on reboot-class XIDs.

Opt-in (``--node-condition``, ``--node-taint``; ``daemonsets/components/node-condition`` and
``node-taint``). The way node-problem-detector reports a problem: a node condition whose ``True``
means the problem is there.

- Condition ``FsdpObserveGPUFault`` (``CONDITION_TYPE``), set ``True`` on the first XID of a
  critical class (``node_reboot``, ``gpu_reset``, ``nvlink_fabric``) with ``reason`` the worst class
  seen (``NodeReboot``, ``GPUReset``, ``NVLinkFabric``) and a ``message``
  ``Faults: <XID, name, GPU index, UUID, PCI bus>; .... Action: <the class's first action> Clear
  this condition after the repair (docs/alerting.md).`` Written with a strategic-merge ``PATCH`` of
  ``nodes/<node>/status`` (conditions merge on ``type``: the kubelet's and other conditions stay),
  after a ``GET`` of the same subresource: a condition a person cleared means its faults are
  repaired (they are not named again), and one this agent set before a restart is kept in (a new
  XID adds to it, never downgrades it). RBAC: ``get`` and ``patch`` on ``nodes/status`` only.
- Taint ``fsdp-observe.io/gpu-fault=NodeReboot:NoSchedule`` (``TAINT_KEY``) on the first
  ``node_reboot``-class XID, so a job (PyTorchJob, TrainJob) restarted after the fault lands on another node.
  ``spec.taints`` has no merge key, so the agent reads the node (``get`` on ``nodes``) and sends a
  JSON patch that tests the ``resourceVersion`` it read and sets the list with its taint added
  (``patch`` on ``nodes``); a conflict (422 or 409) is read again and retried.

The agent never clears either: a person does after the repair (docs/alerting.md). Nothing is
written unless there is a new fact: the same XID again on the same GPU makes no call; a new GPU,
code or a worse class rewrites the one condition. A refused or failed call (no RBAC, no API
server) is one log line per kind of failure and a count (``node_condition_failed``,
``node_taint_failed``), never a stop; what was not written is retried with the next XID and every
``retry_seconds``.

Calls run on their own thread; ``offer`` (called as each XID is counted) never blocks. With
``--state-dir`` an agent restart does not re-read old XIDs, so a condition or taint cleared after
a repair stays cleared.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Protocol

import httpx

from observe.model import NodeHealth, XidEvent
from observe.xid import SEVERITY_ACTION, lookup

log = logging.getLogger(__name__)

CONDITION_TYPE = "FsdpObserveGPUFault"
TAINT_KEY = "fsdp-observe.io/gpu-fault"
TAINT_EFFECT = "NoSchedule"
#: Classes that set the condition, worst first, with the condition's ``reason`` for each.
REASONS: dict[str, str] = {"node_reboot": "NodeReboot", "gpu_reset": "GPUReset", "nvlink_fabric": "NVLinkFabric"}
#: The class that also taints the node.
TAINT_CLASS = "node_reboot"
#: Longest condition message, in characters (kubectl describe shows it whole).
MAX_MESSAGE_CHARS = 1024
#: Faults named in the message; more are counted.
MAX_FAULTS_NAMED = 8
#: The message's parts: ``Faults: <fault>; <fault>. Action: <action> <CLEAR_NOTE>``.
FAULTS, ACTION = "Faults:", ". Action: "
CLEAR_NOTE = "Clear this condition after the repair (docs/alerting.md)."
TAINT_FIX = "give the agent's ServiceAccount get and patch on nodes (daemonsets/components/node-taint)"
CONDITION_FIX = "give the agent's ServiceAccount get and patch on nodes/status (daemonsets/components/node-condition)"


def xid_action(xid_class: str) -> str:
    """The first action for a class (``observe.xid``)."""
    return SEVERITY_ACTION[xid_class]


def _parse(condition: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(reason, fault texts) of a condition this agent wrote, ``None`` if it is not in our format."""
    message, reason = str(condition.get("message") or ""), str(condition.get("reason") or "")
    if reason not in REASONS.values() or not message.startswith(FAULTS) or ACTION not in message:
        return None
    named = message[len(FAULTS) : message.index(ACTION)].strip()
    return reason, [text for text in named.split("; ") if text and not text.startswith("and ")]


class NodeApi(Protocol):
    """The three calls the reporter makes (``KubeNodeApi``; a test may pass another)."""

    def patch_status(self, node: str, body: dict[str, Any]) -> None:
        """Strategic-merge PATCH of ``/api/v1/nodes/<node>/status``."""

    def read(self, node: str) -> dict[str, Any]:
        """``GET /api/v1/nodes/<node>`` as JSON."""

    def read_status(self, node: str) -> dict[str, Any]:
        """``GET /api/v1/nodes/<node>/status`` as JSON."""

    def json_patch(self, node: str, ops: list[dict[str, Any]]) -> None:
        """JSON PATCH of ``/api/v1/nodes/<node>``."""


class ApiFailure(Exception):
    """A call failed. ``status`` is the HTTP status (0: no answer); ``text`` one line of why;
    ``call`` the request (``PATCH nodes/<node>/status``)."""

    def __init__(self, status: int, text: str, call: str = "") -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.call = call


@dataclass(frozen=True)
class Fault:
    """One critical XID on one GPU, as the condition names it."""

    xid_class: str
    xid: int
    pci_bus: str | None
    gpu: int | None
    gpu_uuid: str | None

    def text(self) -> str:
        gpu = "GPU ?" if self.gpu is None else f"GPU {self.gpu}"
        where = ", ".join(x for x in (self.gpu_uuid, f"PCI {self.pci_bus}" if self.pci_bus else None) if x)
        return f"XID {self.xid} ({lookup(self.xid).name}) on {gpu}" + (f" ({where})" if where else "")


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeHealthReporter:
    """Writes the condition and the taint for one node from the XIDs the agent counts.

    Args:
        node: the Kubernetes node name (the agent's ``--node``).
        api: the API calls (``KubeNodeApi``).
        condition: write the condition. taint: add the taint on a ``node_reboot``-class XID.
        gpu_of: PCI bus -> (NVML index, UUID) of the node's GPUs now, for the message.
        retry_seconds: how often what could not be written is tried again.
        refresh_seconds: how often the node is read to show what it carries now (at start, then
            this often: a person may have cleared the condition or the taint).
    """

    def __init__(
        self,
        node: str,
        api: NodeApi,
        condition: bool,
        taint: bool,
        gpu_of: Callable[[str | None], tuple[int | None, str | None]] = lambda bus: (None, None),
        retry_seconds: float = 60.0,
        refresh_seconds: float = 600.0,
    ) -> None:
        self.node = node
        self.api = api
        self.condition = condition
        self.taint = taint
        self.gpu_of = gpu_of
        self.retry_seconds = retry_seconds
        self.refresh_seconds = refresh_seconds
        self._read_at = 0.0
        self.errors: dict[str, int] = {}
        self._queue: queue.SimpleQueue[XidEvent | None] = queue.SimpleQueue()
        self._faults: dict[tuple[str, int, str | None], Fault] = {}
        self._reported: set[tuple[str, int, str | None]] = set()  # faults the condition on the node names
        self._seen: dict[tuple[str, int, str | None], int] = {}  # fault -> tick of its latest XID
        self._tick = 0  # one per XID offered
        self._written_tick = 0  # the tick of the latest condition write
        self._condition_due = False  # a critical XID came since the condition was last checked
        self._taint_due = False  # a reboot-class XID came since the taint was last checked
        self._earlier: tuple[str, list[str]] | None = None  # what a run before a restart named, unrepaired
        self._logged: set[str] = set()
        self._state = NodeHealth(
            condition_type=CONDITION_TYPE if condition else "", taint_key=TAINT_KEY if taint else ""
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- the agent's side -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread that makes the calls."""
        self._thread = threading.Thread(target=self._run, name="node-health", daemon=True)
        self._thread.start()

    def stop(self, wait_seconds: float = 2.0) -> None:
        """Stop the thread: at once when idle, after the call in flight otherwise (waiting at most
        ``wait_seconds``, so the agent stops within its budget; the daemon thread ends with it)."""
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=wait_seconds)

    def offer(self, event: XidEvent) -> None:
        """An XID was just counted; never blocks."""
        if event.severity in REASONS:
            self._queue.put(event)

    def state(self) -> NodeHealth:
        """What was written so far, for ``/snapshot``."""
        with self._lock:
            return self._state

    def error_counts(self) -> dict[str, int]:
        """Failed calls by kind (``node_condition_failed``, ``node_taint_failed``), a copy."""
        with self._lock:
            return dict(self.errors)

    # -- the thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        self._refresh()
        while True:
            try:
                event = self._queue.get(timeout=self.retry_seconds)
            except queue.Empty:
                event = None
                if time.monotonic() - self._read_at >= self.refresh_seconds:
                    self._refresh()
                if not self._faults:
                    continue
            else:
                if event is None:
                    return
            if event is not None:
                self._add(event)
                while True:  # a burst (eight GPUs) is one call
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._sync()
                        return
                    self._add(more)
            self._sync()

    def _refresh(self) -> None:
        """Read what the node carries (our condition; our taint when tainting), for ``/snapshot``."""
        self._read_at = time.monotonic()
        try:
            if self.condition:
                node = self.api.read_status(self.node)
                ours = next(
                    (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION_TYPE),
                    None,
                )
                if ours is not None and ours.get("status") == "True":
                    self._update(
                        status="True", reason=str(ours.get("reason") or ""), message=str(ours.get("message") or "")
                    )
                else:
                    self._update(status="", reason="", message="")
            if self.taint:
                node = self.api.read(self.node)
                taint = next(
                    (
                        t
                        for t in (node.get("spec") or {}).get("taints") or []
                        if t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT
                    ),
                    None,
                )
                self._update(taint=f"{TAINT_KEY}={taint.get('value', '')}:{TAINT_EFFECT}" if taint else "")
        except ApiFailure as exc:
            self._failed(
                "read",
                exc,
                CONDITION_FIX if exc.call.endswith("/status") else TAINT_FIX,
                then=f"read again every {self.refresh_seconds:g} s",
            )

    def _add(self, event: XidEvent) -> None:
        gpu, uuid = event.gpu, event.gpu_uuid
        if gpu is None or uuid is None:
            found_gpu, found_uuid = self.gpu_of(event.pci_bus)
            gpu = gpu if gpu is not None else found_gpu
            uuid = uuid or found_uuid
        key = (event.severity, event.xid, event.pci_bus)
        self._faults.setdefault(key, Fault(event.severity, event.xid, event.pci_bus, gpu, uuid))
        self._tick += 1
        self._seen[key] = self._tick
        self._condition_due = True
        self._taint_due = self._taint_due or event.severity == TAINT_CLASS

    def _sync(self) -> None:
        """Write what the API server does not have yet."""
        try:
            if self.condition:
                self._write_condition()
            if self.taint and self._taint_due:
                self._write_taint()
        except Exception:  # noqa: BLE001 - a bug in a call must not stop the agent's collection
            self._count("node_health_internal")
            if "internal" not in self._logged:
                self._logged.add("internal")
                log.exception("node health: writing to the Kubernetes API failed (reported once)")

    def _compose(self, earlier: tuple[str, list[str]] | None) -> tuple[str, str]:
        """(reason, message) for the faults not yet cleared, with ``earlier`` (the reason and fault
        texts of a condition another run of the agent set) kept in."""
        order = list(REASONS)
        faults = sorted(
            self._faults.values(), key=lambda f: (order.index(f.xid_class), 99 if f.gpu is None else f.gpu, f.xid)
        )
        texts = [f.text() for f in faults]
        reasons = {REASONS[f.xid_class] for f in faults}
        if earlier is not None:
            reasons.add(earlier[0])
            texts += [text for text in earlier[1] if text not in texts]
        reason = next(r for r in REASONS.values() if r in reasons)
        named = "; ".join(texts[:MAX_FAULTS_NAMED]) + (
            f"; and {len(texts) - MAX_FAULTS_NAMED} more" if len(texts) > MAX_FAULTS_NAMED else ""
        )
        worst = next(cls for cls, r in REASONS.items() if r == reason)
        message = f"{FAULTS} {named}{ACTION}{xid_action(worst)} {CLEAR_NOTE}"
        return reason, message[:MAX_MESSAGE_CHARS]

    def _write_condition(self) -> None:
        """Read our condition; write it when it lacks a fault (or was cleared and one came since)."""
        if not self._condition_due:
            return
        try:
            node = self.api.read_status(self.node)
        except ApiFailure as exc:
            self._failed("condition", exc, CONDITION_FIX)
            return
        ours = next(
            (c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == CONDITION_TYPE), None
        )
        if ours is None or ours.get("status") != "True":
            self._earlier = None
            if self._reported:  # a person cleared what this agent wrote: what it named is repaired,
                for key in [k for k, tick in self._seen.items() if tick <= self._written_tick]:
                    self._faults.pop(key, None)  # unless its XID came again since
                    self._seen.pop(key, None)
                self._reported = set()
            if not self._faults:
                self._condition_due = False
                return
        else:
            if set(self._faults) <= self._reported:
                self._condition_due = False  # the same fault again: the condition says it already
                return
            if not self._reported:  # set by this agent before a restart, still unrepaired: keep it in
                self._earlier = _parse(ours)
        reason, message = self._compose(self._earlier)
        now = _now()
        condition = {
            "type": CONDITION_TYPE,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": now,
        }
        if ours is None or ours.get("status") != "True":
            condition["lastTransitionTime"] = now
        try:
            self.api.patch_status(self.node, {"status": {"conditions": [condition]}})
        except ApiFailure as exc:
            self._failed("condition", exc, CONDITION_FIX)
            return
        self._reported = set(self._faults)
        self._written_tick = self._tick
        self._condition_due = False
        self._update(status="True", reason=reason, message=message, error="")
        log.warning(
            "node health: set condition %s=True on node %s (%s): %s", CONDITION_TYPE, self.node, reason, message
        )

    def _write_taint(self, attempts: int = 3) -> None:
        taint = {"key": TAINT_KEY, "value": REASONS[TAINT_CLASS], "effect": TAINT_EFFECT}
        for _ in range(attempts):
            try:
                node = self.api.read(self.node)
                taints = list((node.get("spec") or {}).get("taints") or [])
                if any(t.get("key") == TAINT_KEY and t.get("effect") == TAINT_EFFECT for t in taints):
                    break  # already there (this agent before a restart, or a person)
                version = node["metadata"]["resourceVersion"]
                taint_now = {**taint, "timeAdded": _now()}
                self.api.json_patch(
                    self.node,
                    [
                        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                        {"op": "add", "path": "/spec/taints", "value": [*taints, taint_now]},
                    ],
                )
                log.warning("node health: tainted node %s %s=%s:%s", self.node, TAINT_KEY, taint["value"], TAINT_EFFECT)
                break
            except ApiFailure as exc:
                if exc.status in (409, 422):  # changed since read (the test op failed): read again
                    continue
                self._failed("taint", exc, TAINT_FIX)
                return
        else:
            self._failed(
                "taint",
                ApiFailure(
                    409, f"the node changed between read and write {attempts} times", f"PATCH nodes/{self.node}"
                ),
                "",
            )
            return
        self._taint_due = False
        self._update(taint=f"{TAINT_KEY}={taint['value']}:{TAINT_EFFECT}", error="")

    def _failed(self, what: str, exc: ApiFailure, fix: str, then: str = "") -> None:
        """Count a failed call and show it; log it once per call and status (one line per missing
        permission, however often it is refused)."""
        self._count(f"node_{what}_failed")
        text = f"{exc.call} failed: {exc.text}" + (f"; {fix}" if exc.status in (401, 403) and fix else "")
        self._update(error=text)
        kind = f"{exc.call.split()[0]} {exc.call.split()[-1]}:{exc.status}"
        if kind not in self._logged:
            self._logged.add(kind)
            log.error(
                "node health: %s; %s (reported once)",
                text,
                then or f"retried with the next XID and every {self.retry_seconds:g} s",
            )

    def _count(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def _update(self, **changes: str) -> None:
        import dataclasses

        with self._lock:
            self._state = dataclasses.replace(self._state, **changes, updated_unix=time.time())


#: Where a pod finds the API server and its service-account credentials
#: (https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/).
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


class NoApiServer(Exception):
    """Neither ``--kube-api`` nor the pod's ``KUBERNETES_SERVICE_HOST`` says where the API server is."""


class KubeNodeApi:
    """``NodeApi`` over HTTPS with ``httpx`` (a base dependency: the slim agent image carries no
    Kubernetes client), authenticated by a bearer token read from ``token_file`` at every call
    (the kubelet rotates bound service-account tokens).

    Args:
        server: the API server's URL; default ``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``.
        token_file: default the pod's service-account token. ca_file: the CA bundle that signs the
            API server's certificate; default the pod's (``ca.crt``).
        timeout: seconds for one call.

    Raises:
        NoApiServer: from the constructor, outside a pod without ``server``.
        ApiFailure: from each call, with the HTTP status and the API server's message.
    """

    def __init__(
        self,
        server: str | None = None,
        token_file: str | None = None,
        ca_file: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        if server is None:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise NoApiServer("not in a pod (no KUBERNETES_SERVICE_HOST) and no --kube-api")
            server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self.server = server.rstrip("/")
        self.token_file = token_file or f"{SERVICE_ACCOUNT}/token"
        ca = ca_file or f"{SERVICE_ACCOUNT}/ca.crt"
        self._verify: str | bool = ca if os.path.exists(ca) else True
        self._timeout = timeout

    def _call(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        call = f"{method} {path.removeprefix('/api/v1/')}"
        try:
            with open(self.token_file, encoding="ascii") as f:
                token = f.read().strip()
        except OSError as exc:
            raise ApiFailure(0, f"cannot read the token {self.token_file} ({exc.strerror})", call) from None
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            response = httpx.request(
                method,
                self.server + path,
                headers=headers,
                timeout=self._timeout,
                content=None if body is None else json.dumps(body),
                verify=self._verify,
            )
        except httpx.HTTPError as exc:
            raise ApiFailure(0, f"no answer from the API server ({type(exc).__name__})", call) from None
        if response.status_code >= 400:
            try:
                message = response.json().get("message") or response.reason_phrase
            except ValueError:
                message = response.text.strip()[:200] or response.reason_phrase
            raise ApiFailure(response.status_code, f"{response.status_code} {response.reason_phrase}: {message}", call)
        try:
            return response.json()
        except ValueError:
            raise ApiFailure(response.status_code, "the answer is not JSON", call) from None

    def patch_status(self, node: str, body: dict[str, Any]) -> None:
        """Strategic-merge PATCH of the node's status."""
        self._call("PATCH", f"/api/v1/nodes/{node}/status", body, "application/strategic-merge-patch+json")

    def read(self, node: str) -> dict[str, Any]:
        """The node as JSON."""
        return dict(self._call("GET", f"/api/v1/nodes/{node}"))

    def read_status(self, node: str) -> dict[str, Any]:
        """The node as JSON, through its status subresource (``get`` on ``nodes/status``)."""
        return dict(self._call("GET", f"/api/v1/nodes/{node}/status"))

    def json_patch(self, node: str, ops: list[dict[str, Any]]) -> None:
        """JSON PATCH of the node."""
        self._call("PATCH", f"/api/v1/nodes/{node}", ops, "application/json-patch+json")
