"""User mistakes: one line naming the flag and the fix, exit status 2, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "observe.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0]


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
])
def test_train_rejects_bad_flags(args, needles, subprocess_env) -> None:
    assert_one_line_error(run_cli(["train", *args], subprocess_env), *needles)


def test_empty_data_file_is_rejected(tmp_path: Path, subprocess_env) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert_one_line_error(run_cli(["train", "--data", str(empty)], subprocess_env), "--data", "no non-empty")


def test_taken_port_is_caught_before_ranks_start(port_block, subprocess_env) -> None:
    base = port_block(2)
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", base + 1))
        holder.listen()
        proc = run_cli(["demo", "--metrics-port", str(base)], subprocess_env)
    assert_one_line_error(proc, "--metrics-port", f"port {base + 1} (local_rank 1) is already in use")


def test_a_rank_with_a_taken_port_exits_2_in_one_line(port_block, subprocess_env) -> None:
    """The rank itself (python -m trainer, no launcher) also refuses a taken port cleanly."""
    port = port_block(1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        proc = subprocess.run([sys.executable, "-m", "trainer", "--steps", "1", "--metrics-address", "127.0.0.1",
                               "--metrics-port", str(port)], capture_output=True, text=True,
                              env=subprocess_env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"error: --metrics-port: port {port} on 127.0.0.1 is already in use" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_command_is_a_usage_error(subprocess_env) -> None:
    proc = run_cli(["frobnicate"], subprocess_env)
    assert proc.returncode == 2
    assert proc.stderr == ("error: fsdp-observe: unknown command 'frobnicate'; choose one of agent, dashboards, demo, "
                           "job, run, scaling, top, train\n")
