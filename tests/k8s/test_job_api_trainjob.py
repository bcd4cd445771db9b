"""``fsdp-observe job status|logs|stop`` and ``top --kube`` for a TrainJob, against recorded API responses.

As in ``test_job_api.py``: a local HTTP server replays recorded responses (``recorded/README.md``
says where each TrainJob field comes from) and the real ``kubernetes`` client reaches it through
a kubeconfig. The recorded TrainJob validates against Trainer v2.3's CRD (status included) with
unknown fields refused, and its pods as strict v1 Pods, so a field in the wrong place fails here.
"""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest

from observe.k8s import names
from observe.sources.kube import KubeSource, trainer_endpoints
from tests.support.cli import Result, assert_one_line_error, run_cli
from tests.support.fake_apiserver import RECORDED, Reply
from tests.support.kube_checks import K8S_VERSION, unknown_fields, validate_against

JOB = "llama2-7b-trainjob"
JOB_PATH = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/{JOB}"
PYTORCHJOB_PATH = f"/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/{JOB}"
PODS = "/api/v1/namespaces/default/pods"
POD = [f"{JOB}-node-0-0-k4x9q", f"{JOB}-node-0-1-7mtbn"]
NODES = ["ip-10-1-12-34.us-west-2.compute.internal", "ip-10-1-56-78.us-west-2.compute.internal"]


def recorded_job() -> dict:
    return json.loads((RECORDED / "trainjob-llama2-7b-trainjob.json").read_text())


def routes(job: dict | None = None) -> dict:
    """A cluster with both kinds' APIs installed, holding the TrainJob (and no PyTorchJob of its name)."""
    body = json.dumps(job).encode() if job is not None else (RECORDED / "trainjob-llama2-7b-trainjob.json").read_bytes()
    not_found = json.loads((RECORDED / "status-404-pytorchjob.json").read_text())
    not_found["message"] = f'pytorchjobs.kubeflow.org "{JOB}" not found'
    return {
        ("GET", PYTORCHJOB_PATH): Reply(404, json.dumps(not_found).encode()),
        ("GET", JOB_PATH): Reply(200, body),
        ("GET", PODS): Reply.recorded("pods-llama2-7b-trainjob.json"),
        ("GET", f"{PODS}/{POD[0]}/log"): Reply.recorded("log-llama2-7b-trainjob-node-0-0.txt"),
        ("GET", f"{PODS}/{POD[1]}/log"): Reply.recorded("log-llama2-7b-trainjob-node-0-1.txt"),
        ("DELETE", JOB_PATH): Reply.recorded("delete-trainjob-llama2-7b-trainjob.json"),
        ("PATCH", JOB_PATH): Reply.recorded("patch-trainjob-llama2-7b-trainjob-suspend.json"),
    }


def run(argv: list[str], capsys) -> Result:
    return run_cli(["job", *argv], capsys)


@pytest.mark.parametrize(
    "name",
    [
        "trainjob-llama2-7b-trainjob.json",
        "delete-trainjob-llama2-7b-trainjob.json",
        "patch-trainjob-llama2-7b-trainjob-suspend.json",
    ],
)
def test_the_recorded_trainjobs_fit_the_crd(name: str, trainjob_schema) -> None:
    job = json.loads((RECORDED / name).read_text())
    validate_against(job, trainjob_schema)
    assert unknown_fields(job, trainjob_schema) == []


def test_the_recorded_pods_are_valid_pods() -> None:
    for pod in json.loads((RECORDED / "pods-llama2-7b-trainjob.json").read_text())["items"]:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_status_reads_the_jobs_progress_leader_and_pods(api_server, kubeconfig, capsys) -> None:
    server = api_server(routes())
    result = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:5] == [
        f"trainjob default/{JOB}: Running",  # no condition yet; a child Job has active pods
        "runtime: ClusterTrainingRuntime torch-distributed, nodes 2 x 8 ranks",
        "jobs: node: 1 active, 1 ready, 0 succeeded, 0 failed, 0 suspended",
        "progress: 45%, ETA 1:18:31, currentStep 2250, totalSteps 5000, loss 1.98764, tokens_per_second 152734, "
        "mfu 0.412837 (at 2026-09-14T09:10:42Z)",
        f"leader: {POD[0]} (master_addr={JOB}-node-0-0.{JOB} in {POD[0]}'s log)",  # by its host name
    ]
    assert lines[5].split() == ["POD", "STATE", "READY", "RESTARTS", "NODE"]
    assert lines[6].split() == [POD[0], "*", "Running", "1/1", "0", NODES[0]]
    assert lines[7].split() == [POD[1], "Running", "1/1", "0", NODES[1]]
    pods_call = [r for r in server.calls("GET") if r.path == PODS][0]
    assert pods_call.query["labelSelector"] == [f"jobset.sigs.k8s.io/jobset-name={JOB}"]
    logs = [r for r in server.requests if r.path.endswith("/log")]
    assert [(r.path, r.query["container"]) for r in logs] == [(f"{PODS}/{POD[0]}/log", ["node"])]


@pytest.mark.parametrize(
    "conditions, jobs, first_line",
    [
        (
            [
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "JobsCompleted",
                    "lastTransitionTime": "2026-09-14T12:01:10Z",
                }
            ],
            {"active": 0, "succeeded": 1, "ready": 0},
            f"trainjob default/{JOB}: Complete (JobsCompleted) since 2026-09-14T12:01:10Z",
        ),
        (
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "lastTransitionTime": "2026-09-14T10:02:11Z",
                }
            ],
            {"active": 0, "failed": 1, "ready": 0},
            f"trainjob default/{JOB}: Failed (DeadlineExceeded) since 2026-09-14T10:02:11Z",
        ),
        (
            [
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": "Suspended",
                    "lastTransitionTime": "2026-09-14T09:11:04Z",
                }
            ],
            {"active": 0, "suspended": 1, "ready": 0},
            f"trainjob default/{JOB}: Suspended (Suspended) since 2026-09-14T09:11:04Z",
        ),
        (  # resumed: the Suspended condition turns False and the job runs again
            [
                {
                    "type": "Suspended",
                    "status": "False",
                    "reason": "Resumed",
                    "lastTransitionTime": "2026-09-14T09:30:00Z",
                }
            ],
            {},
            f"trainjob default/{JOB}: Running",
        ),
        ([], {"active": 0, "ready": 0}, f"trainjob default/{JOB}: Pending"),
    ],
)
def test_status_reads_the_conditions(
    conditions, jobs, first_line, api_server, kubeconfig, capsys, trainjob_schema
) -> None:
    job = recorded_job()
    for c in conditions:
        c.setdefault("message", "")
    job["status"]["conditions"] = conditions
    job["status"]["jobsStatus"][0].update(jobs)
    validate_against(job, trainjob_schema)
    server = api_server(routes(job))
    result = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    assert result.stdout.splitlines()[0] == first_line


def test_status_without_progress_says_why(api_server, kubeconfig, capsys) -> None:
    job = recorded_job()
    del job["status"]["trainerStatus"]
    server = api_server(routes(job))
    result = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert "progress: none pushed (Kubeflow Trainer's TrainJobStatus feature gate is off" in result.stdout


def test_logs_print_the_leaders_log_and_all_of_them(api_server, kubeconfig, capsys) -> None:
    server = api_server(routes())
    result = run(["logs", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    assert result.stdout == (RECORDED / "log-llama2-7b-trainjob-node-0-0.txt").read_text()
    result = run(["logs", JOB, "--all", "--kind", "TrainJob", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    expected = []
    for i in (0, 1):
        text = (RECORDED / f"log-llama2-7b-trainjob-node-0-{i}.txt").read_text()
        expected += [f"[{POD[i]}] {line}" for line in text.splitlines()]
    assert result.stdout.splitlines() == expected
    assert all(r.query["container"] == ["node"] for r in server.requests if r.path.endswith("/log"))


def test_stop_deletes_the_trainjob_and_leaves_etcd_alone(api_server, kubeconfig, capsys) -> None:
    server = api_server(routes())
    result = run(["stop", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    assert result.stdout.splitlines() == [f"deleted trainjob default/{JOB} (its pods are deleted with it)"]
    (delete,) = server.calls("DELETE")
    assert delete.path == JOB_PATH and delete.query["propagationPolicy"] == ["Foreground"]
    assert not [r for r in server.requests if "/namespaces/fsdp-observe/" in r.path]  # no etcd to restart


def test_stop_suspend_patches_spec_suspend(api_server, kubeconfig, capsys) -> None:
    server = api_server(routes())
    result = run(["stop", JOB, "--suspend", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    assert result.stdout.startswith(f"suspended trainjob default/{JOB} (its pods are deleted; the job stays")
    (patch,) = server.calls("PATCH")
    assert patch.path == JOB_PATH and json.loads(patch.body) == {"spec": {"suspend": True}}
    assert patch.content_type == "application/merge-patch+json"
    assert not server.calls("DELETE")


def test_kind_names_the_one_api_to_ask(api_server, kubeconfig, capsys) -> None:
    server = api_server(routes())
    result = run(["status", JOB, "--kind", "trainjob", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert result.status == 0, result.stderr
    assert PYTORCHJOB_PATH not in [r.path for r in server.requests]
    result = run(["status", JOB, "--kind", "JobSet", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert_one_line_error(result, "--kind: unknown job kind 'JobSet'", "choose one of PyTorchJob, TrainJob")


def test_a_name_no_kind_has_is_one_line_naming_both(api_server, kubeconfig, capsys) -> None:
    server = api_server(
        {
            ("GET", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/no-such-job"): Reply.recorded(
                "status-404-pytorchjob.json", 404
            ),
            ("GET", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/no-such-job"): Reply.recorded(
                "status-404-trainjob.json", 404
            ),
        }
    )
    for action in ("status", "logs", "stop"):
        result = run([action, "no-such-job", "--kubeconfig", kubeconfig(server.url)], capsys)
        assert_one_line_error(
            result,
            "pytorchjob/trainjob no-such-job: not found in namespace default",
            "kubectl get pytorchjobs,trainjobs -A",
        )
    assert not server.calls("DELETE")


def test_a_cluster_with_neither_api_says_what_to_install(api_server, kubeconfig, capsys) -> None:
    server = api_server({})
    result = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert_one_line_error(
        result,
        f"job {JOB}: the cluster has no kubeflow.org/v1 PyTorchJob API and no trainer.kubeflow.org/v1alpha1 TrainJob API",
        "install the Kubeflow training operator, or install Kubeflow Trainer v2",
    )
    result = run(["status", JOB, "--kind", "TrainJob", "--kubeconfig", kubeconfig(server.url)], capsys)
    assert_one_line_error(
        result, "the cluster has no trainer.kubeflow.org/v1alpha1 TrainJob API", "install Kubeflow Trainer v2"
    )


def test_forbidden_trainjobs_are_one_line_naming_the_role(api_server, kubeconfig, capsys) -> None:
    forbidden = json.loads((RECORDED / "status-403-pytorchjob.json").read_text())
    forbidden["message"] = (
        forbidden["message"].replace("pytorchjobs", "trainjobs").replace('"kubeflow.org"', '"trainer.kubeflow.org"')
    )
    server = api_server({("GET", JOB_PATH): Reply(403, json.dumps(forbidden).encode())})
    result = run(["status", JOB, "--kubeconfig", kubeconfig(server.url)], capsys)
    assert_one_line_error(
        result, f"trainjob {JOB}: forbidden in namespace default", "fsdp-observe job access -n default"
    )


def test_top_kube_finds_a_trainjobs_ranks_by_their_annotations(api_server, kubeconfig) -> None:
    pods = json.loads((RECORDED / "pods-llama2-7b-trainjob.json").read_text())["items"]
    assert [c.get("ports") for p in pods for c in p["spec"]["containers"]] == [
        [{"containerPort": 29500, "protocol": "TCP"}]
    ] * 2
    server = api_server(
        {
            ("GET", f"/api/v1/namespaces/{names.NAMESPACE}/pods"): Reply.recorded("pods-fsdp-observe-agent.json"),
            ("GET", PODS): Reply.recorded("pods-llama2-7b-trainjob.json"),
        }
    )
    source = KubeSource(kubeconfig=kubeconfig(server.url))
    _, trainers, errors = source.discover()
    source.close()
    assert errors == []
    assert [(e.url, e.node) for e in trainers] == [
        *((f"http://10.0.12.90:{9500 + r}/metrics", NODES[0]) for r in range(8)),
        *((f"http://10.0.56.41:{9500 + r}/metrics", NODES[1]) for r in range(8)),
    ]
    # a pod both declaring and annotating a port is pulled once
    both = copy.deepcopy(pods[0])
    both["spec"]["containers"][0]["ports"].append({"name": "metrics-0", "containerPort": 9500, "protocol": "TCP"})
    assert len(trainer_endpoints([both])) == 8
