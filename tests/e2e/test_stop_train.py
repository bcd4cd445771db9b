"""The trainer stops cleanly: SIGTERM/SIGINT at random moments, the ranks stop as one, nothing survives.

Real torchrun, real ranks (two gloo ranks on CPU, the tiny preset). Each iteration signals at a
random moment: while torch imports, during the rendezvous or model load, or mid-training (with
checkpoints every two steps, so a signal may land in a save), one signal or a burst of SIGTERM
and SIGINT a few milliseconds apart. Every run must

- exit within the ranks' grace period with ``128 + signal`` (143 SIGTERM, 130 SIGINT), the same
  status the JSON ``end`` record gives and the summary line prints;
- when the ranks agreed on a stop step: have saved that step with ``--checkpoint-dir`` and
  never say "saving" without one;
- print no traceback and none of torchrun's stop warnings;
- leave no rank process running (checked in ``/proc`` by pid and start time).

The first test signals the launcher as the kubelet signals a pod's main process; the second
signals ``fsdp-observe train``, as a container entrypoint, systemd or CI would. Each start costs
seconds, so the loops are short and bounded in time.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from observe.supervise import catches, running
from tests.support.processes import REPO
from tests.support.stop_stress import kill_tree, rank_processes
from tests.support.trainer_runs import FAST, events, read_log
from trainer.runspec.checkpoint_files import newest_complete, step_dir

pytestmark = pytest.mark.serial("signalled runs must stop within their grace period")

#: The ranks' --sigterm-grace: start-up on a loaded 2-core machine can take 10 s, and a signal during it
#: is acted on once the ranks are built (below torchrun's 30 s --shutdown-timeout).
GRACE = 20.0
#: Seconds torchrun and the wrapper may add to the ranks' grace period to exit themselves.
TEARDOWN = 6.0
ITERATIONS = 5
BUDGET_SECONDS = 150.0


def trainer_args(workdir: Path, corpus: Path, checkpoints: bool) -> list[str]:
    args = [
        "--data",
        str(corpus),
        "--steps",
        "400",
        *FAST,
        "--metrics",
        "off",
        "--sigterm-grace",
        str(GRACE),
        "--log-json",
        str(workdir / "run.jsonl"),
    ]
    return args + (["--checkpoint-dir", str(workdir / "ckpt"), "--checkpoint-every", "2"] if checkpoints else [])


def signal_once_or_in_a_burst(proc: subprocess.Popen, rng: random.Random) -> list[int]:
    sent = [rng.choice((signal.SIGTERM, signal.SIGINT)) for _ in range(1 if rng.random() < 0.5 else rng.randint(2, 3))]
    for signum in sent:
        proc.send_signal(signum)
        time.sleep(rng.uniform(0, 0.02))
    return sent


def one_stop(cmd: list[str], env: dict[str, str], workdir: Path, checkpoints: bool, rng: random.Random) -> str:
    """Start ``cmd``, signal it at a random moment, check everything; return a one-line summary."""
    phase = rng.choice(("starting", "training", "training"))
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    ranks: dict[int, tuple[int, int | None]] = {}
    try:
        deadline = time.monotonic() + 120
        while not catches(proc.pid, signal.SIGTERM):
            assert proc.poll() is None and time.monotonic() < deadline, "no SIGTERM handler"
            time.sleep(0.005)
        if phase == "starting":
            time.sleep(rng.uniform(0, 4.0))
        else:
            while not any(r["event"] == "window" and r["step"] >= 3 for r in read_log(workdir / "run.jsonl")):
                assert proc.poll() is None and time.monotonic() < deadline, "no step 3"
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 0.3))
        ranks = rank_processes(proc.pid)
        signalled = time.monotonic()
        sent = signal_once_or_in_a_burst(proc, rng)
        output = proc.communicate(timeout=GRACE + TEARDOWN + 10)[0]
        took = time.monotonic() - signalled
    finally:
        kill_tree(proc)  # after a failure: it and the ranks (each in a session of its own)
    context = (
        f"phase {phase}, sent {[signal.Signals(s).name for s in sent]}, status {proc.returncode}\n{output[-3000:]}"
    )
    assert proc.returncode in (130, 143) and proc.returncode - 128 in sent, context
    assert took < GRACE + TEARDOWN, f"took {took:.1f} s; {context}"
    for bad in ("Traceback", "SignalException", "death signal", "closing signal", "grace period"):
        assert bad not in output, context
    left = [rank for rank, (pid, started) in ranks.items() if running(pid, started)]
    assert not left, f"ranks {left} still running; {context}"
    records = read_log(workdir / "run.jsonl")
    stops, ends = events(records, "stop"), events(records, "end")
    if stops:  # rank 0 was far enough to report: the records and the summary agree with the shell
        name = signal.Signals(proc.returncode - 128).name
        assert stops[-1]["signal"] == name and ends[-1]["stopped_by"] == name, context
        assert ends[-1]["exit_status"] == proc.returncode, context
        assert f"stopped by {name}: step {stops[-1]['step']}" in output and f"exit status {proc.returncode}" in output
        if stops[-1]["loading"]:  # stopped before the first step: nothing to save, nothing saved
            assert newest_complete(workdir / "ckpt") is None and "nothing new to save" in output, context
        elif checkpoints:
            assert newest_complete(workdir / "ckpt") == step_dir(workdir / "ckpt", stops[-1]["step"]), context
        else:
            assert "saving" not in output and "nothing is saved" in output, context
    return f"{phase:<9} {'+'.join(signal.Signals(s).name for s in sent):<24} -> {proc.returncode} in {took:.1f} s"


def stress(make_cmd, tmp_path: Path, corpus: Path, env: dict[str, str]) -> list[str]:
    seed = int(os.environ.get("STOP_STRESS_SEED", time.time_ns() % 2**32))
    rng = random.Random(seed)
    lines = [f"seed {seed}"]
    started = time.monotonic()
    for i in range(ITERATIONS):
        if time.monotonic() - started > BUDGET_SECONDS:
            break
        workdir = tmp_path / f"run{i}"
        workdir.mkdir()
        checkpoints = i % 2 == 0
        lines.append(one_stop(make_cmd(trainer_args(workdir, corpus, checkpoints)), env, workdir, checkpoints, rng))
    print("\n".join(lines))
    assert len(lines) > 2, lines
    return lines


@pytest.fixture
def env(subprocess_env) -> dict[str, str]:
    return {**subprocess_env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def test_torchrun_ranks_stop_as_one_on_random_signals(corpus: Path, tmp_path: Path, env) -> None:
    stress(
        lambda args: [
            sys.executable,
            "-m",
            "trainer.launcher",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "trainer",
            *args,
        ],
        tmp_path,
        corpus,
        env,
    )


def test_fsdp_observe_train_passes_the_signal_on_and_leaves_no_rank_behind(corpus: Path, tmp_path: Path, env) -> None:
    stress(
        lambda args: [sys.executable, "-m", "observe.cli", "train", "--nproc-per-node", "2", *args],
        tmp_path,
        corpus,
        env,
    )
