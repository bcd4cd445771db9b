"""User mistakes: one line naming the flag and the fix, exit status 2, no traceback.

The launcher's checks run in-process (``observe.cli.main``, what the console script runs); a
rank's taken port is checked on the real process in ``tests/e2e/test_rank_entry.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, run_cli


@pytest.mark.parametrize("args, needles", [
    (["--preset", "llama9-1t"], ("--preset", "unknown preset", "choose one of tiny")),
    (["--data", "/nonexistent/*.txt"], ("--data", "nothing matches", "pass existing")),
    (["--seq-len", "4096"], ("--seq-len", "exceeds the model's 1024 positions", "--seq-len 1024 or less")),
    (["--steps", "0"], ("--steps", "must be positive")),
    (["--steps", "-5"], ("--steps", "must be positive")),
    (["--sharding-strategy", "ZERO9"], ("--sharding-strategy", "choose one of FULL_SHARD")),
    (["--nproc-per-node", "0"], ("--nproc-per-node", "must be positive")),
    (["--nproc-per-node", "2", "--sharding-strategy", "HYBRID_SHARD", "--replicate-degree", "2", "--shard-degree", "2"],
     ("--replicate-degree", "does not fit the world size 2", "product is the number of ranks")),
    (["--checkpoint-every", "10"], ("--checkpoint-every", "nowhere to save", "--checkpoint-dir")),
    (["--activation-checkpointing", "sometimes"], ("--activation-checkpointing", "every-N")),
    (["--max-restarts", "-1"], ("--max-restarts", "must be >= 0")),
    (["--stepz", "3"], ("fsdp-observe train: unrecognized arguments: --stepz 3", "did you mean --steps?")),
    (["--metrics", "maybe"], ("--metrics: 'maybe' is neither on nor off", "pass --metrics on")),
    (["--seq-len", "long"], ("--seq-len: invalid int value: 'long'",)),
])
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
    assert err == ("error: fsdp-observe-trainer: unrecognized arguments: --stepz 3; did you mean --steps? "
                   "(run 'fsdp-observe-trainer --help' for the flags)\n")


def test_unknown_command_is_a_usage_error(capsys) -> None:
    result = run_cli(["frobnicate"], capsys)
    assert result.status == 2
    assert result.stderr == ("error: fsdp-observe: unknown command 'frobnicate'; choose one of agent, dashboards, "
                             "demo, job, run, scaling, top, train\n")


@pytest.mark.parametrize("argv, line", [
    ([], "error: fsdp-observe: the following arguments are required: COMMAND; run 'fsdp-observe --help' for the flags"),
    (["--bogus"], "error: fsdp-observe: '--bogus' is not a command; options follow the command: fsdp-observe "
                  "COMMAND --help"),
])
def test_the_dispatcher_itself_answers_in_one_line(argv, line, capsys) -> None:
    result = run_cli(argv, capsys)
    assert (result.status, result.stderr) == (2, line + "\n")
