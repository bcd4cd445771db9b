"""``fsdp-observe scaling`` user mistakes: one line naming the flag and the fix, exit status 2."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from observe.cli.scaling import parse, world_sizes
from observe.scaling.local import LocalPlan


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "observe.cli", "scaling", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=cwd)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.mark.parametrize("args, needles", [
    (["--world-sizes", "0"], ("--world-sizes", "0 is not a number of ranks", "1,2,4")),
    (["--world-sizes", "1,two"], ("--world-sizes", "'1,two' is not a list of whole numbers", "--world-sizes 1,2,4")),
    (["--world-sizes", "1.5,2"], ("--world-sizes", "not a list of whole numbers")),
    (["--world-sizes=-1,2"], ("--world-sizes", "not a list of whole numbers")),
    (["--world-sizes", "-1,2"], ("--world-sizes", "expected one argument", "--world-sizes=VALUE")),
    (["--world-sizes", "4"], ("--world-sizes", "two or more sizes")),
    (["--steps", "ten"], ("--steps", "not a positive whole number", "--steps 1 or more")),
    (["--warmup-steps", "40"], ("--warmup-steps", "leaves none of the 40 steps")),
    (["--strong", "--world-sizes", "1,3"], ("--batch-size", "does not split evenly over 3 ranks")),
    (["--preset", "llama9-1t"], ("--preset", "unknown preset")),
    (["--run-id", "a"], ("--run-id", "pass --prometheus URL")),
    (["--prometheus", "localhost:9090", "--run-id", "a", "--run-id", "b"], ("--prometheus", "not an http(s) URL")),
    (["--prometheus", "http://127.0.0.1:9", "--run-id", "a"], ("--run-id", "two or more runs")),
    (["--prometheus", "http://127.0.0.1:9"], ("--run-id", "pass --run-id once per run")),
    (["--prometheus", "http://127.0.0.1:9", "--run-id", "a", "--run-id", "b", "--world-sizes", "1,2"],
     ("--world-sizes", "local mode only")),
    (["--lookback", "a week"], ("--lookback", "not a Prometheus duration like 30s, 15m")),
    (["--lookback", "0s"], ("--lookback", "looks back no time")),
    (["--out", "/proc/no/such/dir"], ("--out", "cannot write to", "writable directory")),
    (["--frobnicate"], ("unrecognized arguments: --frobnicate", "trainer flags go after --")),
])
def test_bad_flags_are_one_line_errors(args, needles, subprocess_env, tmp_path: Path) -> None:
    proc = run_cli(args, subprocess_env, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]
    assert not (tmp_path / "scaling-report" / "report.json").exists()


def test_unreachable_prometheus_is_a_one_line_error(subprocess_env, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    proc = run_cli(["--prometheus", url, "--run-id", "a", "--run-id", "b", "--out", str(tmp_path / "r")],
                   subprocess_env, tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert f"--prometheus: cannot reach {url}" in proc.stderr and "check the URL" in proc.stderr


def test_world_sizes_parse_sorted_without_repeats() -> None:
    assert world_sizes("4,1,2,2") == (1, 2, 4)
    assert world_sizes("1 2  8") == (1, 2, 8)


def test_trainer_flags_after_the_separator_reach_the_trainer() -> None:
    ns, trainer_args = parse(["--world-sizes", "1,2", "--", "--lr", "3e-4", "--sharding-strategy", "NO_SHARD"])
    assert ns.world_sizes == (1, 2) and trainer_args == ["--lr", "3e-4", "--sharding-strategy", "NO_SHARD"]


def test_weak_and_strong_batches() -> None:
    weak = LocalPlan(world_sizes=(1, 2, 4), batch_size=8)
    assert [weak.per_rank_batch(n) for n in (1, 2, 4)] == [8, 8, 8]
    strong = LocalPlan(world_sizes=(2, 4, 8), batch_size=8, strong=True)  # global 16, kept at every size
    assert [strong.per_rank_batch(n) for n in (2, 4, 8)] == [8, 4, 2]
    argv = strong.trainer_argv(4, "rid", Path("/tmp/x.jsonl"))
    assert argv[argv.index("--batch-size") + 1] == "4" and argv[argv.index("--log-every") + 1] == "1"
