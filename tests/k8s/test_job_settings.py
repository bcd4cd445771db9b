"""Job settings files: the .env form of the AWS walkthrough, YAML, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.cli import main as cli_main
from observe.errors import UserError
from observe.k8s import names
from observe.k8s.job_settings import JobSettings, load_settings
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.kube_checks import REPO
from trainer.runspec.config import SHARDING_STRATEGIES

ENV_EXAMPLE = REPO / "examples" / "llama2-7b.env"
YAML_EXAMPLE = REPO / "examples" / "llama2-7b.yaml"
MINIMAL = "IMAGE_URI=registry.example/fsdp-observe:0.1.0\n"


def settings(tmp_path: Path, text: str, name: str = "job.env") -> JobSettings:
    path = tmp_path / name
    path.write_text(text)
    return load_settings(path)


def test_the_env_and_yaml_examples_are_the_same_job() -> None:
    env, yml = load_settings(ENV_EXAMPLE), load_settings(YAML_EXAMPLE)
    assert env == yml
    assert (env.job_name, env.num_nodes, env.gpu_per_node, env.efa_per_node) == ("llama2-7b-fsdp", 2, 8, 32)
    assert env.rdzv_endpoint == (names.ETCD_HOST, names.ETCD_CLIENT_PORT)
    assert env.trainer_args == ("--steps", "5000", "--seq-len", "4096", "--batch-size", "1", "--log-every", "10")


def test_env_syntax_of_the_walkthrough(tmp_path: Path) -> None:
    """``export``, comments, quotes, blank lines, and the walkthroughs' older key names."""
    s = settings(
        tmp_path,
        """#!/bin/bash
# Configuration for FSDP jobs
export IMAGE_URI=registry.example/fsdp-observe:0.1.0

## NUM_WORKERS - set to number of worker nodes
export NUM_WORKERS=4   # four p4d nodes
export GPU_PER_WORKER=8
export EFA_PER_WORKER=4
export INSTANCE_TYPE='p4d.24xlarge'
MODEL_NAME="meta-llama/Llama-2-7b-hf"
DATA="/data/shard-*.jsonl /data/extra.txt"
sharding_strategy=hybrid_shard
""",
    )
    assert (s.num_nodes, s.gpu_per_node, s.efa_per_node, s.instance_type) == (4, 8, 4, "p4d.24xlarge")
    assert s.model == "meta-llama/Llama-2-7b-hf"
    assert s.data == ("/data/shard-*.jsonl", "/data/extra.txt")
    assert s.sharding_strategy == "HYBRID_SHARD"
    assert s.node_range == (4, 4) and s.ranks_per_node == 8


def test_defaults_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "job.env"
    path.write_text(MINIMAL)
    s = load_settings(path, ["NUM_NODES=3", "MAX_NODES=6", "gpu_per_node=0"])
    assert (s.num_nodes, s.node_range, s.ranks_per_node) == (3, (3, 6), 1)
    assert s.rdzv_backend == "c10d" and s.rdzv_endpoint == (None, None)  # the operator picks worker 0


def test_every_sharding_strategy_of_the_trainer_is_accepted(tmp_path: Path) -> None:
    for strategy in SHARDING_STRATEGIES:
        assert settings(tmp_path, MINIMAL + f"SHARDING_STRATEGY={strategy}\n").sharding_strategy == strategy


@pytest.mark.parametrize(
    "line, key, needle",
    [
        ("NUM_NODES=0", "NUM_NODES", "must be 1 or more, got 0"),
        ("NUM_NODES=two", "NUM_NODES", "'two' is not a whole number"),
        ("JOB_NAME=my_job", "JOB_NAME", "use e.g. JOB_NAME=my-job"),
        ("JOB_NAME=Llama2", "JOB_NAME", "is not a name Kubernetes accepts"),
        (
            "SHARDING_STRATEGY=ZERO3",
            "SHARDING_STRATEGY",
            "choose one of FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD",
        ),
        ("RDZV_BACKEND=static", "RDZV_BACKEND", "choose one of c10d, etcd, etcd-v2"),
        ("MIN_NODES=3", "NUM_NODES", "outside MIN_NODES..MAX_NODES = 3..3"),
        ("GPU_PER_NODE=16", "GPU_PER_NODE", "between 0 and 8"),
        ("NPROC_PER_NODE=4", "NPROC_PER_NODE", "one rank per GPU"),
        ("NAMESPACE=Team_A", "NAMESPACE", "not a valid namespace"),
        ("SHM_SIZE=lots", "SHM_SIZE", "SHM_SIZE=64Gi"),
        ("METRICS_PORT=80", "METRICS_PORT", "between 1024"),
        ("MODEL=llama9", "MODEL", "neither a preset"),
        ("RDZV_HOST=http://etcd:2379", "RDZV_HOST", "without scheme or port"),
        ("HF_TOKEN_SECRET=HF_Token", "HF_TOKEN_SECRET", "not a Secret name"),
        ('TRAINER_ARGS="--steps two"', "TRAINER_ARGS", "invalid int value: 'two'"),
        ('TRAINER_ARGS="--no-such-flag"', "TRAINER_ARGS", "unrecognized arguments"),
        ('TRAINER_ARGS="--sharding-strategy NO_SHARD"', "TRAINER_ARGS", "set by SHARDING_STRATEGY"),
        ("NUM_NODE=2", "NUM_NODE", "did you mean NUM_NODES?"),
        ("REGISTRY=$(aws sts get-caller-identity)", "REGISTRY", "shell expansion"),
        ("INSTANCE_TYPE=p5 48xlarge", "INSTANCE_TYPE", "quote the value"),
        ("IMAGE_URI=", "IMAGE_URI", "is not set"),
    ],
)
def test_bad_settings_name_the_key_and_the_fix(tmp_path: Path, line: str, key: str, needle: str) -> None:
    text = MINIMAL + line + "\n" if not line.startswith("IMAGE_URI") else line + "\n"
    with pytest.raises(UserError) as info:
        settings(tmp_path, text)
    assert info.value.field == key
    assert needle in str(info.value)


def test_a_key_set_twice_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is set twice"):
        settings(tmp_path, MINIMAL + "NUM_NODES=2\nnum_nodes=4\n")


@pytest.mark.parametrize(
    "text, needle",
    [
        ("num_nodes: [2\n", "is not valid YAML"),
        ("- num_nodes\n", "must be a mapping"),
        ("image_uri: r/x:1\ninstance_type: {a: 1}\n", "expects a single value"),
        ("image_uri: r/x:1\nnum_nodes: true\n", "is not a whole number"),
    ],
)
def test_bad_yaml_is_one_error(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(UserError, match=needle.replace("[", r"\[")):
        settings(tmp_path, text, "job.yaml")


def test_a_token_in_the_settings_is_refused_without_echoing_it(tmp_path: Path, capsys) -> None:
    token = "hf_TESTtokenVALUE1234567890"
    path = tmp_path / "job.env"
    path.write_text(MINIMAL + f"export HF_TOKEN={token}\n")
    status = cli_main(["job", "render", "--config", str(path)])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    assert err.startswith("error: HF_TOKEN: a token written into the settings would end up in the manifest")
    assert "HF_TOKEN_SECRET=hf-token" in err and token not in err
    assert cli_main(["job", "render", "--config", str(ENV_EXAMPLE), "--set", f"HF_TOKEN={token}"]) == 2
    out, err = capsys.readouterr()
    assert token not in out + err


def test_render_errors_are_one_line_with_status_2(tmp_path: Path, capsys) -> None:
    """Through the dispatcher the console script runs (in-process)."""
    path = tmp_path / "job.env"
    path.write_text(MINIMAL + "NUM_NODES=0\n")
    for args, needle in (
        (["--config", str(path)], "error: NUM_NODES: must be 1 or more, got 0"),
        (["--config", str(tmp_path / "missing.env")], "error: --config: cannot read"),
        (["--config", str(ENV_EXAMPLE), "--set", "JOB_NAME=my_job"], "error: JOB_NAME:"),
        (["--config", str(ENV_EXAMPLE), "--run-id", "Run_1"], "error: --run-id:"),
    ):
        result = run_cli(["job", "render", *args], capsys)
        assert result.stdout == ""
        assert assert_one_line_error(result).startswith(needle), result.stderr


def test_every_setting_is_in_the_docs_table() -> None:
    from dataclasses import fields

    table = [line for line in (REPO / "docs" / "kubernetes.md").read_text().splitlines() if line.startswith("| `")]
    keyed = " ".join(line.split(" | ")[0] for line in table)
    for f in fields(JobSettings):
        if f.metadata.get("derived"):
            continue
        key = "IMAGE_URI" if f.name == "image" else f.name.upper()
        assert f"`{key}`" in keyed, key
