"""``fsdp-observe job status|logs|stop`` against recorded Kubernetes API responses.

No Kubernetes API server exists where these tests run. A local HTTP server (``tests/support/fake_apiserver.py``)
replays recorded API responses (``recorded/README.md`` says where they come from), and the
official ``kubernetes`` client reaches it over real HTTP through a kubeconfig: the code under test
is exactly what talks to a cluster. The server also records what the client asked for.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
from pathlib import Path

import pytest

from observe.cli import main as cli_main
from observe.k8s.jobs import PodState, match_leader, pod_state, service_of_host
from tests.support.fake_apiserver import RECORDED, Reply

JOB = "llama2-7b-fsdp"
JOB_PATH = f"/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/{JOB}"
PODS = "/api/v1/namespaces/default/pods"
ETCD_PODS = "/api/v1/namespaces/fsdp-observe/pods"
ETCD_SERVICE = "/api/v1/namespaces/fsdp-observe/services/fsdp-observe-etcd"
ETCD_POD = "fsdp-observe-etcd-6c9d8b7f5d-q2x7k"


def log_path(i: int) -> str:
    return f"{PODS}/{JOB}-worker-{i}/log"


def healthy() -> dict:
    """Routes of a running two-node job whose leader is worker 1 (as in the AWS walkthrough)."""
    return {
        ("GET", JOB_PATH): Reply.recorded("pytorchjob-llama2-7b-fsdp.json"),
        ("GET", PODS): Reply.recorded("pods-llama2-7b-fsdp.json"),
        ("GET", log_path(0)): Reply.recorded("log-llama2-7b-fsdp-worker-0.txt"),
        ("GET", log_path(1)): Reply.recorded("log-llama2-7b-fsdp-worker-1.txt"),
        ("DELETE", JOB_PATH): Reply.recorded("delete-pytorchjob-llama2-7b-fsdp.json"),
        ("GET", ETCD_SERVICE): Reply.recorded("service-fsdp-observe-etcd.json"),
        ("GET", ETCD_PODS): Reply.recorded("pods-fsdp-observe-etcd.json"),
        ("DELETE", f"{ETCD_PODS}/{ETCD_POD}"): Reply.recorded("delete-pod-etcd.json"),
    }


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    status = cli_main(["job", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_status_names_the_leader_and_every_worker(api_server, kubeconfig, capsys) -> None:
    server = api_server(healthy())
    status, out, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"pytorchjob default/{JOB}: Running (PyTorchJobRunning) since 2025-06-11T18:59:41Z"
    assert lines[1] == (
        "rendezvous: etcd-v2 at fsdp-observe-etcd.fsdp-observe.svc:2379, "
        "id llama2-7b-fsdp-5f0c2e9a, nodes 2..2, max restarts 3"
    )
    assert lines[2] == f"leader: {JOB}-worker-1 (master_addr={JOB}-worker-1 in {JOB}-worker-0's log)"
    assert lines[3].split() == ["POD", "STATE", "READY", "RESTARTS", "NODE"]
    assert lines[4].split() == [f"{JOB}-worker-0", "Running", "1/1", "0", "ip-10-1-12-34.us-west-2.compute.internal"]
    assert lines[5].split() == [
        f"{JOB}-worker-1",
        "*",
        "Running",
        "1/1",
        "0",
        "ip-10-1-56-78.us-west-2.compute.internal",
    ]
    pods_call = server.calls("GET")[1]
    assert pods_call.path == PODS
    assert pods_call.query["labelSelector"] == [f"training.kubeflow.org/job-name={JOB}"]
    log_calls = [r for r in server.requests if r.path.endswith("/log")]
    assert [r.path for r in log_calls] == [log_path(0)]  # worker 0's log named the leader: no more reads
    assert log_calls[0].query["container"] == ["pytorch"]
    assert all(r.authorization == "Bearer recorded-token" for r in server.requests)


def test_status_of_a_job_in_trouble(api_server, kubeconfig, capsys) -> None:
    """Crash loop after an OOM kill, an unschedulable pod, and no rendezvous yet."""
    before_rendezvous = (RECORDED / "log-llama2-7b-fsdp-worker-0.txt").read_text().split("Rendezvous'ing")[0]
    routes = healthy() | {
        ("GET", PODS): Reply.recorded("pods-llama2-7b-fsdp-trouble.json"),
        ("GET", log_path(0)): Reply(200, before_rendezvous.encode(), "text/plain"),
        ("GET", log_path(1)): Reply(200, b"Traceback (most recent call last):\ntorch.OutOfMemoryError\n", "text/plain"),
    }
    server = api_server(routes)
    status, out, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    lines = out.splitlines()
    assert lines[2] == "leader: not elected yet (no master_addr= in the workers' logs)"
    rows = {line.split()[0]: line.split()[1:] for line in lines[4:]}
    assert rows[f"{JOB}-worker-0"] == ["Running", "1/1", "0", "ip-10-1-12-34.us-west-2.compute.internal"]
    assert rows[f"{JOB}-worker-1"] == ["CrashLoopBackOff", "0/1", "4", "ip-10-1-56-78.us-west-2.compute.internal"]
    assert rows[f"{JOB}-worker-2"] == ["Pending", "(Unschedulable)", "0/1", "0", "-"]
    # The pending pod has no log: it is never asked for one.
    assert log_path(2) not in [r.path for r in server.requests]


def test_a_refused_log_is_skipped_for_the_next_worker(api_server, kubeconfig, capsys) -> None:
    waiting = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "reason": "BadRequest",
        "message": f'container "pytorch" in pod "{JOB}-worker-0" is waiting to start: ContainerCreating',
        "code": 400,
    }
    server = api_server(healthy() | {("GET", log_path(0)): Reply(400, json.dumps(waiting).encode())})
    status, out, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    assert f"leader: {JOB}-worker-1 (master_addr={JOB}-worker-1 in {JOB}-worker-1's log)" in out.splitlines()


def test_logs_prints_the_leaders_log(api_server, kubeconfig, capsys) -> None:
    server = api_server(healthy())
    status, out, err = run(["logs", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    assert out == (RECORDED / "log-llama2-7b-fsdp-worker-1.txt").read_text()
    assert [r.path for r in server.requests if r.path.endswith("/log")] == [log_path(0), log_path(1)]


def test_logs_all_prefixes_every_workers_lines(api_server, kubeconfig, capsys) -> None:
    server = api_server(healthy())
    status, out, err = run(["logs", JOB, "--all", "--tail", "5", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    expected = []
    for i in (0, 1):
        text = (RECORDED / f"log-llama2-7b-fsdp-worker-{i}.txt").read_text()
        expected += [f"[{JOB}-worker-{i}] {line}" for line in text.splitlines()]
    assert out.splitlines() == expected  # the recorded server ignores tailLines; the client must send it
    tails = [r.query.get("tailLines") for r in server.requests if r.path.endswith("/log")]
    assert tails == [["5"], ["5"]]


def test_stop_deletes_the_job_and_restarts_etcd(api_server, kubeconfig, capsys) -> None:
    server = api_server(healthy())
    status, out, err = run(["stop", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    assert out.splitlines() == [
        f"deleted pytorchjob default/{JOB} (its pods are deleted with it)",
        f"restarted etcd: deleted pod fsdp-observe/{ETCD_POD} (its Deployment starts a fresh one)",
    ]
    deletes = server.calls("DELETE")
    assert [d.path for d in deletes] == [JOB_PATH, f"{ETCD_PODS}/{ETCD_POD}"]
    assert deletes[0].query["propagationPolicy"] == ["Foreground"]  # pods go before the job object
    etcd_list = [r for r in server.requests if r.path == ETCD_PODS][0]
    assert etcd_list.query["labelSelector"] == ["app.kubernetes.io/name=etcd,app.kubernetes.io/component=rendezvous"]


def test_stop_with_c10d_leaves_etcd_alone(api_server, kubeconfig, capsys) -> None:
    job = json.loads((RECORDED / "pytorchjob-llama2-7b-fsdp.json").read_text())
    job["spec"]["elasticPolicy"] = {
        k: v for k, v in job["spec"]["elasticPolicy"].items() if k not in ("rdzvHost", "rdzvPort")
    } | {"rdzvBackend": "c10d"}
    server = api_server(healthy() | {("GET", JOB_PATH): Reply(200, json.dumps(job).encode())})
    status, out, err = run(["stop", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0, err
    assert [d.path for d in server.calls("DELETE")] == [JOB_PATH]
    assert not [r for r in server.requests if "fsdp-observe" in r.path.split("/namespaces/")[-1][:12]]


def test_stop_with_an_etcd_outside_the_cluster_says_so(api_server, kubeconfig, capsys) -> None:
    job = json.loads((RECORDED / "pytorchjob-llama2-7b-fsdp.json").read_text())
    job["spec"]["elasticPolicy"]["rdzvHost"] = "10.0.3.41"
    server = api_server(healthy() | {("GET", JOB_PATH): Reply(200, json.dumps(job).encode())})
    status, out, err = run(["stop", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 0
    assert "rendezvous host '10.0.3.41' is not a Service of this cluster" in err
    assert [d.path for d in server.calls("DELETE")] == [JOB_PATH]


@pytest.mark.parametrize("action", ["status", "logs", "stop"])
def test_a_missing_job_is_one_line(action, api_server, kubeconfig, capsys) -> None:
    server = api_server(
        {
            ("GET", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/no-such-job"): Reply.recorded(
                "status-404-pytorchjob.json", 404
            )
        }
    )
    status, _, err = run([action, "no-such-job", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 2
    one_line_error(err, "pytorchjob no-such-job: not found in namespace default", "kubectl get pytorchjobs -A")
    assert not server.calls("DELETE")


def test_forbidden_is_one_line_naming_the_role(api_server, kubeconfig, capsys) -> None:
    server = api_server({("GET", JOB_PATH): Reply.recorded("status-403-pytorchjob.json", 403)})
    status, _, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 2
    one_line_error(
        err, "forbidden in namespace default", 'User "alice" cannot get', "fsdp-observe job access -n default"
    )


def test_a_cluster_without_the_training_operator_is_one_line(api_server, kubeconfig, capsys) -> None:
    server = api_server({})  # every path answers the API server's bare "404 page not found"
    status, _, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert status == 2
    one_line_error(err, "no kubeflow.org/v1 PyTorchJob API", "install the Kubeflow training operator")


def test_rejected_credentials_are_one_line(api_server, kubeconfig, capsys) -> None:
    server = api_server(healthy())
    status, _, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url, token="expired")], capsys)
    assert status == 2
    one_line_error(err, "rejected the credentials (401 Unauthorized)", "aws eks update-kubeconfig")


def test_the_namespace_comes_from_the_context_or_the_flag(api_server, kubeconfig, capsys) -> None:
    server = api_server({})
    config = kubeconfig(server.url, namespace="team-a")
    run(["status", JOB, "--kubeconfig", config], capsys)
    run(["status", JOB, "--kubeconfig", config, "-n", "team-b"], capsys)
    assert [r.path for r in server.requests] == [  # each kind is asked for the name, in that namespace
        f"/apis/kubeflow.org/v1/namespaces/team-a/pytorchjobs/{JOB}",
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/{JOB}",
        f"/apis/kubeflow.org/v1/namespaces/team-b/pytorchjobs/{JOB}",
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-b/trainjobs/{JOB}",
    ]


def test_an_unknown_context_is_one_line(api_server, kubeconfig, capsys) -> None:
    server = api_server({})
    status, _, err = run(["status", JOB, "--kubeconfig", kubeconfig(server.url), "--context", "prod"], capsys)
    assert status == 2
    one_line_error(err, "--context: no context 'prod'", "kubectl config get-contexts")


@pytest.fixture
def bare_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No KUBECONFIG, an empty HOME (no ~/.kube/config) and not in a pod."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_an_unreachable_api_server_is_one_line(kubeconfig, bare_home: Path, capsys) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status, _, err = run(["status", JOB, "--kubeconfig", kubeconfig(f"http://127.0.0.1:{port}")], capsys)
    assert status == 2, err
    one_line_error(err, f"API server http://127.0.0.1:{port}: unreachable (connection refused)", "kubectl cluster-info")


def test_a_missing_kubeconfig_is_one_line(bare_home: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(bare_home / "nope"))
    status, _, err = run(["logs", JOB], capsys)
    assert status == 2, err
    one_line_error(err, f"kubeconfig: no kubeconfig at {bare_home / 'nope'}", "aws eks update-kubeconfig")
    monkeypatch.delenv("KUBECONFIG")
    status, _, err = run(["stop", JOB], capsys)  # no KUBECONFIG, no ~/.kube/config, not in a pod
    one_line_error(err, "no kubeconfig at ~/.kube/config", "set KUBECONFIG or pass --kubeconfig")


# --- pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host, expected",
    [
        ("etcd", ("etcd", "jobs")),
        ("fsdp-observe-etcd.fsdp-observe", ("fsdp-observe-etcd", "fsdp-observe")),
        ("fsdp-observe-etcd.fsdp-observe.svc", ("fsdp-observe-etcd", "fsdp-observe")),
        ("fsdp-observe-etcd.fsdp-observe.svc.cluster.local", ("fsdp-observe-etcd", "fsdp-observe")),
        ("etcd.example.com", None),
        ("10.0.3.41", None),
        ("", None),
    ],
)
def test_service_of_host(host, expected) -> None:
    assert service_of_host(host, "jobs") == expected


def _pod(name: str, ip: str) -> PodState:
    return PodState(name, 0, "Running", "1/1", 0, "node", ip, True)


def test_the_leader_is_matched_by_host_name_fqdn_or_ip() -> None:
    pods = [_pod("j-worker-0", "10.0.0.1"), _pod("j-worker-1", "10.0.0.2")]
    assert match_leader("j-worker-1", pods) == "j-worker-1"
    assert match_leader("j-worker-1.j-worker-1.default.svc.cluster.local", pods) == "j-worker-1"
    assert match_leader("10.0.0.1", pods) == "j-worker-0"
    assert match_leader("other-host", pods) is None
    assert match_leader(None, pods) is None


def test_a_terminating_pod_says_so() -> None:
    from kubernetes import client

    data = json.loads((RECORDED / "pods-llama2-7b-fsdp.json").read_text())["items"][0]
    data = copy.deepcopy(data)
    data["metadata"]["deletionTimestamp"] = "2025-06-11T19:20:00Z"
    assert pod_state(client.V1Pod.from_dict(data)).state == "Terminating"


def test_a_server_certificate_that_does_not_verify_is_one_line(tmp_path: Path, kubeconfig, capsys) -> None:
    """A real TLS listener with a self-signed certificate the kubeconfig does not trust."""
    import ssl
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    httpd = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{httpd.server_address[1]}"
        status, _, err = run(["status", JOB, "--kubeconfig", kubeconfig(url)], capsys)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert status == 2
    one_line_error(
        err, f"API server {url}: TLS verification failed (certificate verify failed", "certificate-authority-data"
    )
