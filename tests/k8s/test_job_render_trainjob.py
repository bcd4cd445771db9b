"""``fsdp-observe job render`` with ``JOB_KIND=TrainJob``: a TrainJob Kubeflow Trainer v2.3 accepts,
whose pods Prometheus and ``top --kube`` find, on the stock ``torch-distributed`` runtime.

Every rendered TrainJob validates against Trainer's CRD schema (``tests/schemas/``) with unknown
fields refused, for our trainer and the user's own command, with and without the checkpoint and
weights volumes. No Trainer controller runs here: the pod it would make (runtime template, our
patch, ``spec.trainer``, the torch plugin's variables) is assembled by ``tests/support/trainer_v2.py``
and checked as a strict v1 Pod.
"""

from __future__ import annotations

import itertools

import kubernetes_validate
import pytest
import yaml

from observe.cli import main as cli_main
from observe.errors import UserError
from observe.k8s import names
from observe.k8s.access import trainer_network_policy
from observe.k8s.job_settings import load_settings, settings_from_mapping
from observe.k8s.kinds import kind_of
from observe.k8s.kinds.trainjob import render
from tests.support.kube_checks import K8S_VERSION, REPO, unknown_fields, validate_against
from tests.support.trainer_v2 import effective_pod, stock_runtime
from trainer.runspec.config import TrainConfig

EXAMPLE = REPO / "examples" / "llama2-7b-trainjob.env"
IMAGE = "registry.example/fsdp-observe:0.1.0"
#: Variables the torch plugin sets itself and refuses in spec.trainer.env (constants.TorchRunReservedEnvNames).
RESERVED = {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}


def job_for(**overrides: object) -> dict:
    return render(settings_from_mapping({"IMAGE_URI": IMAGE, "JOB_KIND": "TrainJob", **overrides}), run_id="tj-run-1")


def pod_patch(job: dict) -> dict:
    (patch,) = job["spec"]["runtimePatches"]
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]["template"]


def assert_valid(job: dict, schema: dict) -> None:
    """The CRD schema, no field it does not declare, and each node's pod as a strict v1 Pod."""
    validate_against(job, schema)
    assert unknown_fields(job, schema) == []
    for rank in range(job["spec"]["trainer"]["numNodes"]):
        kubernetes_validate.validate(effective_pod(job, rank), K8S_VERSION, strict=True)


def test_the_example_renders_a_valid_trainjob(trainjob_schema) -> None:
    s = load_settings(EXAMPLE)
    job = render(s, run_id="tj-run-1")
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    assert_valid(job, trainjob_schema)
    spec = job["spec"]
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    trainer = spec["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (2, 8, s.image)
    devices = {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert trainer["resourcesPerNode"] == {"requests": devices, "limits": devices}
    assert RESERVED.isdisjoint(e["name"] for e in trainer["env"])
    # one patch, owned by us, reaching the pod of the runtime's trainer
    assert [p["manager"] for p in spec["runtimePatches"]] == ["fsdp-observe"]
    patch = pod_patch(job)
    assert patch["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert patch["spec"]["serviceAccountName"] == names.TRAINER_SERVICE_ACCOUNT
    assert patch["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    (node,) = patch["spec"]["containers"]
    assert node["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def test_the_patch_targets_what_the_stock_runtime_has(clustertrainingruntime_schema) -> None:
    runtime = stock_runtime()
    validate_against(runtime, clustertrainingruntime_schema)
    assert unknown_fields(runtime, clustertrainingruntime_schema) == []
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    containers = [c["name"] for c in rjob["template"]["spec"]["template"]["spec"]["containers"]]
    patch = job_for()["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert patch["name"] == rjob["name"] == "node"
    assert [c["name"] for c in patch["template"]["spec"]["template"]["spec"]["containers"]] == containers == ["node"]
    assert kind_of(load_settings(EXAMPLE)).container == "node"  # job logs reads this container


CHECKPOINTS = {
    "none": {},
    "pvc": {"CHECKPOINT_PVC": "ckpt"},
    "class": {"CHECKPOINT_STORAGE_CLASS": "efs-sc", "CHECKPOINT_SIZE": "500Gi"},
}
WEIGHTS = {
    "preset": {},
    "hub on the pod": {"MODEL": "meta-llama/Llama-2-7b-hf", "MODEL_VOLUME_SIZE": "50Gi"},
    "hub on a claim": {"MODEL": "meta-llama/Llama-2-7b-hf", "MODEL_PVC": "weights"},
    "claim": {"MODEL": "/models/llama-2-7b", "MODEL_PVC": "weights"},
    "host path": {"MODEL": "/models/llama-2-7b", "MODEL_HOST_PATH": "/mnt/fsx/llama-2-7b"},
}


CASES = list(itertools.product(WEIGHTS, CHECKPOINTS, (0, 8)))


@pytest.mark.parametrize("weights, checkpoints, gpus", CASES, ids=[f"{w}-{c}-{g}gpus" for w, c, g in CASES])
def test_our_trainer_with_every_volume_is_a_valid_trainjob(trainjob_schema, weights, checkpoints, gpus) -> None:
    job = job_for(**WEIGHTS[weights], **CHECKPOINTS[checkpoints], GPU_PER_NODE=gpus, HF_TOKEN_SECRET="hf-token")
    assert_valid(job, trainjob_schema)
    patch = pod_patch(job)["spec"]
    mounts = {m["name"]: m for m in patch["containers"][0]["volumeMounts"]}
    volumes = {v["name"] for v in patch["volumes"]}
    assert set(mounts) == volumes  # every volume mounted, nothing mounted that is not there
    assert ("model" in volumes) == (weights != "preset")
    assert ("checkpoints" in volumes) == (checkpoints != "none")
    command = job["spec"]["trainer"]["command"]
    argv = command[command.index("fsdp-observe-trainer") + 1 :]
    cfg = TrainConfig.from_argv(argv)  # the trainer's own parser takes every flag
    cfg.check_settings(2 * job["spec"]["trainer"]["numProcPerNode"], job["spec"]["trainer"]["numProcPerNode"])
    assert (cfg.checkpoint.dir is not None) == (checkpoints != "none")
    if "hub" in weights:
        assert command[0] == "fsdp-observe-fetch-model" and "model" in mounts and "readOnly" not in mounts["model"]
    elif weights != "preset":
        assert mounts["model"]["readOnly"] is True
    if checkpoints != "none" or weights == "hub on a claim":  # the image's user writes to a claim by group
        assert patch["securityContext"]["fsGroup"] == 1000


@pytest.mark.parametrize("checkpoints", sorted(CHECKPOINTS))
def test_the_users_own_command_is_a_valid_instrumented_trainjob(trainjob_schema, checkpoints) -> None:
    job = job_for(COMMAND="/app/finetune.py --lr 1e-4", GPU_PER_NODE=8, **CHECKPOINTS[checkpoints])
    assert_valid(job, trainjob_schema)
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["fsdp-observe-torchrun", "/app/finetune.py", "--lr", "1e-4"]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["FSDP_OBSERVE_INSTRUMENT"] == "1" and env["FSDP_OBSERVE_PORT_BASE"] == "9500"
    assert env["FSDP_OBSERVE_RUN_ID"] == "tj-run-1" == pod_patch(job)["metadata"]["labels"][names.RUN_ID_LABEL]
    assert ("checkpoints" in {v["name"] for v in pod_patch(job)["spec"]["volumes"]}) == (checkpoints != "none")


def test_the_command_leaves_the_rendezvous_to_trainer() -> None:
    """No ``--nproc-per-node``, ``--nnodes`` or rendezvous flag: torchrun reads the ``PET_*`` variables
    the torch plugin sets from ``numNodes`` and ``numProcPerNode``."""
    command = job_for(GPU_PER_NODE=4)["spec"]["trainer"]["command"]
    assert command[:3] == ["fsdp-observe-torchrun", "--no-python", "fsdp-observe-trainer"]
    launcher = command[: command.index("fsdp-observe-trainer")]
    assert not [a for a in launcher if a.startswith(("--nproc", "--nnodes", "--rdzv", "--master", "--node"))]


def test_pods_are_found_by_the_podmonitors_and_top(trainjob_schema) -> None:
    """The trainer labels select the pod; its annotations give each rank's port (no container
    port can be patched in); the TrainJob PodMonitor reads those annotations."""
    job = job_for(GPU_PER_NODE=4, METRICS_PORT=9600)
    pod = effective_pod(job, 1)
    monitor = yaml.safe_load((REPO / "daemonsets" / "trainer-podmonitor-trainjob.yaml").read_text())
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    annotations = {
        k: v for k, v in pod["metadata"]["annotations"].items() if k.startswith(names.METRICS_PORT_ANNOTATION)
    }
    assert annotations == {names.trainer_port_annotation(r): str(9600 + r) for r in range(4)}
    assert len(monitor["spec"]["podMetricsEndpoints"]) == names.MAX_RANKS_PER_NODE


def test_the_network_policy_opens_the_ranks_ports_by_number() -> None:
    s = settings_from_mapping({"IMAGE_URI": IMAGE, "JOB_KIND": "TrainJob", "GPU_PER_NODE": 2, "METRICS_PORT": 9600})
    policy = trainer_network_policy(s)
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    assert policy["spec"]["ingress"][1]["ports"] == [
        {"port": 9600, "protocol": "TCP"},
        {"port": 9601, "protocol": "TCP"},
    ]
    pod = effective_pod(render(s, "r"), 0)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_render_prints_the_service_account_the_job_and_its_policy(capsys, trainjob_schema) -> None:
    assert cli_main(["job", "render", "--config", str(EXAMPLE), "--run-id", "tj-1"]) == 0
    out, err = capsys.readouterr()
    account, job, policy = yaml.safe_load_all(out)
    kubernetes_validate.validate(account, K8S_VERSION, strict=True)
    assert account["automountServiceAccountToken"] is False  # the ranks get no API token
    assert account["metadata"]["name"] == pod_patch(job)["spec"]["serviceAccountName"]
    assert_valid(job, trainjob_schema)
    assert policy["kind"] == "NetworkPolicy"
    assert "warning: a TrainJob has no restartPolicy ExitCode" in err


def test_the_token_comes_from_a_secret_and_never_appears(monkeypatch, capsys) -> None:
    token = "hf_NEVERinTHEtrainjob0123456789"
    monkeypatch.setenv("HF_TOKEN", token)
    assert cli_main(["job", "render", "--config", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert token not in out
    (job,) = [d for d in yaml.safe_load_all(out) if d["kind"] == "TrainJob"]
    (hf,) = [e for e in job["spec"]["trainer"]["env"] if e["name"] == "HF_TOKEN"]
    assert hf == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}


@pytest.mark.parametrize(
    "overrides, key, needles",
    [
        ({"MIN_NODES": 1, "MAX_NODES": 4}, "MIN_NODES", ("1..4 is an elastic range", "JOB_KIND=PyTorchJob")),
        ({"MAX_NODES": 4}, "MAX_NODES", ("2..4 is an elastic range", "JOB_KIND=PyTorchJob")),
        ({"RDZV_BACKEND": "etcd-v2"}, "RDZV_BACKEND", ("static rendezvous", "JOB_KIND=PyTorchJob")),
        ({"RDZV_HOST": "etcd.example"}, "RDZV_HOST", ("PET_MASTER_ADDR", "remove RDZV_HOST")),
        ({"MAX_RESTARTS": 5}, "MAX_RESTARTS", ("retried by the runtime", "JOB_KIND=PyTorchJob")),
        (
            {"RUNTIME_KIND": "MyRuntime"},
            "RUNTIME_KIND",
            ("unknown runtime kind", "ClusterTrainingRuntime, TrainingRuntime"),
        ),
        ({"RUNTIME": "Torch_Distributed"}, "RUNTIME", ("is not a runtime name", "torch-distributed")),
        ({"JOB_NAME": "a" * 56}, "JOB_NAME", ("-node-0-N' must fit in 63", "use 54 characters or fewer")),
    ],
)
def test_what_a_trainjob_cannot_do_is_one_line_naming_the_fix(overrides, key, needles) -> None:
    s = settings_from_mapping({"IMAGE_URI": IMAGE, "JOB_KIND": "TrainJob", **overrides})
    with pytest.raises(UserError) as info:
        render(s, "r")
    assert info.value.field == key
    for needle in needles:
        assert needle in str(info.value)


def test_trainjob_settings_on_a_pytorchjob_and_an_unknown_kind_are_one_line(capsys) -> None:
    for sets, needle in (
        (["JOB_KIND=PyTorchJob", "RUNTIME=my-runtime"], "error: RUNTIME: names a Kubeflow Trainer runtime"),
        (["JOB_KIND=JobSet"], "error: JOB_KIND: unknown job kind 'JobSet'; choose one of PyTorchJob, TrainJob"),
    ):
        assert cli_main(["job", "render", "--config", str(EXAMPLE), *(a for s in sets for a in ("--set", s))]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith(needle), err


def test_the_kind_name_is_case_blind() -> None:
    s = settings_from_mapping({"IMAGE_URI": IMAGE, "JOB_KIND": "trainjob"})
    assert kind_of(s).kind == "TrainJob"
