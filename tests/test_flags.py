"""Flags spelled once: every trainer flag, its default and its help come from one field
declaration, and every launcher's command line is generated from the same settings objects."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from observe.errors import UserError
from observe.flags import OneLineParser, add_flags, apply_flags, flag, flag_names, iter_flags, parse_flags, to_argv
from observe.k8s.job_settings import MANAGED_TRAINER_SETTINGS, managed_trainer_flags, settings_from_mapping
from observe.k8s.kinds.pytorchjob import trainer_command
from observe.scaling.local import LocalPlan
from tests.support.cli import run_cli
from trainer.runspec.config import (
    CheckpointConfig,
    DataConfig,
    MetricsConfig,
    ModelConfig,
    OptimConfig,
    ParallelConfig,
    TrainConfig,
    ValidationConfig,
    build_parser,
)
from trainer.runspec.launch import LaunchConfig, torchrun_command

#: Every trainer flag the hand-written parser had (commit ae3655f): none may go away.
TRAINER_FLAGS_BEFORE = (
    "--preset --model --tokenizer --data --seq-len --batch-size --steps --lr --warmup-steps --min-lr-ratio "
    "--weight-decay --grad-clip --grad-accum-steps --seed --sharding-strategy --mixed-precision --device --backend "
    "--replicate-degree --shard-degree --activation-checkpointing --verify-weights --checkpoint-dir "
    "--checkpoint-every --keep-checkpoints --resume --sigterm-grace --resume-any-world-size --val-every --val-fraction --val-batches "
    "--metrics --metrics-port --metrics-address --metrics-linger --log-every --log-json --run-id"
).split()
SCALING_PLAN_FLAGS_BEFORE = (
    "--world-sizes --strong --steps --batch-size --seq-len --preset --threads-per-rank "
    "--metrics-port --timeout --warmup-steps"
).split()

#: Settings that differ from the defaults in every field a flag can set.
EVERYTHING = TrainConfig(
    model=ModelConfig(preset="small", path="/models/x", tokenizer="/tok"),
    data=DataConfig(paths=["a.txt", "b/*.jsonl"], seq_len=64, batch_size=3),
    optim=OptimConfig(lr=3e-4, warmup_steps=7, min_lr_ratio=0.2, weight_decay=0.05, grad_clip=0.5, grad_accum_steps=4),
    parallel=ParallelConfig(
        sharding_strategy="HYBRID_SHARD",
        mixed_precision="fp32",
        device="cpu",
        backend="gloo",
        replicate_degree=2,
        shard_degree=4,
        activation_checkpointing="every-2",
    ),
    metrics=MetricsConfig(
        enabled=False,
        port_base=9600,
        address="127.0.0.1",
        linger_seconds=2.5,
        log_every=3,
        log_json="/tmp/log.jsonl",
        run_id="r-1",
    ),
    checkpoint=CheckpointConfig(dir="/ckpt", every=5, keep=3, resume="never", sigterm_grace=10.0, any_world_size=True),
    validation=ValidationConfig(every=9, fraction=0.05, batches=2),
    steps=11,
    seed=4,
    verify_weights=True,
)


def _leaf_fields(cls: type, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        nested = f.default_factory
        if isinstance(nested, type) and dataclasses.is_dataclass(nested):
            out += _leaf_fields(nested, f"{prefix}{f.name}.")
        else:
            out.append(prefix + f.name)
    return out


def test_every_field_of_the_run_settings_is_a_flag_and_no_old_flag_went_away() -> None:
    names = flag_names(TrainConfig)
    assert sorted(names) == sorted(_leaf_fields(TrainConfig))
    assert sorted(names.values()) == sorted(TRAINER_FLAGS_BEFORE)
    assert sorted(flag_names(LocalPlan).values()) == sorted(SCALING_PLAN_FLAGS_BEFORE)


def test_a_command_line_round_trips_through_the_settings() -> None:
    argv = EVERYTHING.to_argv()
    assert TrainConfig.from_argv(argv) == EVERYTHING
    assert TrainConfig().to_argv() == []  # defaults need no flag


def test_help_shows_the_dataclass_defaults() -> None:
    """Change a default in the dataclass and the help follows: nothing else spells it."""
    text = " ".join(build_parser().format_help().split())
    for name in flag_names(TrainConfig).values():
        assert name in text
    assert f"tokens per sequence (default: {DataConfig().seq_len})" in text
    assert f"(default: {MetricsConfig().port_base})" in text
    assert f"complete checkpoints kept (default: {CheckpointConfig().keep})" in text


def test_train_help_lists_the_launcher_and_every_trainer_flag(capsys) -> None:
    result = run_cli(["train", "--help"], capsys)
    assert result.status == 0
    for name in [*TRAINER_FLAGS_BEFORE, "--nproc-per-node", "--max-restarts"]:
        assert f"  {name}" in result.stdout
    assert f"ranks on this machine (default: {LaunchConfig().nproc_per_node})" in result.stdout


def test_every_launcher_command_line_parses_back_to_its_settings(tmp_path: Path) -> None:
    cmd = torchrun_command(EVERYTHING, 2, max_restarts=1)
    cut = cmd.index("--no-python")
    assert cmd[cut + 1].endswith("fsdp-observe-trainer")
    assert TrainConfig.from_argv(cmd[cut + 2 :]) == EVERYTHING
    plan = LocalPlan(world_sizes=(1, 2), steps=12, seq_len=32, batch_size=2, trainer_args=("--lr", "5e-4"))
    cfg = plan.trainer_config(2, "run-x", tmp_path / "log.jsonl")
    assert (cfg.steps, cfg.data.seq_len, cfg.optim.lr, cfg.metrics.run_id) == (12, 32, 5e-4, "run-x")
    job = settings_from_mapping(
        {
            "IMAGE_URI": "r/fsdp-observe:1",
            "MODEL": "llama2-7b",
            "DATA": "/d/a.jsonl",
            "TRAINER_ARGS": "--steps=7 --grad-accum-steps 2",
        }
    )
    pod = trainer_command(job, "rid")
    assert pod[:4] == ["fsdp-observe-torchrun", "--nproc-per-node=8", "--no-python", "fsdp-observe-trainer"]
    assert TrainConfig.from_argv(pod[4:]) == job.trainer_config("rid")
    parsed = TrainConfig.from_argv(pod[4:])
    assert (
        parsed.model.preset,
        parsed.data.paths,
        parsed.steps,
        parsed.optim.grad_accum_steps,
        parsed.metrics.run_id,
    ) == ("llama2-7b", ["/d/a.jsonl"], 7, 2, "rid")
    assert "--metrics-port" in pod and "--sharding-strategy" in pod  # shown to readers of the manifest


def test_the_flags_a_job_setting_owns_come_from_the_trainer_flags() -> None:
    assert managed_trainer_flags() == {
        "--preset": "MODEL",
        "--model": "MODEL",
        "--data": "DATA",
        "--sharding-strategy": "SHARDING_STRATEGY",
        "--metrics-port": "METRICS_PORT",
        "--run-id": "the rendered run id",
        "--device": "GPU_PER_NODE",
        "--metrics": "the job (metrics are always on)",
        "--checkpoint-dir": "CHECKPOINT_PVC or CHECKPOINT_STORAGE_CLASS (a volume every pod shares)",
        "--checkpoint-every": "CHECKPOINT_EVERY",
    }
    assert set(MANAGED_TRAINER_SETTINGS) <= set(flag_names(TrainConfig))
    with pytest.raises(UserError, match="TRAINER_ARGS: --metrics-port is set by METRICS_PORT"):
        settings_from_mapping({"IMAGE_URI": "x", "TRAINER_ARGS": "--metrics-p 9600"})  # an abbreviation too


@dataclasses.dataclass(frozen=True)
class _Inner:
    size: int = dataclasses.field(default=3, metadata=flag("--size", "a size"))
    names: list[str] = dataclasses.field(default_factory=list, metadata=flag("--names", "names", nargs="+"))


@dataclasses.dataclass(frozen=True)
class _Outer:
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    fast: bool = dataclasses.field(default=False, metadata=flag("--fast", "go fast"))
    count: int = dataclasses.field(default=1, metadata=flag("--count", "a count", env="TEST_FLAGS_COUNT"))
    plain: str = "not a flag"


def _parser() -> OneLineParser:
    ap = OneLineParser(prog="t")
    add_flags(ap, _Outer, {"inner": "inner things"})
    return ap


def test_the_generic_machinery_on_a_small_dataclass() -> None:
    assert [path for path, _, _ in iter_flags(_Outer)] == ["inner.size", "inner.names", "fast", "count"]
    values = parse_flags(_parser(), ["--size", "5", "--names", "a", "b"])
    assert values == {"inner.size": 5, "inner.names": ["a", "b"]}  # only what was given
    outer = apply_flags(_Outer(), values)
    assert outer == _Outer(inner=_Inner(size=5, names=["a", "b"]))
    assert to_argv(outer) == ["--size", "5", "--names", "a", "b"]
    assert to_argv(_Outer(), explicit=["count"]) == ["--count", "1"]
    assert apply_flags(_Outer(), {}, environ={"TEST_FLAGS_COUNT": "4"}).count == 4
    assert apply_flags(_Outer(), {"count": 2}, environ={"TEST_FLAGS_COUNT": "4"}).count == 2  # the flag wins
    with pytest.raises(UserError, match=r"\$TEST_FLAGS_COUNT: 'x' \(invalid literal"):
        apply_flags(_Outer(), {}, environ={"TEST_FLAGS_COUNT": "x"})
    with pytest.raises(ValueError, match="on-switch"):
        to_argv(_Outer(fast=False), base=_Outer(fast=True))
    with pytest.raises(UserError, match="--size: invalid int value"):
        parse_flags(_parser(), ["--size", "big"])
    assert "inner things" in _parser().format_help()
