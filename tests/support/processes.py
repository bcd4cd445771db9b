"""Real processes with chosen command lines, and a real agent process, for tests."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def spawn_sleeper(sleeper: Path, argv: list[str | bytes]) -> subprocess.Popen:
    """Start the sleeper with exactly ``argv`` as its ``/proc/<pid>/cmdline`` (bytes allowed).

    Returns once that command line is readable: ``Popen`` returns when exec has closed its
    descriptors, a moment before the kernel sets up the new arguments (read then, they are empty).
    """
    proc = subprocess.Popen(
        argv, executable=str(sleeper), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes(), timeout=10, what=f"pid {proc.pid}'s arguments")
    return proc


def wait_for(check: Callable[[], T], timeout: float = 15.0, what: str = "condition", interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; return it, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class AgentProcess:
    """``python -m observe.cli agent`` as a child process on a free port, read over real HTTP.

    Args:
        args: extra agent flags.
        env: the child's environment.
        log_dir: where its stderr goes (``stderr`` reads it back).
    """

    URL = re.compile(r"(http://\S+)/metrics")

    def __init__(self, args: list[str], env: dict[str, str] | None, log_dir: Path) -> None:
        self.stderr_path = log_dir / f"agent-{os.getpid()}-{time.monotonic_ns()}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "observe.cli", "agent", "--port", "0", "--address", "127.0.0.1", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            stdin=subprocess.DEVNULL,
        )
        lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.proc.stdout], daemon=True).start()
        try:
            first = lines.get(timeout=30).decode()
        except queue.Empty:
            self.stop()
            raise AssertionError(f"agent printed no URL within 30 s; stderr: {self.stderr}") from None
        match = self.URL.search(first)
        assert match, f"unexpected first line {first!r}; stderr: {self.stderr}"
        self.base = match.group(1)
        self.client = httpx.Client(base_url=self.base, timeout=10)

    def get(self, path: str) -> httpx.Response:
        """GET ``path`` from the agent."""
        return self.client.get(path)

    def metrics(self) -> str:
        """The ``/metrics`` text."""
        return self.get("/metrics").raise_for_status().text

    def snapshot(self) -> dict:
        """The ``/snapshot`` JSON."""
        return self.get("/snapshot").raise_for_status().json()

    @property
    def stderr(self) -> str:
        """What the agent logged so far."""
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then wait; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "client"):
            self.client.close()
        self._stderr.close()
        return self.proc.returncode
