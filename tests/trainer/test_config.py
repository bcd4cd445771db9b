"""Bad combinations are refused before any rank starts: one ``UserError`` naming the flag.

``trainer.runspec.launch.prepare`` is what ``fsdp-observe train`` runs (torch-free); a few of these
also go through the real command in ``test_cli_errors.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observe.errors import UserError
from trainer.runspec.checkpoint_files import DCP_METADATA, TrainerState, step_dir
from trainer.runspec.config import ParallelConfig, TrainConfig
from trainer.runspec.launch import prepare


def config(*args: str) -> TrainConfig:
    return TrainConfig.from_argv(list(args))


def prepare_argv(argv: list[str], nproc: int) -> TrainConfig:
    """What ``fsdp-observe train`` does with trainer flags: parse, then ``prepare``."""
    return prepare(TrainConfig.from_argv(argv), nproc)


@pytest.mark.parametrize(
    "strategy, world, local, degrees, shape",
    [
        ("FULL_SHARD", 4, 4, (None, None), (4,)),
        ("SHARD_GRAD_OP", 2, 2, (None, None), (2,)),
        ("NO_SHARD", 4, 2, (None, None), (4, 1)),
        ("HYBRID_SHARD", 8, 4, (None, None), (2, 4)),  # default: nodes x ranks per node
        ("HYBRID_SHARD", 4, 4, (2, 2), (2, 2)),
        ("HYBRID_SHARD", 8, 8, (None, 2), (4, 2)),  # the missing degree is derived
        ("HYBRID_SHARD", 8, 8, (4, None), (4, 2)),
    ],
)
def test_mesh_shapes(strategy, world, local, degrees, shape) -> None:
    p = ParallelConfig(sharding_strategy=strategy, replicate_degree=degrees[0], shard_degree=degrees[1])
    assert p.mesh_shape(world, local) == shape


@pytest.mark.parametrize("setting, every", [("none", 0), ("full", 1), ("every-1", 1), ("every-3", 3)])
def test_activation_checkpointing_settings(setting: str, every: int) -> None:
    assert ParallelConfig(activation_checkpointing=setting).checkpoint_every() == every


BAD = [
    (
        ["--sharding-strategy", "HYBRID_SHARD", "--replicate-degree", "3", "--shard-degree", "1"],
        2,
        "--replicate-degree: --replicate-degree 3 x --shard-degree 1 does not fit the world size 2",
    ),
    (
        ["--sharding-strategy", "HYBRID_SHARD", "--shard-degree", "3"],
        4,
        "--shard-degree: --shard-degree 3 does not fit the world size 4",
    ),
    (["--sharding-strategy", "HYBRID_SHARD", "--replicate-degree", "0"], 2, "--replicate-degree: must be positive"),
    (["--shard-degree", "2"], 2, "--shard-degree: only HYBRID_SHARD uses a (replicate, shard) mesh"),
    (["--sharding-strategy", "NO_SHARD", "--replicate-degree", "2"], 2, "--replicate-degree: only HYBRID_SHARD"),
    (["--activation-checkpointing", "sometimes"], 2, "--activation-checkpointing: unknown setting 'sometimes'"),
    (["--activation-checkpointing", "every-0"], 2, "--activation-checkpointing: unknown setting 'every-0'"),
    (["--activation-checkpointing", "every-5"], 2, "every-5 checkpoints no layer of a 4-layer model"),
    (["--mixed-precision", "fp16"], 2, "--mixed-precision: unknown policy 'fp16'"),
    (["--grad-accum-steps", "0"], 2, "--grad-accum-steps: must be positive"),
    (["--checkpoint-every", "10"], 2, "--checkpoint-every: there is nowhere to save; pass --checkpoint-dir"),
    (["--checkpoint-every", "-1", "--checkpoint-dir", "x"], 2, "--checkpoint-every: must be >= 0"),
    (["--keep-checkpoints", "0", "--checkpoint-dir", "x"], 2, "--keep-checkpoints: must be positive"),
    (["--sigterm-grace", "0"], 2, "--sigterm-grace: must be positive"),
    (["--val-every", "10", "--val-fraction", "0"], 2, "--val-fraction: must be in (0, 0.5]"),
    (["--val-every", "10", "--val-fraction", "0.9"], 2, "--val-fraction: must be in (0, 0.5]"),
    (["--val-every", "-1"], 2, "--val-every: must be >= 0"),
    (["--val-every", "5", "--val-batches", "0"], 2, "--val-batches: must be positive"),
    (["--resume", "latest"], 2, "--resume: no complete checkpoint in (no --checkpoint-dir given)"),
]


@pytest.mark.parametrize("args, nproc, message", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_combinations_are_one_config_error(args, nproc, message, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        prepare_argv(["--data", __file__, "--metrics", "off", *args], nproc)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def _fake_checkpoint(root: Path, step: int, layout_overrides: dict | None = None, world: int = 2) -> Path:
    """A checkpoint directory with a real ``trainer.json`` written for this test file as data."""
    cfg = config("--data", __file__)
    layout = {**cfg.layout(cfg.validate(), world), **(layout_overrides or {})}
    path = step_dir(root, step)
    path.mkdir(parents=True)
    (path / DCP_METADATA).write_bytes(b"index")  # DCP's index, as every finished save leaves it
    TrainerState(
        step=step,
        batches_consumed=step,
        scheduler={},
        layout=layout,
        run_id="r",
        run_started=0.0,
        productive_seconds=0.0,
        reason="periodic",
        saved_at=0.0,
    ).write(path)
    return path


@pytest.mark.parametrize(
    "changed, flag",
    [
        (["--batch-size", "4"], "--batch-size: checkpoint step-00000010 was written with batch_size 8, this run has 4"),
        (["--seq-len", "128"], "--seq-len: checkpoint step-00000010 was written with seq_len 256"),
        (["--seed", "3"], "--seed:"),
        (["--grad-accum-steps", "2"], "--grad-accum-steps:"),
        (["--preset", "llama2-7b", "--seq-len", "256"], "--model/--preset:"),
    ],
)
def test_resume_refuses_another_data_layout(changed, flag, tmp_path) -> None:
    _fake_checkpoint(tmp_path / "ckpt", 10)
    with pytest.raises(UserError, match=flag.replace("(", r"\(").replace(")", r"\)")):
        prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "ckpt"), *changed], 2)


def test_resume_refuses_another_world_size(tmp_path) -> None:
    _fake_checkpoint(tmp_path / "ckpt", 10)
    with pytest.raises(UserError, match="--nproc-per-node: checkpoint step-00000010 was written with world_size 2"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "ckpt")], 4)


def test_resume_of_a_finished_run_names_steps(tmp_path) -> None:
    _fake_checkpoint(tmp_path / "ckpt", 100)
    with pytest.raises(UserError, match="--steps: checkpoint .* is already at step 100, the run is done"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "ckpt")], 2)
    # starting over into a directory that holds another run's checkpoints would mix the two
    with pytest.raises(UserError, match="--resume: never, but .* already holds checkpoints"):
        prepare_argv(
            ["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "ckpt"), "--resume", "never"], 2
        )
    # an explicit path of an incomplete save is refused
    (tmp_path / "ckpt" / "step-00000200").mkdir()
    with pytest.raises(UserError, match="--resume: .* is not a complete checkpoint"):
        prepare_argv(
            [
                "--data",
                __file__,
                "--metrics",
                "off",
                "--steps",
                "300",
                "--resume",
                str(tmp_path / "ckpt" / "step-00000200"),
            ],
            2,
        )


def test_resume_path_without_dir_keeps_saving_beside_it(tmp_path) -> None:
    path = _fake_checkpoint(tmp_path / "ckpt", 10)
    cfg = prepare_argv(["--data", __file__, "--metrics", "off", "--resume", str(path)], 2)
    assert cfg.checkpoint.dir == str(tmp_path / "ckpt")


def test_model_directory_needs_config_and_safetensors(tmp_path) -> None:
    with pytest.raises(UserError, match="--model: .* has no config.json"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--model", str(tmp_path)], 2)
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 512, "num_hidden_layers": 2}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UserError, match="--model: no .safetensors files"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--model", str(tmp_path)], 2)


def test_checkpoint_dir_must_be_a_writable_directory(tmp_path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="--checkpoint-dir: .* is a file"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "file")], 2)
    with pytest.raises(UserError, match="--checkpoint-dir: cannot write to .*file/sub"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "file" / "sub")], 2)
    prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path / "new" / "dir")], 2)
    assert (tmp_path / "new" / "dir").is_dir() and not list((tmp_path / "new" / "dir").iterdir())


def test_the_checkpoint_dir_probe_never_touches_another_nodes_probe(tmp_path) -> None:
    """Ranks on several nodes probe one shared --checkpoint-dir at once, and in containers their
    pids are often equal: a probe named by pid (``.write-test-<pid>``) could remove another
    node's probe under it, which then failed with a spurious "cannot write"."""
    import os

    theirs = tmp_path / f".write-test-{os.getpid()}"  # the other node's rank, same pid as ours
    theirs.write_bytes(b"")
    prepare_argv(["--data", __file__, "--metrics", "off", "--checkpoint-dir", str(tmp_path)], 2)
    assert [p.name for p in tmp_path.iterdir()] == [theirs.name]


def test_restart_store_hazard_and_the_launchers_remedy(monkeypatch) -> None:
    from trainer.runspec.launch import UNSHARE_STORE_ENV, restart_store_hazard, torchrun_env

    shared = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_MAX_RESTARTS": "1"}
    assert restart_store_hazard(shared)
    assert not restart_store_hazard({**shared, "TORCHELASTIC_MAX_RESTARTS": "0"})
    assert not restart_store_hazard({**shared, "TORCHELASTIC_USE_AGENT_STORE": "False"})  # etcd, or unshared
    monkeypatch.delenv(UNSHARE_STORE_ENV, raising=False)
    assert torchrun_env(2)[UNSHARE_STORE_ENV] == "1"


def test_model_must_be_a_local_directory(tmp_path) -> None:
    with pytest.raises(
        UserError, match="--model: 'meta-llama/Llama-2-7b-hf' is a Hugging Face Hub id, not a local directory"
    ) as hub:
        prepare_argv(["--data", __file__, "--metrics", "off", "--model", "meta-llama/Llama-2-7b-hf"], 2)
    assert "hf download meta-llama/Llama-2-7b-hf --local-dir DIR --include" in hub.value.fix  # not huggingface-cli
    with pytest.raises(UserError, match="--model: '/nope/model' is not a local directory"):
        prepare_argv(["--data", __file__, "--metrics", "off", "--model", "/nope/model"], 2)


def test_the_download_command_named_exists_in_the_installed_huggingface_hub() -> None:
    """Before: the fix named huggingface-cli, which huggingface_hub 1.x and 2.x no longer install."""
    import shlex
    import shutil
    import subprocess
    import sys
    from pathlib import Path as PathType

    from trainer.runspec.weights import download_hint

    argv = shlex.split(download_hint("org/name", "/tmp/x"))
    hf = shutil.which(argv[0], path=str(PathType(sys.executable).parent)) or shutil.which(argv[0])
    assert hf is not None, "huggingface_hub installs the hf command"
    usage = subprocess.run([hf, *argv[1:2], "--help"], capture_output=True, text=True, timeout=60).stdout
    for option in (a for a in argv if a.startswith("--")):
        assert option in usage, option
