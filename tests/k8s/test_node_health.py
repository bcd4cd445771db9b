"""The node condition and taint, written by the real ``kubernetes`` client to the recorded-API test server.

The agent's own HTTP client (httpx: the slim agent image has no Kubernetes client) talks to the
recorded-API test server (``tests/support/fake_apiserver.py``, the one test double here: no API
server runs where the tests run), which answers with recorded Node and Status bodies and keeps
every request, so these tests check
the exact PATCH bodies and content types, that a second XID writes nothing new, and that a
refused call is one log line, not a stop.
"""

from __future__ import annotations

import json
import logging
import re

import pytest

from observe.agent.node_health import CONDITION_TYPE, TAINT_KEY, KubeNodeApi, NodeHealthReporter
from observe.model import XidEvent
from observe.xid import REBOOT, RESET_GPU, lookup
from tests.support.fake_apiserver import TOKEN, RecordedAPIServer, Reply
from tests.support.processes import wait_for

NODE = "gpu-node-1"
STATUS = f"/api/v1/nodes/{NODE}/status"
OBJECT = f"/api/v1/nodes/{NODE}"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
GPUS = {
    "0000:10:00": (0, "GPU-fa4e0000-0000-4000-8000-000000000000"),
    "0000:20:00": (1, "GPU-fa4e0000-0000-4000-8000-000000000001"),
}
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def xid_event(code: int, bus: str) -> XidEvent:
    info = lookup(code)
    return XidEvent(xid=code, name=info.name, severity=info.severity, action=info.action, node=NODE, pci_bus=bus)


def routes(
    status: Reply | None = None, read: Reply | None = None, patch: Reply | None = None, read_status: Reply | None = None
) -> dict:
    node = Reply.recorded("node-gpu-node-1.json")
    return {
        ("PATCH", STATUS): status or node,
        ("GET", STATUS): read_status or node,
        ("GET", OBJECT): read or node,
        ("PATCH", OBJECT): patch or node,
    }


def with_condition(condition: dict) -> Reply:
    """The recorded node as the API server returns it once ``condition`` is on it."""
    node = json.loads(Reply.recorded("node-gpu-node-1.json").body)
    node["status"]["conditions"].append(condition)
    return Reply(200, json.dumps(node).encode())


def written(server: RecordedAPIServer) -> list[dict]:
    """The condition of every status PATCH, in order."""
    out = []
    for call in patches(server, STATUS):
        (condition,) = json.loads(call.body)["status"]["conditions"]
        out.append(condition)
    return out


GPU0 = "GPU 0 (GPU-fa4e0000-0000-4000-8000-000000000000, PCI 0000:10:00)"
GPU1 = "GPU 1 (GPU-fa4e0000-0000-4000-8000-000000000001, PCI 0000:20:00)"
CLEAR = " Clear this condition after the repair (docs/alerting.md)."


@pytest.fixture
def token(tmp_path) -> str:
    """A token file holding the recorded server's bearer token, as a pod's service-account token."""
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return str(path)


@pytest.fixture
def reporter(api_server, token):
    """``reporter(routes, condition=..., taint=...)``: a started reporter against a recorded server."""
    made: list[NodeHealthReporter] = []

    def make(
        server_routes: dict, condition: bool = True, taint: bool = False
    ) -> tuple[NodeHealthReporter, RecordedAPIServer]:
        server = api_server(server_routes)
        r = NodeHealthReporter(
            NODE,
            KubeNodeApi(server.url, token_file=token),
            condition,
            taint,
            gpu_of=lambda bus: GPUS.get(bus or "", (None, None)),
            retry_seconds=0.5,
        )
        r.start()
        made.append(r)
        reads = int(condition) + int(taint)  # at start it reads what the node carries, for /snapshot
        wait_for(lambda: len(server.calls("GET")) == reads, what="the reads at start")
        server.requests.clear()
        return r, server

    yield make
    for r in made:
        r.stop()


def patches(server: RecordedAPIServer, path: str) -> list:
    return [r for r in server.calls("PATCH") if r.path == path]


def test_a_critical_xid_sets_our_condition_with_one_strategic_merge_patch(reporter) -> None:
    r, server = reporter(routes())
    r.offer(xid_event(48, "0000:10:00"))
    wait_for(lambda: patches(server, STATUS), what="the status PATCH")
    (call,) = patches(server, STATUS)
    assert call.content_type == STRATEGIC and call.authorization == "Bearer recorded-token"
    body = json.loads(call.body)
    (condition,) = body["status"]["conditions"]
    assert TIME.match(condition.pop("lastHeartbeatTime")) and TIME.match(condition.pop("lastTransitionTime"))
    assert body == {
        "status": {
            "conditions": [
                {
                    "type": CONDITION_TYPE,
                    "status": "True",
                    "reason": "GPUReset",
                    "message": f"Faults: XID 48 (Double bit ECC error (DBE)) on {GPU0}. Action: {RESET_GPU}{CLEAR}",
                }
            ]
        }
    }
    # read first (was it cleared? set by an earlier run?), through the status subresource only
    assert [(c.method, c.path) for c in server.requests] == [("GET", STATUS), ("PATCH", STATUS)]
    wait_for(lambda: r.state().status == "True", what="the state")
    assert r.state().reason == "GPUReset" and r.state().error == "" and r.state().taint == ""


def test_the_same_xid_again_writes_nothing_and_a_new_fact_rewrites_the_one_condition(reporter) -> None:
    r, server = reporter(routes())
    r.offer(xid_event(48, "0000:10:00"))
    wait_for(lambda: patches(server, STATUS), what="the first PATCH")
    server.routes[("GET", STATUS)] = with_condition(written(server)[0])  # what the API server now has
    for _ in range(3):
        r.offer(xid_event(48, "0000:10:00"))  # the same XID on the same GPU: read, nothing written
    wait_for(lambda: len(server.calls("GET")) >= 2, what="the read after the repeat")
    r.offer(xid_event(13, "0000:10:00"))  # an application XID: not a GPU fault
    r.offer(xid_event(74, "0000:20:00"))  # a new GPU and class
    wait_for(lambda: len(patches(server, STATUS)) == 2, what="the second PATCH")
    server.routes[("GET", STATUS)] = with_condition(written(server)[1])
    r.offer(xid_event(74, "0000:20:00"))
    r.offer(xid_event(48, "0000:10:00"))
    r.offer(xid_event(79, "0000:20:00"))  # worse: the reason becomes NodeReboot
    wait_for(lambda: len(patches(server, STATUS)) == 3, what="the third PATCH")
    first, second, third = written(server)
    assert all(c["type"] == CONDITION_TYPE and c["status"] == "True" for c in (first, second, third))
    assert "lastTransitionTime" in first
    assert "lastTransitionTime" not in second and "lastTransitionTime" not in third  # still True since the first
    assert (second["reason"], second["message"]) == (
        "GPUReset",
        f"Faults: XID 48 (Double bit ECC error (DBE)) on "
        f"{GPU0}; XID 74 (NVLink error) on {GPU1}. Action: {RESET_GPU}{CLEAR}",
    )
    assert (third["reason"], third["message"]) == (
        "NodeReboot",
        f"Faults: XID 79 (GPU has fallen off the bus) on "
        f"{GPU1}; XID 48 (Double bit ECC error (DBE)) on {GPU0}; XID 74 "
        f"(NVLink error) on {GPU1}. Action: {REBOOT}{CLEAR}",
    )
    r.stop()
    assert len(patches(server, STATUS)) == 3  # and nothing more
    assert all(c.path == STATUS for c in server.requests)


def test_a_condition_a_person_cleared_names_only_what_came_after(reporter) -> None:
    r, server = reporter(routes())
    r.offer(xid_event(79, "0000:20:00"))
    wait_for(lambda: patches(server, STATUS), what="the first PATCH")
    # the node was rebooted and the condition cleared (the API server has none of ours again)
    r.offer(xid_event(48, "0000:10:00"))
    wait_for(lambda: len(patches(server, STATUS)) == 2, what="the PATCH after the repair")
    second = written(server)[1]
    assert "lastTransitionTime" in second  # a new fault, not the old one still there
    assert (second["reason"], second["message"]) == (
        "GPUReset",
        f"Faults: XID 48 (Double bit ECC error (DBE)) on {GPU0}. Action: {RESET_GPU}{CLEAR}",
    )


def test_a_condition_set_before_a_restart_is_kept_in_and_never_downgraded(reporter) -> None:
    earlier = {
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": "NodeReboot",
        "message": f"Faults: XID 79 (GPU has fallen off the bus) on {GPU1}. Action: {REBOOT}{CLEAR}",
        "lastHeartbeatTime": "2025-06-11T18:44:10Z",
        "lastTransitionTime": "2025-06-11T18:44:10Z",
    }
    r, server = reporter(routes(read_status=with_condition(earlier)))  # a fresh agent after a restart
    r.offer(xid_event(48, "0000:10:00"))
    wait_for(lambda: patches(server, STATUS), what="the PATCH")
    (condition,) = written(server)
    condition = dict(condition)
    assert "lastTransitionTime" not in condition
    assert (condition["reason"], condition["message"]) == (
        "NodeReboot",
        f"Faults: XID 48 (Double bit ECC error (DBE)) on {GPU0}; XID 79 (GPU has fallen off the bus) on "
        f"{GPU1}. Action: {REBOOT}{CLEAR}",
    )
    server.routes[("GET", STATUS)] = with_condition(condition)
    r.offer(xid_event(74, "0000:10:00"))  # a later write still names what the earlier run did
    wait_for(lambda: len(patches(server, STATUS)) == 2, what="the second PATCH")
    assert written(server)[1]["message"] == (
        f"Faults: XID 48 (Double bit ECC error (DBE)) on {GPU0}; XID 74 (NVLink error) on {GPU0}; XID 79 (GPU has "
        f"fallen off the bus) on {GPU1}. Action: {REBOOT}{CLEAR}"
    )


def test_a_reboot_class_xid_taints_the_node_keeping_its_other_taints(reporter) -> None:
    r, server = reporter(routes(), condition=False, taint=True)
    r.offer(xid_event(48, "0000:10:00"))  # GPU reset: no taint
    r.offer(xid_event(79, "0000:20:00"))
    wait_for(lambda: patches(server, OBJECT), what="the taint PATCH")
    assert [c.method for c in server.requests][-2:] == ["GET", "PATCH"]
    (call,) = patches(server, OBJECT)
    assert call.content_type == JSON_PATCH
    ops = json.loads(call.body)
    assert TIME.match(ops[1]["value"][1].pop("timeAdded"))
    assert ops == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "5120777"},
        {
            "op": "add",
            "path": "/spec/taints",
            "value": [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                {"key": TAINT_KEY, "value": "NodeReboot", "effect": "NoSchedule"},
            ],
        },
    ]
    server.routes[("GET", OBJECT)] = Reply.recorded("node-gpu-node-1-tainted.json")  # as the API server now has it
    for _ in range(2):
        r.offer(xid_event(79, "0000:10:00"))  # another GPU falls off: the node is tainted already
    r.stop()
    assert len(patches(server, OBJECT)) == 1 and not [c for c in server.requests if c.path == STATUS]
    assert r.state().taint == f"{TAINT_KEY}=NodeReboot:NoSchedule"


def test_a_taint_already_there_is_not_added_twice(reporter) -> None:
    """After an agent restart (or a person's taint) the node already carries it: read, nothing written."""
    r, server = reporter(routes(read=Reply.recorded("node-gpu-node-1-tainted.json")), condition=False, taint=True)
    r.offer(xid_event(79, "0000:20:00"))
    wait_for(lambda: server.calls("GET"), what="the read")
    r.stop()
    assert [c.method for c in server.requests] == ["GET"]
    assert r.state().taint == f"{TAINT_KEY}=NodeReboot:NoSchedule"


def test_a_conflict_is_read_again_and_retried(reporter) -> None:
    r, server = reporter(
        routes(patch=Reply.recorded("status-422-node-test-failed.json", 422)), condition=False, taint=True
    )
    r.offer(xid_event(79, "0000:20:00"))
    wait_for(lambda: r.state().error, what="giving up after the retries")
    assert [c.method for c in server.requests][:6] == ["GET", "PATCH"] * 3
    assert r.state().error == f"PATCH nodes/{NODE} failed: the node changed between read and write 3 times"
    assert r.state().taint == ""


def test_rbac_denial_is_one_log_line_and_the_agent_goes_on(reporter, caplog: pytest.LogCaptureFixture) -> None:
    denied = Reply.recorded("status-403-node-status.json", 403)
    with caplog.at_level(logging.ERROR, logger="observe.agent.node_health"):
        r, server = reporter(routes(status=denied, read=Reply.recorded("status-403-node.json", 403)), taint=True)
        # get on nodes/status allowed, patch refused: the agent reads, then is refused
        r.offer(xid_event(79, "0000:20:00"))
        wait_for(
            lambda: r.error_counts().get("node_taint_failed") and r.error_counts().get("node_condition_failed"),
            what="both refusals counted",
        )
        r.offer(xid_event(48, "0000:10:00"))  # retried with the next XID ...
        wait_for(lambda: len(patches(server, STATUS)) >= 2, what="the retry")
        wait_for(lambda: len(patches(server, STATUS)) >= 3, what="the timed retry")  # ... and every retry_seconds
        r.stop()
    lines = [rec.getMessage() for rec in caplog.records]
    sa = "system:serviceaccount:fsdp-observe:fsdp-observe-agent"
    forbidden = f'403 Forbidden: nodes "{NODE}" is forbidden: User "{sa}" cannot'
    assert lines == [  # one line per refused permission, however often it is refused
        f'node health: GET nodes/{NODE} failed: {forbidden} get resource "nodes" in API group "" at the cluster '
        f"scope; give the agent's ServiceAccount get and patch on nodes (daemonsets/components/node-taint); read "
        f"again every 600 s (reported once)",
        f'node health: PATCH nodes/{NODE}/status failed: {forbidden} patch resource "nodes/status" in API group '
        f'"" at the cluster scope; give the agent\'s ServiceAccount get and patch on nodes/status '
        f"(daemonsets/components/node-condition); retried with the next XID and every 0.5 s (reported once)",
    ]
    assert not [rec for rec in caplog.records if rec.exc_info]  # no traceback
    assert r.state().status == "" and r.state().error.startswith("GET nodes/gpu-node-1 failed: 403")


def test_an_unreachable_api_server_is_counted_not_raised(token) -> None:
    r = NodeHealthReporter(
        NODE, KubeNodeApi("http://127.0.0.1:9", token_file=token), condition=True, taint=False, retry_seconds=60
    )
    r.start()
    try:
        r.offer(xid_event(48, "0000:10:00"))
        wait_for(lambda: r.error_counts().get("node_condition_failed"), what="the failure counted")
        assert r.state().error.startswith(f"GET nodes/{NODE}/status failed: no answer from the API server")
    finally:
        r.stop()


def test_the_token_is_read_at_every_call(reporter, token) -> None:
    """Bound service-account tokens rotate: a changed file is used from the next call on."""
    from pathlib import Path

    r, server = reporter(routes())
    Path(token).write_text("rotated-token\n")
    r.offer(xid_event(48, "0000:10:00"))
    wait_for(lambda: r.error_counts().get("node_condition_failed"), what="the refusal")
    assert server.requests[-1].authorization == "Bearer rotated-token"
    assert r.state().error.startswith(f"GET nodes/{NODE}/status failed: 401 Unauthorized: Unauthorized")


def test_outside_a_pod_without_an_address_is_refused(monkeypatch) -> None:
    import pytest as _pytest

    from observe.agent.node_health import NoApiServer

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with _pytest.raises(NoApiServer, match="no KUBERNETES_SERVICE_HOST"):
        KubeNodeApi()
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    assert KubeNodeApi().server == "https://[fd00::1]:6443"
