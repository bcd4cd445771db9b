"""``fsdp-observe scaling`` user mistakes: one line naming the flag and the fix, exit status 2."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from observe.cli.scaling import parse
from observe.scaling.local import LocalPlan, world_sizes
from tests.support.cli import assert_one_line_error, run_cli


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


@pytest.mark.parametrize(
    "args, needles",
    [
        (["--world-sizes", "0"], ("--world-sizes", "0 is not a number of ranks", "1,2,4")),
        (
            ["--world-sizes", "1,two"],
            ("--world-sizes", "'1,two' is not a list of whole numbers", "--world-sizes 1,2,4"),
        ),
        (["--world-sizes", "1.5,2"], ("--world-sizes", "not a list of whole numbers")),
        (["--world-sizes=-1,2"], ("--world-sizes", "not a list of whole numbers")),
        (["--world-sizes", "-1,2"], ("--world-sizes", "expected one argument", "--world-sizes=VALUE")),
        (["--world-sizes", "4"], ("--world-sizes", "two or more sizes")),
        (["--steps", "ten"], ("--steps", "not a positive whole number", "--steps 1 or more")),
        (["--warmup-steps", "40"], ("--warmup-steps", "leaves none of the 40 steps")),
        (["--strong", "--world-sizes", "1,3"], ("--batch-size", "does not split evenly over 3 ranks")),
        (["--preset", "llama9-1t"], ("--preset", "unknown preset")),
        (["--run-id", "a"], ("--run-id", "pass --prometheus URL")),
        (
            ["--prometheus", "ftp://localhost:9090", "--run-id", "a", "--run-id", "b"],
            ("--prometheus", "not an http(s) URL"),
        ),
        (["--prometheus", "http://127.0.0.1:9", "--run-id", "a"], ("--run-id", "two or more runs")),
        (["--prometheus", "http://127.0.0.1:9"], ("--run-id", "pass --run-id once per run")),
        (
            ["--prometheus", "http://127.0.0.1:9", "--run-id", "a", "--run-id", "b", "--world-sizes", "1,2"],
            ("--world-sizes", "local mode only"),
        ),
        (["--lookback", "a week"], ("--lookback", "not a Prometheus duration like 30s, 15m")),
        (["--lookback", "0s"], ("--lookback", "looks back no time")),
        (["--out", "/proc/no/such/dir"], ("--out", "cannot write to", "writable directory")),
        (["--frobnicate"], ("unrecognized arguments: --frobnicate", "trainer flags go after --")),
    ],
)
def test_bad_flags_are_one_line_errors(args, needles, capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(run_cli(["scaling", *args], capsys), *needles)
    assert not (tmp_path / "scaling-report" / "report.json").exists()


def test_a_bad_omp_num_threads_is_one_line_naming_it(capsys, tmp_path: Path, monkeypatch) -> None:
    """``--threads-per-rank`` takes its default from ``$OMP_NUM_THREADS``: a bad value is named."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    assert_one_line_error(
        run_cli(["scaling"], capsys),
        "$OMP_NUM_THREADS: 'many' is not a positive whole number",
        "--threads-per-rank 1 or more",
    )


def test_unreachable_prometheus_is_a_one_line_error(capsys, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    result = run_cli(
        ["scaling", "--prometheus", url, "--run-id", "a", "--run-id", "b", "--out", str(tmp_path / "r")], capsys
    )
    assert_one_line_error(result, f"--prometheus: cannot reach {url}", "check the URL")


def test_prometheus_as_host_port_is_taken_as_http(capsys, tmp_path: Path) -> None:
    """As ``top --prometheus`` takes it (``localhost:9401`` was once refused as 'not an http(s) URL')."""
    host_port = f"127.0.0.1:{closed_port()}"
    result = run_cli(
        ["scaling", "--prometheus", host_port, "--run-id", "a", "--run-id", "b", "--out", str(tmp_path / "r")], capsys
    )
    assert_one_line_error(result, f"--prometheus: cannot reach http://{host_port}", "check the URL")


def test_world_sizes_parse_sorted_without_repeats() -> None:
    assert world_sizes("4,1,2,2") == (1, 2, 4)
    assert world_sizes("1 2  8") == (1, 2, 8)


@pytest.mark.parametrize(
    "argv", [["--world-sizes", "1", "2"], ["--world-sizes", "1", "2", "--steps", "6"], ["--world-sizes=1", "2"]]
)
def test_world_sizes_as_separate_words_are_taken(argv, monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _, plan = parse([*argv, "--", "--grad-clip", "1"])
    assert plan.world_sizes == (1, 2) and plan.trainer_args == ("--grad-clip", "1")


def test_trainer_flags_after_the_separator_reach_the_trainer(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _, plan = parse(
        [
            "--world-sizes",
            "1,2",
            "--seq-len",
            "64",
            "--",
            "--lr",
            "3e-4",
            "--sharding-strategy",
            "NO_SHARD",
            "--seq-len",
            "32",
        ]
    )
    assert plan.world_sizes == (1, 2) and plan.trainer_args == (
        "--lr",
        "3e-4",
        "--sharding-strategy",
        "NO_SHARD",
        "--seq-len",
        "32",
    )
    assert (plan.steps, plan.batch_size, plan.threads_per_rank) == (LocalPlan.steps, LocalPlan.batch_size, 1)
    cfg = plan.trainer_config(2, "rid", Path("/tmp/x.jsonl"))
    assert (cfg.optim.lr, cfg.parallel.sharding_strategy) == (3e-4, "NO_SHARD")
    assert cfg.data.seq_len == 32  # a trainer flag after -- wins, as on the trainer's own command line


def test_threads_per_rank_defaults_to_omp_num_threads(monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert parse([])[1].threads_per_rank == 3
    assert parse(["--threads-per-rank", "2"])[1].threads_per_rank == 2


def test_weak_and_strong_batches() -> None:
    weak = LocalPlan(world_sizes=(1, 2, 4), batch_size=8)
    assert [weak.per_rank_batch(n) for n in (1, 2, 4)] == [8, 8, 8]
    strong = LocalPlan(world_sizes=(2, 4, 8), batch_size=8, strong=True)  # global 16, kept at every size
    assert [strong.per_rank_batch(n) for n in (2, 4, 8)] == [8, 4, 2]
    cfg = strong.trainer_config(4, "rid", Path("/tmp/x.jsonl"))
    assert (cfg.data.batch_size, cfg.metrics.log_every, cfg.metrics.run_id) == (4, 1, "rid")
    argv = cfg.to_argv()
    assert argv[argv.index("--batch-size") + 1] == "4" and argv[argv.index("--log-every") + 1] == "1"
