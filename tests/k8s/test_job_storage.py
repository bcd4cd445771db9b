"""``job render``: real weights (a hub download before training, or a volume), a shared checkpoint
volume every restart resumes from, ``restartPolicy: ExitCode`` and the linger.

Every rendered job is checked as in ``test_job_render.py``: the training operator's CRD, no unknown
field, the pod template as a strict v1 Pod, the Pod Security levels; the command parses with the
trainer's and the download's own parsers. The download itself runs against a stand-in hub in
``tests/e2e/test_job_weights.py``.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from observe.cli import job as job_cmd
from observe.errors import UserError
from observe.k8s import names, storage
from observe.k8s.job_settings import settings_from_mapping
from observe.k8s.kinds.pytorchjob import render, trainer_command
from observe.k8s.pod import LAUNCHER
from tests.k8s.test_job_render import ENV_EXAMPLE, IMAGE, as_pod, assert_valid, pod_of
from tests.support.kube_checks import K8S_VERSION, REPO
from tests.support.pod_security import violations
from trainer.fetch import build_parser as fetch_parser
from trainer.fetch import split_command
from trainer.runspec.config import TrainConfig

HUB = {"MODEL": "meta-llama/Llama-2-7b-hf", "HF_TOKEN_SECRET": "hf-token"}
CKPT = {"CHECKPOINT_PVC": "shared-ckpt"}


def job_for(**overrides: object) -> dict:
    return render(settings_from_mapping({"IMAGE_URI": IMAGE, **overrides}), run_id="test-run-1")


def container(job: dict) -> dict:
    (c,) = pod_of(job)["spec"]["containers"]
    return c


def trainer_cfg(command: list[str]) -> TrainConfig:
    """The trainer settings of a rendered command (after the download and the launcher)."""
    _, rest = split_command(command) if command[0] == storage.FETCH_COMMAND else ([], command)
    assert rest[0] == LAUNCHER and rest[2:4] == ["--no-python", "fsdp-observe-trainer"]
    return TrainConfig.from_argv(rest[4:])


def test_a_hub_model_is_downloaded_by_each_pod_before_torchrun(pytorchjob_schema) -> None:
    """Before: MODEL=meta-llama/Llama-2-7b-hf rendered, but every rank refused it: 'not a local directory'."""
    job = job_for(**HUB)
    assert_valid(job, pytorchjob_schema)
    c = container(job)
    own, rest = split_command(c["command"])
    fetch = fetch_parser().parse_args(own[1:])
    where = "/models/meta-llama--Llama-2-7b-hf"
    assert own[0] == storage.FETCH_COMMAND and (fetch.repo, fetch.revision, fetch.local_dir) == (
        "meta-llama/Llama-2-7b-hf",
        "main",
        where,
    )
    assert fetch.require_tokenizer  # the folder is the tokenizer too
    cfg = trainer_cfg(c["command"])
    assert (cfg.model.path, cfg.model.tokenizer) == (where, where)
    volumes = {v["name"]: v for v in pod_of(job)["spec"]["volumes"]}
    assert volumes["model"] == {"name": "model", "emptyDir": {}}  # each pod's own copy
    assert {"name": "model", "mountPath": "/models"} in c["volumeMounts"]
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
    assert env["HF_HUB_DISABLE_TELEMETRY"]["value"] == "1"
    assert violations(as_pod(job), "restricted") == []  # the download needs no privilege


def test_a_hub_model_can_go_to_a_shared_volume_at_a_revision(pytorchjob_schema) -> None:
    job = job_for(**HUB, MODEL_PVC="llama-weights", MODEL_REVISION="v2.1", MODEL_MOUNT="/weights")
    assert_valid(job, pytorchjob_schema)
    spec, c = pod_of(job)["spec"], container(job)
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "llama-weights"}} in spec["volumes"]
    assert {"name": "model", "mountPath": "/weights"} in c["volumeMounts"]  # written: the download
    assert spec["securityContext"]["fsGroup"] == 1000  # the image's non-root user writes by group
    fetch = fetch_parser().parse_args(split_command(c["command"])[0][1:])
    assert (fetch.revision, fetch.local_dir) == ("v2.1", "/weights/meta-llama--Llama-2-7b-hf@v2.1")
    assert violations(as_pod(job), "restricted") == []


def test_weights_already_on_a_volume_are_mounted_read_only(pytorchjob_schema) -> None:
    job = job_for(MODEL="/models/llama-2-7b", MODEL_PVC="llama-weights")
    assert_valid(job, pytorchjob_schema)
    spec, c = pod_of(job)["spec"], container(job)
    assert c["command"][0] == LAUNCHER  # no download
    assert {"name": "model", "persistentVolumeClaim": {"claimName": "llama-weights", "readOnly": True}} in spec[
        "volumes"
    ]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in c["volumeMounts"]
    assert "fsGroup" not in spec["securityContext"]  # nothing written: no recursive chown of the weights
    assert trainer_cfg(c["command"]).model.path == "/models/llama-2-7b"


def test_weights_on_a_host_path_are_the_one_baseline_exception(pytorchjob_schema) -> None:
    job = job_for(MODEL="/models/llama-2-7b", MODEL_HOST_PATH="/mnt/fsx/llama-2-7b")
    assert_valid(job, pytorchjob_schema)
    assert {"name": "model", "hostPath": {"path": "/mnt/fsx/llama-2-7b", "type": "Directory"}} in pod_of(job)["spec"][
        "volumes"
    ]
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in container(job)["volumeMounts"]
    assert violations(as_pod(job), "baseline") == ["HostPath Volumes: model"]


def test_checkpoints_go_to_a_shared_volume_and_restarts_resume_from_it(pytorchjob_schema) -> None:
    """Before: no --checkpoint-dir, no volume, so maxRestarts and resizes started at step 0."""
    job = job_for(**CKPT, CHECKPOINT_EVERY=200, JOB_NAME="llama-ft")
    assert_valid(job, pytorchjob_schema)
    spec, c = pod_of(job)["spec"], container(job)
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "shared-ckpt"}} in spec["volumes"]
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in c["volumeMounts"]
    assert spec["securityContext"]["fsGroup"] == 1000 and spec["securityContext"]["runAsNonRoot"] is True
    cfg = trainer_cfg(c["command"])
    assert (cfg.checkpoint.dir, cfg.checkpoint.every, cfg.checkpoint.resume) == ("/checkpoints/llama-ft", 200, "auto")
    assert cfg.checkpoint.any_world_size  # a resize (elastic, or a new NUM_NODES) resumes resharded
    assert not trainer_cfg(container(job_for())["command"]).checkpoint.any_world_size  # nothing to resume
    assert trainer_cfg(container(job_for(**CKPT))["command"]).checkpoint.every == storage.DEFAULT_CHECKPOINT_EVERY
    assert violations(as_pod(job), "restricted") == []


def test_a_new_checkpoint_claim_is_rendered_before_the_job(tmp_path: Path, pytorchjob_schema, capsys) -> None:
    out = tmp_path / "job.yaml"
    assert (
        job_cmd.main(
            [
                "render",
                "--config",
                str(ENV_EXAMPLE),
                "--set",
                "CHECKPOINT_STORAGE_CLASS=efs-sc",
                "--set",
                "CHECKPOINT_SIZE=500Gi",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert "warning" not in capsys.readouterr().err
    claim, job, policy = yaml.safe_load_all(out.read_text())
    assert (claim["kind"], job["kind"], policy["kind"]) == ("PersistentVolumeClaim", "PyTorchJob", "NetworkPolicy")
    kubernetes_validate.validate(claim, K8S_VERSION, strict=True)
    assert claim["metadata"] == {
        "name": "llama2-7b-fsdp-checkpoints",
        "namespace": "default",
        "labels": {
            "app.kubernetes.io/name": "fsdp-observe",
            "app.kubernetes.io/component": "checkpoints",
            "app.kubernetes.io/instance": "llama2-7b-fsdp",
        },
    }
    assert claim["spec"] == {
        "accessModes": ["ReadWriteMany"],
        "storageClassName": "efs-sc",
        "resources": {"requests": {"storage": "500Gi"}},
    }
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "llama2-7b-fsdp-checkpoints"}} in pod_of(job)[
        "spec"
    ]["volumes"]
    assert_valid(job, pytorchjob_schema)


def test_without_a_checkpoint_volume_render_warns(tmp_path: Path, capsys) -> None:
    assert job_cmd.main(["render", "--config", str(ENV_EXAMPLE), "-o", str(tmp_path / "j.yaml")]) == 0
    err = capsys.readouterr().err
    assert "warning: no checkpoint volume" in err and "starts again from step 0" in err


def test_exit_code_restarts_a_stopped_pod_and_not_a_failed_one() -> None:
    """Before: OnFailure restarted a pod that exited 2 (a user mistake) forever; ExitCode restarts 128+
    (143: the launcher's status after the kubelet's SIGTERM, tests/e2e/test_job_weights.py)."""
    for job in (job_for(), job_for(COMMAND="/app/train.py")):
        assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "ExitCode"
        assert container(job)["command"][0] == LAUNCHER == "fsdp-observe-torchrun"


def test_rendered_jobs_linger_for_two_scrape_intervals() -> None:
    """Before: no --metrics-linger, so the last scrape (scaling's cluster mode, the TUI) missed the end."""
    monitor = yaml.safe_load((REPO / "daemonsets" / "trainer-podmonitor.yaml").read_text())
    assert {e["interval"] for e in monitor["spec"]["podMetricsEndpoints"]} == {
        f"{names.TRAINER_SCRAPE_INTERVAL_SECONDS}s"
    }
    assert names.RENDERED_METRICS_LINGER_SECONDS >= 2 * names.TRAINER_SCRAPE_INTERVAL_SECONDS
    assert trainer_cfg(container(job_for())["command"]).metrics.linger_seconds == names.RENDERED_METRICS_LINGER_SECONDS
    own = {e["name"]: e.get("value") for e in container(job_for(COMMAND="/app/train.py"))["env"]}
    assert own["FSDP_OBSERVE_LINGER_SECONDS"] == str(names.RENDERED_METRICS_LINGER_SECONDS)
    assert trainer_cfg(container(job_for(TRAINER_ARGS="--metrics-linger 90"))["command"]).metrics.linger_seconds == 90


def test_a_users_own_program_can_have_the_checkpoint_volume() -> None:
    c = container(job_for(COMMAND="/app/train.py --save-dir /checkpoints/run", CHECKPOINT_PVC="ckpt"))
    assert {"name": "checkpoints", "mountPath": "/checkpoints"} in c["volumeMounts"]
    assert c["command"] == [LAUNCHER, "--nproc-per-node=8", "/app/train.py", "--save-dir", "/checkpoints/run"]


@pytest.mark.parametrize(
    "settings, key, text",
    [
        ({"MODEL": "llama2-7b", "MODEL_PVC": "w"}, "MODEL_PVC", "is a preset (random weights)"),
        ({"MODEL": "meta-llama/Llama-2-7b-hf", "MODEL_HOST_PATH": "/mnt/w"}, "MODEL_HOST_PATH", "mounted read-only"),
        ({"MODEL": "/opt/llama", "MODEL_REVISION": "v2"}, "MODEL_REVISION", "applies to a hub id"),
        ({"MODEL": "/opt/llama", "MODEL_PVC": "w"}, "MODEL", "is not under MODEL_MOUNT /models"),
        ({"MODEL": "/models/x", "MODEL_PVC": "w", "MODEL_HOST_PATH": "/mnt/w"}, "MODEL_HOST_PATH", "with MODEL_PVC"),
        ({"MODEL": "/models/x", "MODEL_PVC": "Not_A_Name"}, "MODEL_PVC", "not a PersistentVolumeClaim name"),
        ({"MODEL": "llama-2-7b"}, "MODEL", "neither a preset"),
        ({"MODEL": "meta-llama/Llama-2-7b-hf", "MODEL_MOUNT": "models"}, "MODEL_MOUNT", "not a folder to mount on"),
        (
            {"MODEL": "meta-llama/Llama-2-7b-hf", "MODEL_PVC": "w", "MODEL_VOLUME_SIZE": "50Gi"},
            "MODEL_VOLUME_SIZE",
            "only a hub MODEL without MODEL_PVC",
        ),
        ({"CHECKPOINT_SIZE": "100Gi"}, "CHECKPOINT_SIZE", "set CHECKPOINT_STORAGE_CLASS too"),
        ({"CHECKPOINT_STORAGE_CLASS": "efs-sc"}, "CHECKPOINT_SIZE", "is needed"),
        (
            {"CHECKPOINT_PVC": "a", "CHECKPOINT_STORAGE_CLASS": "efs-sc", "CHECKPOINT_SIZE": "1Ti"},
            "CHECKPOINT_STORAGE_CLASS",
            "not both",
        ),
        ({"CHECKPOINT_EVERY": "100"}, "CHECKPOINT_EVERY", "no checkpoint volume"),
        ({"CHECKPOINT_PVC": "c", "CHECKPOINT_EVERY": "0"}, "CHECKPOINT_EVERY", "must be 1 or more"),
        ({"CHECKPOINT_PVC": "c", "CHECKPOINT_MOUNT": "/models"}, "CHECKPOINT_MOUNT", "is MODEL_MOUNT too"),
        ({"TRAINER_ARGS": "--checkpoint-dir /tmp/ckpt"}, "TRAINER_ARGS", "is set by CHECKPOINT_PVC or"),
        ({"COMMAND": "/app/train.py", "MODEL_PVC": "w"}, "MODEL_PVC", "COMMAND runs your own program"),
        (
            {"COMMAND": "/app/train.py", "CHECKPOINT_PVC": "c", "CHECKPOINT_EVERY": "5"},
            "CHECKPOINT_EVERY",
            "COMMAND runs your own program",
        ),
    ],
)
def test_storage_mistakes_name_the_key_and_the_fix(settings: dict, key: str, text: str) -> None:
    with pytest.raises(UserError) as err:
        settings_from_mapping({"IMAGE_URI": IMAGE, **settings})
    assert err.value.field == key and text in str(err.value)


@pytest.mark.parametrize(
    "settings, text",
    [
        (
            {"MODEL": "llama2-7b", "TRAINER_ARGS": "--seq-len 8192"},
            "--seq-len: 8192 exceeds the model's 4096 positions",
        ),
        (
            {"SHARDING_STRATEGY": "HYBRID_SHARD", "TRAINER_ARGS": "--shard-degree 3"},
            "--shard-degree: --shard-degree 3 does not fit the world size 16",
        ),
        ({"TRAINER_ARGS": "--steps 0"}, "--steps: must be positive"),
        ({"TRAINER_ARGS": "--activation-checkpointing every-64"}, "every-64 checkpoints no layer of a 32-layer model"),
    ],
)
def test_render_refuses_what_every_rank_would_refuse(settings: dict, text: str) -> None:
    """Before: such a job rendered, and every pod exited 2 and restarted (OnFailure) forever."""
    with pytest.raises(UserError) as err:
        settings_from_mapping({"IMAGE_URI": IMAGE, **settings})
    assert err.value.field == "TRAINER_ARGS" and text in str(err.value) and "NUM_NODES=2" in str(err.value)


def test_the_example_command_still_parses_after_the_launcher() -> None:
    s = settings_from_mapping({"IMAGE_URI": IMAGE, **HUB, **CKPT})
    cfg = trainer_cfg(trainer_command(s, "r"))
    assert cfg.model.path == "/models/meta-llama--Llama-2-7b-hf" and cfg.checkpoint.dir == "/checkpoints/fsdp"
