"""Faulty runs for the hang and straggler tests: a user's unchanged script under ``fsdp-observe run``
(or any command), its ranks' ports, and ``fsdp-observe diagnose --json`` asked until it says what
the test expects.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from observe.ports import free_port, free_port_block
from tests.support.instrumented import Instrumented, instrument_env, start

SCRIPTS = Path(__file__).resolve().parents[1] / "e2e" / "scripts"
FAULTY = SCRIPTS / "faulty_fsdp2.py"
#: The stall watchdog's floor in these tests (production: 30 s).
STALL_SECONDS = 4
DIAGNOSE = [sys.executable, "-m", "observe.cli", "diagnose"]


@dataclass
class FaultyRun:
    """A started run: its process (session), the ranks' ports, its log."""

    run: Instrumented
    ports: list[int]

    def output(self) -> str:
        """What the run printed so far."""
        return self.run.output()

    def fault_started(self, kind: str) -> float | None:
        """Unix time the script printed ``FAULT <kind>``, or ``None`` before it."""
        m = re.search(rf"FAULT {kind} rank \d+ step \d+ at ([0-9.]+)", self.output())
        return float(m.group(1)) if m else None

    def stop(self) -> None:
        """End the run's whole session."""
        self.run.stop()


def start_faulty(
    tmp: Path,
    env: dict[str, str],
    fault: str,
    nproc: int = 2,
    *script_args: str,
    command: list[str] | None = None,
    stall_seconds: float = STALL_SECONDS,
) -> FaultyRun:
    """``fsdp-observe run -- torchrun --nproc-per-node NPROC faulty_fsdp2.py --fault FAULT ...``, the
    stall watchdog's floor at ``stall_seconds``."""
    base = free_port_block(nproc)
    environ = instrument_env(
        env,
        base,
        linger=600,
        log_every=2,
        FSDP_OBSERVE_STALL_SECONDS=f"{stall_seconds:g}",
        FSDP_OBSERVE_DUMP_DIR=str(tmp / "dumps"),
    )
    environ.pop("FSDP_OBSERVE_INSTRUMENT")  # fsdp-observe run sets it
    cmd = command or [
        sys.executable,
        "-m",
        "observe.cli",
        "run",
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        "--master-addr=127.0.0.1",
        f"--master-port={free_port()}",
        str(FAULTY),
        "--fault",
        fault,
        *script_args,
    ]
    return FaultyRun(start(cmd, environ, tmp / f"{fault}.log", cwd=tmp), [base + i for i in range(nproc)])


def diagnose(ports: list[int], *extra: str, timeout: float = 60) -> dict:
    """``fsdp-observe diagnose --trainer 127.0.0.1:PORT ... --json`` (as a user runs it), parsed."""
    done = subprocess.run(
        [*DIAGNOSE, "--trainer", *(f"127.0.0.1:{p}" for p in ports), "--json", *extra],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return json.loads(done.stdout)


def wait_verdict(
    run: FaultyRun, want: Callable[[dict], bool], timeout: float = 150, ports: list[int] | None = None
) -> tuple[dict, float]:
    """Ask ``diagnose`` every second until ``want(verdict)``; return it and when it came (Unix time).

    Raises:
        AssertionError: the run exited, or ``timeout`` passed (with the last verdict and the log).
    """
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = diagnose(ports or run.ports)
        if want(last):
            return last, time.time()
        if run.run.proc.poll() is not None:
            break
        time.sleep(1.0)
    raise AssertionError(f"no such verdict; last: {json.dumps(last, indent=1)[:3000]}\n{run.output()[-3000:]}")
