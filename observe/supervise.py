"""A wrapper's child (torchrun under ``fsdp-observe train`` or ``demo``): pass the stop on, wait, no orphans.

The child runs in its own session, so a Ctrl-C at the terminal reaches only the wrapper, which
passes the *first* stop signal on, once, and ignores the rest: torchrun handles a second signal
by abandoning its wait for the ranks (they would run on without it). The exit status is the
child's (``128 + N`` when a signal N killed it), so a shell, systemd or a container runtime sees
the run's status, not the wrapper's.

torchrun starts each rank in a session of its own, so a signal to torchrun's process group does
not reach them; when the wrapper passes a signal on it notes torchrun's children (the ranks, from
``/proc``), and once torchrun has exited it waits ``orphan_grace`` seconds for any of them still
running, then SIGKILLs what is left. Standard library only; Linux (``/proc``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from observe import stopping


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children (``/proc/PID/task/*/children``), ``[]`` when it is gone."""
    kids: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return kids
    for task in tasks:
        try:
            kids += [int(k) for k in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return kids


def start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/PID/stat`` (clock ticks after boot), which tells a pid's reuse apart; ``None`` when gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def running(pid: int, started: int | None) -> bool:
    """Whether ``pid`` is still the process that started at ``started`` and has not exited (a zombie has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X") and start_time(pid) == started


def catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` in ``/proc/PID/status``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def wait_until_caught(pids: list[int], signum: int, timeout: float) -> None:
    """Wait up to ``timeout`` seconds until every process of ``pids`` still alive handles ``signum``
    (a process just started is still in Python's start-up, where the signal's default applies)."""
    deadline = time.monotonic() + timeout
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        pending = [pid for pid in pending if running(pid, start_time(pid)) and not catches(pid, signum)]
        if pending:
            time.sleep(0.01)


def shell_status(returncode: int) -> int:
    """``Popen.returncode`` as a shell reports it: ``128 + N`` for death by signal N."""
    return stopping.exit_status(-returncode) if returncode < 0 else returncode


class Supervised:
    """One child process and what the wrapper's stop signal does to it.

    Args:
        stop: the wrapper's ``observe.stopping.StopSignals`` (its first signal is passed on).
        orphan_grace: seconds to wait, after the child exited, for its children still running
            before SIGKILLing them.

    Attributes:
        proc: the child, once started.
        forwarded: the signal passed on to it (``None``: none yet).
    """

    def __init__(self, stop: stopping.StopSignals, orphan_grace: float = 5.0) -> None:
        self.stop = stop
        self.orphan_grace = orphan_grace
        self.proc: subprocess.Popen | None = None
        self.forwarded: int | None = None
        self._grandchildren: list[tuple[int, int | None]] = []
        self._lock = threading.Lock()  # ordinary threads only (the stop-watch thread and the caller's)
        stop.add_listener(self.send)

    def start(self, cmd: list[str], **popen: object) -> subprocess.Popen:
        """Start ``cmd`` in a new session (``subprocess.Popen`` keywords in ``popen``); a stop signal
        that came before is passed on at once."""
        with self._lock:
            self.proc = subprocess.Popen(cmd, start_new_session=True, **popen)  # type: ignore[call-overload]
        if self.stop.signum is not None:
            self.send(self.stop.signum)
        return self.proc

    def send(self, signum: int) -> None:
        """Pass ``signum`` on to the child, the first time only (later calls do nothing)."""
        with self._lock:
            proc = self.proc
            if proc is None or self.forwarded is not None or proc.returncode is not None:
                return
            self.forwarded = signum
            self._grandchildren = [(pid, start_time(pid)) for pid in children(proc.pid)]
            try:
                os.kill(proc.pid, signum)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        """Wait for the child, then for its children still running (SIGKILL after ``orphan_grace``);
        return the child's status as a shell reports it."""
        assert self.proc is not None, "start() first"
        status = self.proc.wait()
        with self._lock:
            left = [(pid, started) for pid, started in self._grandchildren if running(pid, started)]
        deadline = time.monotonic() + self.orphan_grace
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = [(pid, started) for pid, started in left if running(pid, started)]
        for pid, _ in left:
            try:
                os.killpg(pid, signal.SIGKILL)  # torchrun makes each rank the leader of its own session
            except ProcessLookupError:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return shell_status(status)
