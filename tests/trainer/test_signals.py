"""SIGTERM/SIGINT handling in a real process: the one-step-late vote and the grace-period deadline.

Each case runs a short script in a child process (world of one, gloo), so the signal handler
and the wakeup descriptor never touch the test runner.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

PRELUDE = textwrap.dedent("""
    import os, signal, socket, time
    import torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    from trainer.signals import StopRequest
""")


def run_script(body: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_the_vote_lands_one_step_after_the_signal(subprocess_env) -> None:
    proc = run_script(
        """
        stop = StopRequest(grace_seconds=30, rank=0)
        stop.install()
        assert stop.agree_now() == 0
        assert stop.poll() == 0               # step 1: nothing asked
        os.kill(os.getpid(), signal.SIGTERM)  # during step 2
        assert stop.requested
        assert stop.poll() == 0               # end of step 2 reads step 1's vote
        assert stop.poll() == signal.SIGTERM  # end of step 3 reads step 2's: every rank stops here, for SIGTERM
        assert stop.agree_now() == signal.SIGTERM
        started = time.monotonic()
        stop.sleep(60)                        # lingering ends at once once asked to stop
        assert time.monotonic() - started < 30
        stop.close()
        print("ok", flush=True)
        dist.destroy_process_group()
    """,
        subprocess_env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_watchdog_ends_a_stuck_process_when_the_grace_period_runs_out(subprocess_env) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PRELUDE
            + textwrap.dedent("""
        stop = StopRequest(grace_seconds=1.0, rank=3)
        stop.install()
        print("ready", flush=True)
        r, w = os.pipe()
        os.read(r, 1)  # blocks forever, as a rank stuck in a collective or a save would
    """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    assert proc.stdout.readline().strip() == "ready"
    signalled = time.monotonic()
    proc.terminate()  # SIGTERM
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert time.monotonic() - signalled >= 1.0
    assert "rank 3: SIGTERM grace period of 1 s ran out before the checkpoint finished" in err


def test_sigint_is_voted_like_sigterm_and_sigterm_wins_when_ranks_saw_both(subprocess_env) -> None:
    proc = run_script(
        """
        stop = StopRequest(grace_seconds=30, rank=0)
        stop.install()
        assert stop.poll() == 0
        os.kill(os.getpid(), signal.SIGINT)   # Ctrl-C: no KeyboardInterrupt, a vote
        assert stop.poll() == 0
        assert stop.poll() == signal.SIGINT
        assert stop.signals.count == 1 and stop.seconds_since_request() is not None
        stop.close()
        print("ok", flush=True)
        dist.destroy_process_group()
    """,
        subprocess_env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    both = run_script(
        """
        import torch
        stop = StopRequest(grace_seconds=30, rank=0)
        os.kill(os.getpid(), signal.SIGINT)
        # another rank saw SIGTERM: its ballot is 15, the MAX of the all-reduce
        ballot = torch.tensor([max(stop.signals.signum, signal.SIGTERM)], dtype=torch.int32)
        dist.all_reduce(ballot, op=dist.ReduceOp.MAX)
        assert int(ballot.item()) == signal.SIGTERM
        print("ok", flush=True)
        dist.destroy_process_group()
    """,
        subprocess_env,
    )
    assert both.returncode == 0, both.stderr


def test_the_deadline_message_does_not_promise_a_checkpoint_when_none_is_saved(subprocess_env) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            PRELUDE
            + textwrap.dedent("""
        stop = StopRequest(grace_seconds=0.5, rank=1, checkpointing=False)
        stop.install()
        print("ready", flush=True)
        r, w = os.pipe()
        os.read(r, 1)
    """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "rank 1: SIGINT grace period of 0.5 s ran out before the rank stopped; exiting now" in err
    assert "checkpoint" not in err and "Traceback" not in err
