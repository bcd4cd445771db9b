"""``observe.supervise`` with real processes: a wrapper passes its first stop signal on once, waits, and
kills what its child leaves running. The wrapper is a child script too (handlers are process-wide)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from observe.supervise import running, shell_status, start_time

#: The supervised child: counts the stop signals it gets, starts a grandchild in its own session
#: that ignores SIGTERM (as a stuck rank would), prints both pids, exits 143 a moment after its first signal.
CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    got = []
    signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    signal.signal(signal.SIGINT, lambda s, f: got.append(s))
    stuck = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"],
                             start_new_session=True)
    print(os.getpid(), stuck.pid, flush=True)
    while not got:
        time.sleep(0.01)
    time.sleep(0.3)  # later signals to the wrapper would land here
    print("signals", len(got), got[0], flush=True)
    os._exit(128 + got[0])
""")

WRAPPER = textwrap.dedent("""
    import sys
    from observe import stopping
    from observe.supervise import Supervised
    stop = stopping.install()
    child = Supervised(stop, orphan_grace=0.5)
    child.start([sys.executable, "-c", sys.argv[1]])
    status = child.wait()
    stop.ignore_further()
    print("status", status, "forwarded", child.forwarded, flush=True)
    sys.exit(status)
""")


def test_the_first_signal_is_passed_on_once_and_the_stuck_grandchild_is_killed(tmp_path: Path) -> None:
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER, CHILD], stdout=subprocess.PIPE, text=True)
    child_pid, stuck_pid = map(int, wrapper.stdout.readline().split())
    stuck_started = start_time(stuck_pid)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGTERM):  # a burst at the wrapper
        wrapper.send_signal(signum)
        time.sleep(0.01)
    out = wrapper.communicate(timeout=30)[0]
    assert "signals 1 2" in out  # the child saw exactly one signal: the first, SIGINT
    assert "status 130 forwarded 2" in out
    assert wrapper.returncode == 130
    assert not running(stuck_pid, stuck_started)  # SIGKILLed 0.5 s after the child exited


def test_shell_status() -> None:
    assert shell_status(0) == 0 and shell_status(143) == 143 and shell_status(-9) == 137 and shell_status(-15) == 143
