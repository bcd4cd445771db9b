"""Run a user's training command with instrumentation on and read every rank over real HTTP.

The command runs in its own session with a long linger (``FSDP_OBSERVE_LINGER_SECONDS``), so
once every rank reports the ``finished`` phase its final figures stay up for the assertions, the
TUI and Prometheus; ``stop`` ends the whole session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from observe import catalog as c
from observe import promtext
from observe.training import coverage


@dataclass
class Scrape:
    """One rank's ``/metrics``, parsed."""

    samples: list[promtext.Sample] = field(default_factory=list)

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the first sample ``name`` whose labels include ``labels`` (``None``: absent)."""
        for s in self.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
        return None

    def labels(self, name: str) -> dict[str, str]:
        """The labels of the first sample ``name`` (``{}`` when absent)."""
        return next((dict(s.labels) for s in self.samples if s.name == name), {})

    def names(self) -> set[str]:
        """Every sample name present."""
        return {s.name for s in self.samples}

    @property
    def phase(self) -> str | None:
        """The phase whose state series is 1."""
        return next((s.labels["phase"] for s in self.samples if s.name == c.TRAIN_PHASE.name and s.value == 1), None)


def scrape(port: int, timeout: float = 2.0) -> Scrape:
    """``GET http://127.0.0.1:PORT/metrics``, parsed.

    Raises:
        httpx.HTTPError: nothing answers there.
    """
    return Scrape(promtext.parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=timeout).text))


@dataclass
class Instrumented:
    """A started command and its log."""

    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        """What the command printed so far (stdout and stderr together)."""
        return self.log.read_text(errors="replace")

    def wait_finished(self, ports: list[int], timeout: float = 180) -> dict[int, Scrape]:
        """Poll every port until each rank is in phase ``finished``; return the last scrapes.

        Raises:
            AssertionError: the command exited first, or the timeout passed (with its output).
        """
        deadline, last = time.monotonic() + timeout, {}
        while time.monotonic() < deadline:
            for port in ports:
                try:
                    last[port] = scrape(port)
                except httpx.HTTPError:
                    continue
            if len(last) == len(ports) and all(s.phase == "finished" for s in last.values()):
                return last
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"exited with {self.proc.returncode} before every rank finished "
                    f"({ {p: s.phase for p, s in last.items()} }):\n{self.output()[-4000:]}"
                )
            time.sleep(0.2)
        raise AssertionError(f"no finish within {timeout:g} s: {sorted(last)}\n{self.output()[-4000:]}")

    def wait(self, timeout: float = 180) -> int:
        """Wait for the command to exit; its status."""
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        """SIGTERM the session (ends the linger at once), SIGKILL after 20 s."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass


def start(cmd: list[str], env: dict[str, str], log: Path, cwd: Path | None = None) -> Instrumented:
    """Start ``cmd`` in its own session, output to ``log``."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Instrumented(proc, log)


def instrument_env(
    env: dict[str, str], port_base: int, linger: float = 120, log_every: int = 1, **extra: str
) -> dict[str, str]:
    """``env`` with instrumentation on: the port base, a long linger, a log window."""
    return {
        **env,
        c.INSTRUMENT_ENV: "1",
        "FSDP_OBSERVE_PORT_BASE": str(port_base),
        "FSDP_OBSERVE_ADDRESS": "127.0.0.1",
        "FSDP_OBSERVE_LINGER_SECONDS": str(linger),
        "FSDP_OBSERVE_LOG_EVERY": str(log_every),
        **extra,
    }


def assert_as_the_table_says(scrape: Scrape, entry: str) -> None:
    """``scrape`` exports what the README's entry-point table (``observe.training.coverage``)
    promises for ``entry``, and nothing it marks absent (a histogram counts by its base name).

    Raises:
        AssertionError: naming each series promised but missing, or exported but marked absent.
    """
    present, absent = coverage.expected(entry)
    names = {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for n in scrape.names()}
    names |= scrape.names()
    missing, extra = sorted(present - names), sorted(absent & names)
    assert not missing and not extra, (
        f"{entry}: table says exported but absent {missing}; marked absent but exported {extra}"
    )
