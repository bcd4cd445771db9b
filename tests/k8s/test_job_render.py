"""``fsdp-observe job render``: a PyTorchJob the training operator accepts and Prometheus scrapes."""

from __future__ import annotations

import itertools
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from observe.catalog import TRAINER_PORT_BASE
from observe.cli import job as job_cmd
from observe.cli import main as cli_main
from observe.k8s import names
from observe.k8s.job_settings import RDZV_BACKENDS, load_settings, settings_from_mapping
from observe.k8s.kinds import pytorchjob
from observe.k8s.kinds.pytorchjob import render, trainer_command
from tests.support.kube_checks import K8S_VERSION, REPO, unknown_fields, validate_against
from trainer.runspec.config import SHARDING_STRATEGIES, TrainConfig

ENV_EXAMPLE = REPO / "examples" / "llama2-7b.env"
IMAGE = "registry.example/fsdp-observe:0.1.0"


def job_for(**overrides: object) -> dict:
    return render(settings_from_mapping({"IMAGE_URI": IMAGE, **overrides}), run_id="test-run-1")


def pod_of(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]


def assert_valid(job: dict, schema: dict) -> None:
    """The CRD schema, no field it does not declare, and the pod template as a strict v1 Pod."""
    validate_against(job, schema)
    assert unknown_fields(job, schema) == []
    kubernetes_validate.validate(as_pod(job), K8S_VERSION, strict=True)


def as_pod(job: dict) -> dict:
    """The worker template as a v1 Pod, for kubernetes-validate (which has no PyTorchJob schema)."""
    template = pod_of(job)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", **template["metadata"]},
        "spec": template["spec"],
    }


def test_the_example_renders_a_valid_pytorchjob(pytorchjob_schema) -> None:
    job = render(load_settings(ENV_EXAMPLE))
    assert (job["apiVersion"], job["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert_valid(job, pytorchjob_schema)
    spec = job["spec"]
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert set(spec["pytorchReplicaSpecs"]) == {"Worker"}  # elastic: every pod is a peer
    container = pod_of(job)["spec"]["containers"][0]
    assert container["name"] == pytorchjob.TRAINER_CONTAINER
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 8, "vpc.amazonaws.com/efa": 32}
    assert pod_of(job)["spec"]["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod_of(job)["spec"]["tolerations"]


@pytest.mark.parametrize("backend, gpus, strategy", list(itertools.product(RDZV_BACKENDS, (0, 8), SHARDING_STRATEGIES)))
def test_every_backend_device_and_strategy_is_valid(pytorchjob_schema, backend: str, gpus: int, strategy: str) -> None:
    job = job_for(
        RDZV_BACKEND=backend,
        GPU_PER_NODE=gpus,
        SHARDING_STRATEGY=strategy,
        SHM_SIZE="32Gi",
        HF_TOKEN_SECRET="hf-token",
        DATA="/data/a.jsonl /data/b.txt",
        MIN_NODES=1,
        MAX_NODES=4,
    )
    assert_valid(job, pytorchjob_schema)
    elastic = job["spec"]["elasticPolicy"]
    assert (elastic["rdzvBackend"], elastic["minReplicas"], elastic["maxReplicas"]) == (backend, 1, 4)
    if backend == "c10d":  # the operator points c10d at <job>-worker-0:<pytorchjob-port>
        assert "rdzvHost" not in elastic and "rdzvPort" not in elastic
    else:
        assert (elastic["rdzvHost"], elastic["rdzvPort"]) == (names.ETCD_HOST, names.ETCD_CLIENT_PORT)


def test_the_command_is_one_the_trainer_accepts() -> None:
    """What follows the rank's console script parses and validates with the trainer's own configuration."""
    s = load_settings(ENV_EXAMPLE)
    command = trainer_command(s, "llama2-7b-fsdp-0a1b2c3d")
    assert command[:4] == ["fsdp-observe-torchrun", "--nproc-per-node=8", "--no-python", "fsdp-observe-trainer"]
    cfg = TrainConfig.from_argv(command[4:])
    cfg.validate()
    assert (cfg.model.preset, cfg.parallel.sharding_strategy, cfg.metrics.run_id, cfg.metrics.port_base, cfg.steps) == (
        "llama2-7b",
        "FULL_SHARD",
        "llama2-7b-fsdp-0a1b2c3d",
        TRAINER_PORT_BASE,
        5000,
    )
    assert cfg.parallel.device == "auto"
    cpu = trainer_command(
        settings_from_mapping({"IMAGE_URI": IMAGE, "GPU_PER_NODE": 0, "NPROC_PER_NODE": 2, "MODEL": "/models/llama"}),
        "r",
    )
    assert cpu[1] == "--nproc-per-node=2" and cpu[cpu.index("--device") + 1] == "cpu"
    assert cpu[cpu.index("--model") + 1] == "/models/llama"


def test_each_rank_has_a_named_metrics_port_the_podmonitor_scrapes() -> None:
    job = job_for(GPU_PER_NODE=4, METRICS_PORT=9600)
    template = pod_of(job)
    ports = {p["name"]: p["containerPort"] for p in template["spec"]["containers"][0]["ports"]}
    assert ports == {
        pytorchjob.OPERATOR_PORT_NAME: pytorchjob.OPERATOR_PORT,
        "metrics-0": 9600,
        "metrics-1": 9601,
        "metrics-2": 9602,
        "metrics-3": 9603,
    }
    monitor = yaml.safe_load((REPO / "daemonsets" / "trainer-podmonitor.yaml").read_text())
    scraped = {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]}
    assert set(ports) - {pytorchjob.OPERATOR_PORT_NAME} <= scraped
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert job["metadata"]["labels"]["app.kubernetes.io/instance"] == "fsdp"


def test_every_render_gets_a_new_rendezvous_id() -> None:
    s = load_settings(ENV_EXAMPLE)
    first, second = render(s), render(s)
    ids = [job["spec"]["elasticPolicy"]["rdzvId"] for job in (first, second)]
    assert ids[0] != ids[1]
    for job, run_id in zip((first, second), ids, strict=False):
        assert run_id.startswith("llama2-7b-fsdp-") and len(run_id) <= 63
        template = pod_of(job)
        assert template["metadata"]["labels"][names.RUN_ID_LABEL] == run_id
        command = template["spec"]["containers"][0]["command"]
        assert command[command.index("--run-id") + 1] == run_id  # the trainer's run_id label


def test_dev_shm_is_memory_backed() -> None:
    spec = pod_of(job_for(SHM_SIZE="64Gi"))["spec"]
    assert spec["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}]
    assert {"name": "shm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]


def test_a_cpu_job_requests_no_devices() -> None:
    spec = pod_of(job_for(GPU_PER_NODE=0))["spec"]
    assert "resources" not in spec["containers"][0] and "tolerations" not in spec
    assert not any(e["name"].startswith("NCCL") for e in spec["containers"][0]["env"])


def test_the_token_comes_from_a_secret_and_never_appears(tmp_path: Path, monkeypatch, capsys) -> None:
    token = "hf_NEVERinTHEmanifest0123456789"
    monkeypatch.setenv("HF_TOKEN", token)  # even when the shell that renders has it
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", token)
    texts = []
    for extra in ([], ["--set", "RDZV_BACKEND=c10d"], ["--set", "HF_TOKEN_SECRET=other", "--set", "GPU_PER_NODE=0"]):
        for config in (ENV_EXAMPLE, REPO / "examples" / "llama2-7b.yaml"):
            assert job_cmd.main(["render", "--config", str(config), *extra]) == 0
            texts.append(capsys.readouterr().out)
    for text in texts:
        assert token not in text
        job, _policy = yaml.safe_load_all(text)
        env = pod_of(job)["spec"]["containers"][0]["env"]
        hf = [e for e in env if e["name"] == "HF_TOKEN"]
        assert len(hf) == 1 and set(hf[0]) == {"name", "valueFrom"}
        assert hf[0]["valueFrom"]["secretKeyRef"]["key"] == "token"
    no_secret = yaml.safe_dump(job_for())
    assert "HF_TOKEN" not in no_secret and token not in no_secret


def test_render_writes_plain_yaml_to_a_file(tmp_path: Path, pytorchjob_schema) -> None:
    out = tmp_path / "job.yaml"
    assert job_cmd.main(["render", "--config", str(ENV_EXAMPLE), "--run-id", "fixed-1", "-o", str(out)]) == 0
    text = out.read_text()
    assert "&id" not in text and "*id" not in text  # no YAML anchors for kubectl users to puzzle over
    job, policy = yaml.safe_load_all(text)
    assert job["spec"]["elasticPolicy"]["rdzvId"] == "fixed-1"
    assert_valid(job, pytorchjob_schema)
    assert policy["kind"] == "NetworkPolicy"
    out_only = tmp_path / "job-only.yaml"
    assert (
        job_cmd.main(
            ["render", "--config", str(ENV_EXAMPLE), "--run-id", "fixed-1", "--no-network-policy", "-o", str(out_only)]
        )
        == 0
    )
    assert yaml.safe_load(out_only.read_text()) == job


def test_a_name_too_long_for_the_worker_pods_is_one_line(capsys) -> None:
    """``<JOB_NAME>-worker-<i>`` names pods and Services: the PyTorchJob kind's own rule."""
    status = cli_main(["job", "render", "--config", str(ENV_EXAMPLE), "--set", "JOB_NAME=" + "a" * 60])
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("error: JOB_NAME: 'aaaa") and "pod names 'aaaa" in err and "-worker-N' must fit in 63" in err
    assert "use 54 characters or fewer" in err  # 63 - len("-worker-") - 1 digit (2 nodes)


def test_node_name_comes_from_the_downward_api() -> None:
    env = pod_of(job_for())["spec"]["containers"][0]["env"]
    assert {"name": names.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env
    assert {"name": "LOGLEVEL", "value": "INFO"} in env  # torchrun logs master_addr= at INFO


@pytest.mark.parametrize("backend", RDZV_BACKENDS)
def test_restarted_groups_never_share_the_dead_attempts_store(backend: str) -> None:
    """torch 2.13's c10d rendezvous reuses one TCPStore across restarts unless told not to."""
    env = pod_of(job_for(RDZV_BACKEND=backend))["spec"]["containers"][0]["env"]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in env


def test_the_checks_catch_a_misspelt_or_mistyped_field(pytorchjob_schema) -> None:
    """The CRD schema alone accepts unknown fields; the walker and the Pod check do not."""
    job = job_for()
    job["spec"]["elasticPolicy"]["maxRestart"] = 3
    assert unknown_fields(job, pytorchjob_schema) == [".spec.elasticPolicy.maxRestart"]
    job = job_for()
    container = pod_of(job)["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    assert unknown_fields(job, pytorchjob_schema) == [
        ".spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].volumeMount"
    ]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(as_pod(job), K8S_VERSION, strict=True)
    job = job_for()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "2"
    with pytest.raises(Exception, match="is not of type 'integer'"):
        validate_against(job, pytorchjob_schema)
