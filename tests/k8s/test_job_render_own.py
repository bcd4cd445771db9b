"""``fsdp-observe job render`` for the user's own image and command (``COMMAND``): a valid
PyTorchJob whose pods run it under torchrun with zero-code instrumentation, scraped by the
trainer PodMonitor."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from observe import catalog as c
from observe.cli import main as cli_main
from observe.errors import UserError
from observe.k8s import names
from observe.k8s.job_settings import load_settings, settings_from_mapping
from observe.k8s.kinds import pytorchjob
from observe.k8s.kinds.pytorchjob import render
from tests.support.kube_checks import K8S_VERSION, REPO, unknown_fields, validate_against

EXAMPLE = REPO / "examples" / "own-training.env"
IMAGE = "registry.example/my-finetune:1.0"


def container(job: dict) -> dict:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def test_the_example_renders_a_valid_instrumented_job(pytorchjob_schema) -> None:
    job = render(load_settings(EXAMPLE), run_id="sft-1")
    validate_against(job, pytorchjob_schema)
    assert unknown_fields(job, pytorchjob_schema) == []
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    kubernetes_validate.validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", **template["metadata"]},
            "spec": template["spec"],
        },
        K8S_VERSION,
        strict=True,
    )
    pod = container(job)
    assert pod["image"] == "123456789012.dkr.ecr.us-west-2.amazonaws.com/my-finetune:1.4.0"
    assert pod["command"] == [
        "fsdp-observe-torchrun",
        "--nproc-per-node=8",
        "/app/finetune.py",
        "--model",
        "meta-llama/Meta-Llama-3-8B",
        "--fsdp",
        "full_shard",
        "--bf16",
    ]
    env = {e["name"]: e.get("value") for e in pod["env"]}
    assert env[c.INSTRUMENT_ENV] == "1" and env["FSDP_OBSERVE_PORT_BASE"] == "9500"
    assert env["FSDP_OBSERVE_RUN_ID"] == "sft-1" == template["metadata"]["labels"][names.RUN_ID_LABEL]
    ports = {p["name"]: p["containerPort"] for p in pod["ports"]}
    assert {f"metrics-{r}": 9500 + r for r in range(8)}.items() <= ports.items()
    monitor = yaml.safe_load((REPO / "daemonsets" / "trainer-podmonitor.yaml").read_text())
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert {e["port"] for e in monitor["spec"]["podMetricsEndpoints"]} >= set(ports) - {pytorchjob.OPERATOR_PORT_NAME}


def test_our_trainers_jobs_are_not_instrumented_twice() -> None:
    env = {e["name"] for e in container(render(settings_from_mapping({"IMAGE_URI": IMAGE}), "r"))["env"]}
    assert c.INSTRUMENT_ENV not in env  # the trainer serves its own metrics


def test_a_metrics_port_and_a_cpu_job_carry_over() -> None:
    job = render(
        settings_from_mapping(
            {
                "IMAGE_URI": IMAGE,
                "COMMAND": "-m my_pkg.sft --epochs 1",
                "GPU_PER_NODE": "0",
                "NPROC_PER_NODE": "2",
                "METRICS_PORT": "9700",
            }
        ),
        "r",
    )
    pod = container(job)
    assert pod["command"] == ["fsdp-observe-torchrun", "--nproc-per-node=2", "-m", "my_pkg.sft", "--epochs", "1"]
    assert {e["name"]: e.get("value") for e in pod["env"]}["FSDP_OBSERVE_PORT_BASE"] == "9700"
    assert [p["containerPort"] for p in pod["ports"] if p["name"].startswith("metrics-")] == [9700, 9701]
    assert "resources" not in pod


@pytest.mark.parametrize(
    "settings, key, text",
    [
        ({"COMMAND": "train.py", "MODEL": "llama2-7b"}, "MODEL", "remove MODEL"),
        ({"COMMAND": "train.py", "TRAINER_ARGS": "--steps 5"}, "TRAINER_ARGS", "COMMAND runs your own program"),
        ({"COMMAND": "torchrun --nproc-per-node 8 train.py"}, "COMMAND", 'COMMAND="--nproc-per-node 8 train.py"'),
        ({"COMMAND": "/usr/bin/python3 train.py"}, "COMMAND", "the pod already runs torchrun"),
    ],
)
def test_mistakes_name_the_key_and_the_fix(settings: dict, key: str, text: str) -> None:
    with pytest.raises(UserError) as err:
        settings_from_mapping({"IMAGE_URI": IMAGE, **settings})
    assert err.value.field == key and text in str(err.value)


def test_the_cli_says_it_in_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text(f'IMAGE_URI={IMAGE}\nCOMMAND="python train.py"\n')
    assert cli_main(["job", "render", "--config", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: COMMAND: starts with 'python', but the pod already runs torchrun; "
        'write only what torchrun runs, e.g. COMMAND="train.py"'
    ]
