"""The same verdicts through the Hugging Face Trainer (zero code: only ``FSDP_OBSERVE_INSTRUMENT=1``)
and through our own trainer, on real torchrun runs (gloo, CPU).

- Hugging Face Trainer with DDP, a user's data collator hanging on rank 1: DDP's reducer waits in
  C++, where fsdp-observe's wrapper cannot see it, so the verdict comes from the collective counts
  (Flight Recorder): rank 1 never issued the all-reduce rank 0 waits in, and it is in data loading.
- Our trainer with rank 1 stopped by SIGSTOP (a debugger, a frozen cgroup): it does not answer, and
  its pod's other rank says its process is stopped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.hangs import SCRIPTS, STALL_SECONDS, FaultyRun, diagnose, wait_verdict
from tests.support.instrumented import instrument_env, start
from tests.support.trainer_runs import FAST, rank_pids, torchrun_cmd

MINUTE = 60.0


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, session_env):
    folder = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run([sys.executable, str(SCRIPTS / "save_tiny_llama.py"), str(folder)], env=session_env, check=True)
    return folder


def _env(env: dict[str, str], tmp, base: int) -> dict[str, str]:
    return instrument_env(
        env,
        base,
        linger=600,
        log_every=2,
        FSDP_OBSERVE_STALL_SECONDS=str(STALL_SECONDS),
        FSDP_OBSERVE_DUMP_DIR=str(tmp / "dumps"),
    )


def test_hugging_face_trainer_with_a_hanging_collator_names_the_rank(
    tmp_path, subprocess_env, tiny_model, port_block
) -> None:
    base = port_block(2)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        str(SCRIPTS / "hf_faulty.py"), "--model-dir", str(tiny_model), "--out", str(tmp_path / "hf"),
    ]  # fmt: skip
    run = FaultyRun(
        start(cmd, _env(subprocess_env, tmp_path, base), tmp_path / "hf.log", cwd=tmp_path), [base, base + 1]
    )
    try:
        verdict, at = wait_verdict(run, lambda v: v["verdict"] == "hang" and v["culprit_ranks"] == [1])
        (c,) = verdict["culprits"]
        assert c["kind"] == "behind"
        assert c["waiting_ranks"] == [0]
        assert re.search(r"hf_faulty\.py:\d+ in collate: time\.sleep\(10\*\*6\)", c["where"]), c["where"]
        started = run.fault_started("hang")
        assert started is not None and at - started < MINUTE
    finally:
        run.stop()


def test_our_trainer_with_a_stopped_rank_names_it(tmp_path, subprocess_env, port_block) -> None:
    base = port_block(2)
    args = ["--steps", "400", *FAST, "--metrics-address", "127.0.0.1", "--metrics-port", str(base)]
    environ = _env(subprocess_env, tmp_path, base)
    environ.pop("FSDP_OBSERVE_INSTRUMENT")  # our trainer instruments itself
    run = FaultyRun(start(torchrun_cmd(args), environ, tmp_path / "trainer.log", cwd=tmp_path), [base, base + 1])
    stopped = None
    try:
        wait_verdict(run, lambda v: v["ranks_seen"] == 2 and v["verdict"] == "healthy")
        stopped = rank_pids(run.run.proc.pid)[1]  # the started process is torchrun itself
        os.kill(stopped, signal.SIGSTOP)
        verdict, _ = wait_verdict(run, lambda v: v["verdict"] == "hang" and v["culprit_ranks"] == [1], timeout=120)
        (c,) = verdict["culprits"]
        assert c["kind"] == "unresponsive"
        assert c["note"] == "its process is stopped (SIGSTOP, a debugger, a frozen cgroup)"
        assert c["waiting_ranks"] == [0]
        assert diagnose(run.ports)["culprits"][0]["op"]  # the collective rank 0 waits in, by name
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        run.stop()
