"""Stop-signal stress: signal a real process at a random moment (one signal or a burst) and time its exit.

Used by the stress tests (``tests/e2e/test_stop_*.py``) and the longer soak
(``benchmarks/signal_soak.py``). A moment is counted from when the process's SIGTERM handler is
in place (``SigCgt`` in ``/proc/PID/status``), since a signal before that meets Python's default
action whatever the program does. A process that has not exited ``hang_seconds`` after the
first signal is counted as hung (deadlocked) and SIGKILLed.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from observe.supervise import catches
from tests.support.processes import REPO

#: Kernel-log lines (XIDs among them) from the field cases.
KERNEL_LOG_CASE = REPO / "tests" / "cases" / "xid" / "kernel-log.txt"
#: Agent scenario -> (stand-in NVML settings, ``fake_nvml.c``; longest delay from "handler in place" to the first signal).
AGENT_SCENARIOS: dict[str, tuple[str, float]] = {
    "starting": ("gpus 4", 0.15),
    "collecting": ("gpus 4", 1.0),
    "slow-nvml": ("gpus 2\nsleep_ms 300", 1.5),
    "hung-nvml": ("gpus 2\nsleep_ms 5000", 0.8),
    "serving": ("gpus 4", 1.0),  # two keep-alive scrapers and a half-sent request on it
}


@dataclass(frozen=True)
class Shot:
    """How one iteration signals its process.

    Attributes:
        delay: seconds from "handler in place" to the first signal.
        signals: the signals sent, in order.
        gaps: seconds between consecutive signals (``len(signals) - 1`` of them).
        scenario: a label for the report (what the process was doing).
    """

    delay: float
    signals: tuple[int, ...]
    gaps: tuple[float, ...]
    scenario: str


def random_shot(
    rng: random.Random,
    scenario: str,
    max_delay: float,
    kinds: tuple[int, ...],
    max_burst: int = 4,
    max_gap: float = 0.03,
) -> Shot:
    """A random ``Shot``: delay uniform in [0, ``max_delay``]; half the time one signal, otherwise a
    burst of 2..``max_burst`` signals of random ``kinds`` a random 0..``max_gap`` s apart."""
    n = 1 if rng.random() < 0.5 else rng.randint(2, max_burst)
    return Shot(
        delay=rng.uniform(0, max_delay),
        signals=tuple(rng.choice(kinds) for _ in range(n)),
        gaps=tuple(rng.uniform(0, max_gap) for _ in range(n - 1)),
        scenario=scenario,
    )


@dataclass(frozen=True)
class Outcome:
    """What one iteration saw.

    Attributes:
        shot: the plan.
        status: the exit status (``None`` when hung and killed; negative: killed by that signal).
        seconds: first signal to exit (``None`` when hung).
        note: anything odd (the process died before its handler was in place, its last stderr line).
    """

    shot: Shot
    status: int | None
    seconds: float | None
    note: str = ""

    @property
    def hung(self) -> bool:
        """The process did not exit within ``hang_seconds`` of the first signal."""
        return self.status is None


def fire(
    proc: subprocess.Popen,
    shot: Shot,
    hang_seconds: float,
    ready_timeout: float = 30.0,
    ready: Callable[[], bool] | None = None,
) -> Outcome:
    """Wait until ``proc`` catches SIGTERM (and ``ready()``, if given, is true), then signal it per
    ``shot`` and wait for it to exit; SIGKILL it when it is still there ``hang_seconds`` after the
    first signal."""
    deadline = time.monotonic() + ready_timeout
    while not (catches(proc.pid, signal.SIGTERM) and (ready is None or ready())):
        if proc.poll() is not None:
            return Outcome(shot, proc.returncode, 0.0, "exited before its handler was in place")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return Outcome(shot, None, None, f"no SIGTERM handler within {ready_timeout:g} s")
        time.sleep(0.005)
    time.sleep(shot.delay)
    first = time.monotonic()
    for i, signum in enumerate(shot.signals):
        if proc.poll() is not None:
            break
        proc.send_signal(signum)
        if i < len(shot.gaps):
            time.sleep(shot.gaps[i])
    try:
        status = proc.wait(timeout=max(0.0, first + hang_seconds - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return Outcome(shot, None, None, "hung")
    return Outcome(shot, status, time.monotonic() - first)


@dataclass
class Tally:
    """Outcomes of a stress loop, and the table the tests print.

    Args:
        grace: the exit deadline a run must meet (seconds from its first signal).
        ok_status: the exit statuses that count as a clean stop.
    """

    grace: float
    ok_status: tuple[int, ...] = (0,)
    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        """Count one iteration."""
        self.outcomes.append(outcome)

    def verdict(self, o: Outcome) -> str:
        """``ok``, ``hung`` (did not exit: a deadlock), ``late`` (exited after ``grace``) or ``status N``."""
        if o.hung:
            return "hung"
        if o.status not in self.ok_status:
            return f"status {o.status}"
        return "late" if o.seconds is not None and o.seconds > self.grace else "ok"

    @property
    def failures(self) -> list[Outcome]:
        """The iterations that were not ``ok``."""
        return [o for o in self.outcomes if self.verdict(o) != "ok"]

    def table(self) -> str:
        """One line per scenario: iterations, verdict counts (and how many took the forced exit), slowest exit."""
        lines = [f"{'scenario':<22} {'runs':>5}  verdicts                              slowest exit"]
        for scenario in sorted({o.shot.scenario for o in self.outcomes}):
            mine = [o for o in self.outcomes if o.shot.scenario == scenario]
            verdicts = Counter(self.verdict(o) for o in mine)
            slowest = max((o.seconds for o in mine if o.seconds is not None), default=None)
            forced = sum("forced" in o.note for o in mine)
            text = ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())) + (
                f" ({forced} forced)" if forced else ""
            )
            lines.append(
                f"{scenario:<22} {len(mine):>5}  {text:<37} {'n/a' if slowest is None else f'{slowest:.2f} s'}"
            )
        total = Counter(self.verdict(o) for o in self.outcomes)
        lines.append(f"{'all':<22} {len(self.outcomes):>5}  " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())))
        return "\n".join(lines)


def no_such_process(pid: int) -> bool:
    """Whether ``pid`` is gone (or a zombie nobody reaped yet: it runs no code)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def kill_quietly(pid: int) -> None:
    """SIGKILL ``pid``'s process group and ``pid`` itself, ignoring what is already gone."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass


class KernelLogWriter:
    """Appends kernel-log lines (XIDs among them) to ``path`` every few ms; truncates it past 256 kB."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines = KERNEL_LOG_CASE.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> KernelLogWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(0.005):
            with open(self.path, "ab") as f:
                f.write(self.lines[i % len(self.lines)])
                if f.tell() > 256 * 1024:
                    f.truncate(0)
            i += 1


class Scrapers:
    """Two keep-alive scrapers of ``/metrics`` and ``/snapshot`` and one connection that sent half a request."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._scrape, args=(p,), daemon=True) for p in ("/metrics", "/snapshot")
        ]
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self._half = socket.create_connection((host, int(port)), timeout=5)
        self._half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        for t in self._threads:
            t.start()

    def _scrape(self, path: str) -> None:
        with httpx.Client(base_url=self.base, timeout=2) as client:
            while not self._stop.is_set():
                try:
                    client.get(path)
                except httpx.HTTPError:
                    return

    def close(self) -> None:
        self._stop.set()
        self._half.close()
        for t in self._threads:
            t.join(timeout=5)


def run_agent_once(
    shot: Shot, env: dict[str, str], kernel_log: Path, hang_seconds: float, repo: Path = REPO
) -> Outcome:
    """Start ``python -m observe.cli agent`` of ``repo`` (0.1 s collections, following ``kernel_log``),
    signal it per ``shot`` (scenario ``serving``: once scrapers are on it), return what happened
    (note ``forced`` when it took the forced exit, ``observe.cli.agent.FORCED_EXIT_SECONDS``)."""
    with tempfile.TemporaryFile() as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "observe.cli",
                "agent",
                "--port",
                "0",
                "--address",
                "127.0.0.1",
                "--interval",
                "0.1",
                "--kernel-log",
                str(kernel_log),
            ],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        url: list[str] = []
        threading.Thread(
            target=lambda: [
                url.append(line.decode().split("serving ")[-1].split("/metrics")[0])
                for line in proc.stdout
                if b"serving" in line
            ],
            daemon=True,
        ).start()
        scrapers = None
        try:
            if shot.scenario == "serving":

                def ready() -> bool:
                    nonlocal scrapers
                    if url and scrapers is None:
                        scrapers = Scrapers(url[0])
                    return scrapers is not None

                outcome = fire(proc, shot, hang_seconds=hang_seconds, ready=ready)
            else:
                outcome = fire(proc, shot, hang_seconds=hang_seconds)
        finally:
            if scrapers is not None:
                scrapers.close()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stderr.seek(0)
        if b"exiting now" in stderr.read():
            outcome = dataclasses.replace(outcome, note=(outcome.note + " forced").strip())
        return outcome


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), from ``/proc/PID/task/*/children``."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and everything it started, if it still runs: the demo, ``fsdp-observe train``
    and torchrun start their agent and ranks in sessions of their own, which outlive a killed parent
    (and would keep loading the machine for every test after)."""
    if proc.poll() is None:
        for pid in descendants(proc.pid) + [proc.pid]:
            kill_quietly(pid)
        proc.wait()


def run_to_end(args: list[str], timeout: float, **popen: object) -> subprocess.CompletedProcess:
    """``subprocess.run(args, timeout=timeout, **popen)``, except that on the timeout everything
    ``args`` started is killed with it (``kill_tree``) before ``subprocess.TimeoutExpired`` raises.
    ``popen`` takes ``subprocess.Popen``'s keywords (``capture_output=True`` too)."""
    if popen.pop("capture_output", False):
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with subprocess.Popen(args, **popen) as proc:  # type: ignore[call-overload]
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def rank_processes(pid: int) -> dict[int, tuple[int, int | None]]:
    """Global rank -> (pid, start time) of the trainer ranks below ``pid`` (their ``RANK=`` variable)."""
    from observe.supervise import start_time

    ranks = {}
    for child in descendants(pid):
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        is_rank = (b"trainer" in cmdline and b"-m" in cmdline) or any(  # python -m trainer, or the console script
            arg.endswith(b"/fsdp-observe-trainer") or arg == b"fsdp-observe-trainer" for arg in cmdline
        )
        if not is_rank:
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                ranks[int(item[5:])] = (child, start_time(child))
    return ranks
