"""User mistakes: one line naming the flag and the fix, exit status 2, no traceback.

The launcher's checks run in-process (``observe.cli.main``, what the console script runs); a
rank's taken port is checked on the real process in ``tests/e2e/test_rank_entry.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from observe.errors import UserError
from tests.support.cli import assert_one_line_error, run_cli


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--preset", "llama9-1t"], ("--preset", "unknown preset", "choose one of tiny")),
        (["--data", "/nonexistent/*.txt"], ("--data", "nothing matches", "pass existing")),
        (["--seq-len", "4096"], ("--seq-len", "exceeds the model's 1024 positions", "--seq-len 1024 or less")),
        (["--steps", "0"], ("--steps", "must be positive")),
        (["--steps", "-5"], ("--steps", "must be positive")),
        (["--sharding-strategy", "ZERO9"], ("--sharding-strategy", "choose one of FULL_SHARD")),
        (["--nproc-per-node", "0"], ("--nproc-per-node", "must be positive")),
        (
            [
                "--nproc-per-node",
                "2",
                "--sharding-strategy",
                "HYBRID_SHARD",
                "--replicate-degree",
                "2",
                "--shard-degree",
                "2",
            ],
            ("--replicate-degree", "does not fit the world size 2", "product is the number of ranks"),
        ),
        (["--checkpoint-every", "10"], ("--checkpoint-every", "nowhere to save", "--checkpoint-dir")),
        (["--activation-checkpointing", "sometimes"], ("--activation-checkpointing", "every-N")),
        (["--max-restarts", "-1"], ("--max-restarts", "must be >= 0")),
        (["--stepz", "3"], ("fsdp-observe train: unrecognized arguments: --stepz 3", "did you mean --steps?")),
        (["--metrics", "maybe"], ("--metrics: 'maybe' is neither on nor off", "pass --metrics on")),
        (["--seq-len", "long"], ("--seq-len: invalid int value: 'long'",)),
    ],
)
def test_train_rejects_bad_flags(args, needles, capsys) -> None:
    assert_one_line_error(run_cli(["train", *args], capsys), *needles)


def test_empty_data_file_is_rejected(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert_one_line_error(run_cli(["train", "--data", str(empty)], capsys), "--data", "no non-empty")


def test_taken_port_is_caught_before_ranks_start(port_block, capsys) -> None:
    base = port_block(2)
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", base + 1))
        holder.listen()
        result = run_cli(["demo", "--metrics-port", str(base)], capsys)
    assert_one_line_error(result, "--metrics-port", f"port {base + 1} (local_rank 1) is already in use")


def test_a_rank_refuses_a_bad_flag_in_one_line(capsys) -> None:
    """The rank's own parser is the same one-line parser (no usage block from every rank)."""
    from trainer.__main__ import main as rank_main

    assert rank_main(["--stepz", "3"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: fsdp-observe-trainer: unrecognized arguments: --stepz 3; did you mean --steps? "
        "(run 'fsdp-observe-trainer --help' for the flags)\n"
    )


def test_unknown_command_is_a_usage_error(capsys) -> None:
    result = run_cli(["frobnicate"], capsys)
    assert result.status == 2
    assert result.stderr == (
        "error: fsdp-observe: unknown command 'frobnicate'; choose one of agent, dashboards, "
        "demo, diagnose, job, run, scaling, top, train\n"
    )


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            [],
            "error: fsdp-observe: the following arguments are required: COMMAND; run 'fsdp-observe --help' for the flags",
        ),
        (
            ["--bogus"],
            "error: fsdp-observe: '--bogus' is not a command; options follow the command: fsdp-observe COMMAND --help",
        ),
    ],
)
def test_the_dispatcher_itself_answers_in_one_line(argv, line, capsys) -> None:
    result = run_cli(argv, capsys)
    assert (result.status, result.stderr) == (2, line + "\n")


@pytest.mark.parametrize(
    "typo, meant",
    [("llama2-7B", "llama2-7b"), ("llama-2-7b", "llama2-7b"), ("tine", "tiny"), ("Llama3-8B", "llama3-8b")],
)
def test_a_preset_typo_gets_a_did_you_mean(typo: str, meant: str, capsys) -> None:
    assert_one_line_error(
        run_cli(["train", "--preset", typo], capsys), f"--preset: unknown preset {typo!r}", f"did you mean {meant}?"
    )


def test_jsonl_lines_without_the_text_field_are_named(tmp_path: Path, capsys) -> None:
    """Before: every rank said "no train document ...; lower --val-fraction", then a torchrun traceback."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": "hello world", "id": 1}\n{"txt": "more"}\n')
    line = assert_one_line_error(
        run_cli(["train", "--data", str(bad)], capsys),
        "--data",
        str(bad),
        'no line has a "text" field',
        "line 1 has keys id, txt",
        '{"text": "..."}',
    )
    assert "val-fraction" not in line


def test_jsonl_that_is_not_json_is_named(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("just words\n")
    assert_one_line_error(run_cli(["train", "--data", str(bad)], capsys), "--data", "line 1 is not JSON")


@pytest.mark.parametrize("content", ["x", "\n", "a few words only"])
def test_a_file_too_small_for_one_step_is_refused(content: str, tmp_path: Path, capsys) -> None:
    """Before: a 1-byte file trained "successfully" with 4,096 labelled tokens per step."""
    tiny = tmp_path / "one.txt"
    tiny.write_text(content)
    assert_one_line_error(
        run_cli(["train", "--data", str(tiny), "--nproc-per-node", "2"], capsys),
        "--data: the training text holds",
        "fewer than one step takes",
        "2 rank(s) x 1 micro-batch(es) x 8 sequences x 257 tokens = 4,112",
        "lower --batch-size",
    )


def test_a_file_that_fills_exactly_one_step_is_accepted(tmp_path: Path) -> None:
    from trainer.runspec.config import DataConfig, TrainConfig

    text = tmp_path / "enough.txt"
    text.write_text("a" * (2 * 2 * 17 - 1))  # 67 bytes + 1 EOS = 68 tokens = 2 ranks x 2 x (16 + 1)
    cfg = TrainConfig(data=DataConfig(paths=[str(text)], seq_len=16, batch_size=2))
    assert cfg.validate(world_size=2) == [text]
    text.write_text("a" * (2 * 2 * 17 - 2))
    with pytest.raises(UserError, match="holds 67 tokens at most"):
        cfg.validate(world_size=2)


def test_an_unwritable_log_json_is_one_line(unwritable_dir: Path, capsys) -> None:
    """Before: rank 0 died with OSError, rank 1 with a gloo RuntimeError, then a torchrun traceback."""
    target = unwritable_dir / "log.jsonl"
    assert_one_line_error(
        run_cli(["train", "--log-json", str(target)], capsys),
        "--log-json",
        f"cannot write to {str(target)!r}",
        "pass a file in a directory you can write",
    )
    assert not target.exists()


def test_a_log_json_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    from trainer.runspec.config import MetricsConfig, TrainConfig

    target = tmp_path / "new" / "log.jsonl"
    TrainConfig(metrics=MetricsConfig(log_json=str(target))).validate()
    assert target.parent.is_dir() and not target.exists()
    with pytest.raises(UserError, match="^--log-json: .* is a directory"):
        TrainConfig(metrics=MetricsConfig(log_json=str(tmp_path))).validate()


def test_validating_never_removes_a_log_json_another_rank_just_opened(tmp_path: Path, monkeypatch) -> None:
    """CI failure: every rank validates ``--log-json``; rank 1's probe created the missing file and
    removed it again, and when rank 0 had opened it in between, rank 0's log was deleted under it.
    Here rank 0 opens the log while rank 1 validates (the losing interleaving)."""
    from trainer.runspec.config import MetricsConfig, TrainConfig

    target = tmp_path / "run.jsonl"
    rank0: list = []
    real_mkdir = Path.mkdir

    def mkdir_then_rank0_opens(self: Path, *args, **kwargs) -> None:
        real_mkdir(self, *args, **kwargs)
        if self == target.parent and not rank0:
            rank0.append(open(target, "a"))

    monkeypatch.setattr(Path, "mkdir", mkdir_then_rank0_opens)
    TrainConfig(metrics=MetricsConfig(log_json=str(target))).validate()
    monkeypatch.undo()
    rank0[0].write('{"event": "start"}\n')
    rank0[0].close()
    assert target.read_text() == '{"event": "start"}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]  # the probe left nothing


def test_an_address_that_is_not_this_machines_names_the_address_flag(capsys) -> None:
    assert_one_line_error(
        run_cli(["train", "--metrics-address", "10.255.255.1"], capsys),
        "--metrics-address: cannot serve on '10.255.255.1'",
        "not an address of this machine",
        "pass --metrics-address 127.0.0.1",
    )


def test_checkpoint_mismatches_offer_a_new_checkpoint_dir(tmp_path: Path) -> None:
    """Before: each message sent the user to the other ('--resume never' / '--resume auto') in a circle."""
    from trainer.runspec.checkpoint_files import TrainerState, step_dir
    from trainer.runspec.config import CheckpointConfig, DataConfig, TrainConfig
    from trainer.runspec.launch import check_not_finished

    text = tmp_path / "text.txt"
    text.write_text("hello world " * 2000)
    cfg = TrainConfig(
        data=DataConfig(paths=[str(text)]), steps=100, checkpoint=CheckpointConfig(dir=str(tmp_path / "ckpt"))
    )
    files = cfg.validate(world_size=2)
    done = step_dir(tmp_path / "ckpt", 100)
    done.mkdir(parents=True)
    (done / ".metadata").write_bytes(b"x")
    TrainerState(
        step=100,
        batches_consumed=100,
        scheduler={},
        layout=cfg.layout(files, 2),
        run_id="r",
        run_started=0.0,
        productive_seconds=1.0,
        reason="final",
        saved_at=1.0,
    ).write(done)
    with pytest.raises(UserError) as finished:
        check_not_finished(cfg)
    assert "a new --checkpoint-dir" in finished.value.fix and "--resume never" not in finished.value.fix
    cfg.data.seq_len = 128
    with pytest.raises(UserError) as mismatch:
        cfg.validate(world_size=2)
    assert mismatch.value.field == "--seq-len" and "a new --checkpoint-dir" in mismatch.value.fix
    assert "--resume never" not in mismatch.value.fix and "(256)" in mismatch.value.fix
    cfg.checkpoint.resume = "never"
    with pytest.raises(UserError) as never:
        cfg.validate(world_size=2)
    assert never.value.field == "--resume" and "a new (empty) --checkpoint-dir" in never.value.fix


def test_a_taken_agent_port_on_demo_names_agent_port(taken_port: int, capsys) -> None:
    """Before: 'error: --port: ...; pass --port with a free port', a flag demo does not have."""
    line = assert_one_line_error(
        run_cli(["demo", "--no-tui", "--agent-port", str(taken_port)], capsys),
        f"--agent-port: port {taken_port} on 127.0.0.1 is already in use",
        "pass another --agent-port",
    )
    assert "--port " not in line.replace("--agent-port", "")


def test_an_unwritable_demo_out_is_one_line(unwritable_dir: Path, capsys) -> None:
    assert_one_line_error(
        run_cli(["demo", "--no-tui", "--out", str(unwritable_dir / "demo")], capsys),
        "--out: cannot write to",
        "pass a directory you can write",
    )
