"""``observe.stopping`` in real child processes (so handlers and the wakeup descriptor never touch pytest).

The first case makes the deadlock the agent once had deterministic: the main thread holds the lock of the
``Event`` a waiter uses when the signals arrive. A handler that calls ``Event.set()`` (as the
agent's and the trainer's did) blocks on that lock for ever; this one must not.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time


def run(body: str, timeout: float = 20) -> subprocess.CompletedProcess:
    code = "import os, signal, sys, threading, time\nfrom observe import stopping\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def assert_ok(body: str) -> None:
    """Run ``body`` (which ends by printing ``ok``) in a child; it must exit 0 having printed only that."""
    proc = run(body)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_signals_that_arrive_while_the_main_thread_holds_the_events_lock_are_recorded_without_blocking() -> None:
    assert_ok("""
        stop = stopping.install()
        with stop.requested._cond:                # what Event.wait() holds between bytecodes
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, on this thread
            os.kill(os.getpid(), signal.SIGINT)   # and again, nested in a burst
            for _ in range(1000):                 # a few bytecodes for the handlers to run on
                pass
            assert stop.count == 2 and stop.signum == signal.SIGTERM, (stop.count, stop.signum)
        assert stop.wait(5), "the watch thread never set requested"
        assert stop.name == "SIGTERM" and stop.seconds_since() < 5
        print("ok", flush=True)
    """)


def test_listeners_run_once_on_an_ordinary_thread_and_late_ones_at_once() -> None:
    assert_ok("""
        stop = stopping.install()
        seen = []
        stop.add_listener(lambda s: seen.append((s, threading.current_thread().name)))
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        time.sleep(0.2)
        assert seen == [(signal.SIGINT, "stop-watch")], seen
        stop.add_listener(lambda s: seen.append((s, threading.current_thread().name)))
        assert seen[1] == (signal.SIGINT, "MainThread"), seen
        assert stopping.install() is stop
        print("ok", flush=True)
    """)


def test_exit_after_ends_a_process_whose_main_thread_is_stuck_when_the_grace_period_runs_out() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import os
        from observe import stopping
        stop = stopping.install()
        stop.exit_after(0.5, message=lambda s: f"still here after {stopping.signal_name(s)}")
        print("ready", flush=True)
        r, w = os.pipe()
        os.read(r, 1)  # blocks for ever, as a rank stuck in a collective would
    """),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    signalled = time.monotonic()
    proc.terminate()
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert 0.5 <= time.monotonic() - signalled < 5
    assert err.strip() == "still here after SIGTERM"


def test_a_late_signal_does_not_kill_a_process_that_is_already_stopping() -> None:
    assert_ok("""
        stop = stopping.install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        stop.ignore_further()
        os.kill(os.getpid(), signal.SIGTERM)  # ignored now, and as the interpreter exits
        os.kill(os.getpid(), signal.SIGINT)
        print("ok", flush=True)
    """)


def test_a_signal_before_install_is_pythons_default_and_after_uninstall_too() -> None:
    proc = run("""
        stop = stopping.install()
        stop.uninstall()
        again = stopping.install()                # uninstall forgot it: a fresh one is installed
        assert again is not stop
        again.uninstall()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
    """)
    assert proc.returncode == -signal.SIGINT and "KeyboardInterrupt" in proc.stderr


def test_exit_status_and_names() -> None:
    from observe import stopping

    assert stopping.exit_status(15) == 143 and stopping.exit_status(2) == 130
    assert stopping.signal_name(15) == "SIGTERM" and stopping.signal_name(200) == "signal 200"
