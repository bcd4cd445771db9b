"""``fsdp-observe run -- torchrun …`` ends as ``fsdp-observe-torchrun`` does: a stop is quiet and
its status is the ranks' (143 after SIGTERM, 130 after SIGINT); a rank that dies gives its own
status and one line naming it. Before: status 1 and torchrun's tracebacks for a stop, and for a
killed rank 1 a 28-line ChildFailedError traceback whose "root cause" was rank 0.

Real processes: the user's script is a two-rank gloo loop (tests/e2e/scripts/allreduce_loop.py)
under the real torchrun that ``run`` finds on PATH.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.own_training import SCRIPTS
from tests.support.processes import wait_for
from tests.support.trainer_runs import rank_pids, stop_group

TORCHRUN_TRACEBACK = ("SignalException", "ChildFailedError", "torch/distributed/run.py", "elastic/agent")


def start(tmp_path: Path, env: dict[str, str], port_base: int) -> tuple[subprocess.Popen, Path]:
    out = tmp_path / "run.log"
    bin_dir = str(Path(sys.executable).parent)
    env = {**env, "PATH": os.pathsep.join([bin_dir, env.get("PATH", "")])}
    with open(out, "wb") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "observe.cli", "run", "--port-base", str(port_base), "--linger", "0"]
            + ["--address", "127.0.0.1", "--", "torchrun"]
            + ["--standalone", "--nproc-per-node", "2", str(SCRIPTS / "allreduce_loop.py")],
            cwd=tmp_path,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, out


def running(proc: subprocess.Popen, out: Path) -> dict[int, int]:
    wait_for(lambda: b"rank 1 step 3" in out.read_bytes(), timeout=180, what="both ranks stepping")
    return wait_for(lambda: len(pids := rank_pids(proc.pid)) == 2 and pids, timeout=30, what="the ranks' pids")


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_is_quiet_with_the_ranks_status(
    tmp_path: Path, subprocess_env, port_block, signum: int, status: int
) -> None:
    proc, out = start(tmp_path, subprocess_env, port_block(2))
    try:
        ranks = running(proc, out)
        proc.send_signal(signum)
        assert proc.wait(timeout=120) == status, out.read_text()[-3000:]
    finally:
        stop_group(proc)
    text = out.read_text()
    assert not any(mark in text for mark in TORCHRUN_TRACEBACK), text[-3000:]
    assert all(not Path(f"/proc/{pid}").exists() for pid in ranks.values())


def test_a_killed_rank_gives_its_status_and_one_line_naming_it(tmp_path: Path, subprocess_env, port_block) -> None:
    proc, out = start(tmp_path, subprocess_env, port_block(2))
    try:
        ranks = running(proc, out)
        os.kill(ranks[1], signal.SIGKILL)
        assert proc.wait(timeout=120) == 137, out.read_text()[-3000:]
    finally:
        stop_group(proc)
    text = out.read_text()
    assert not any(mark in text for mark in TORCHRUN_TRACEBACK), text[-3000:]
    (line,) = [x for x in text.splitlines() if x.startswith("torchrun: rank ")]
    assert line.startswith("torchrun: rank 1 (local rank 1) was killed by SIGKILL"), line
