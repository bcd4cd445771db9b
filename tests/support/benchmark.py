"""A benchmark run as the README runs it: ``python -m benchmarks.NAME`` from the checkout's root."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_benchmark(
    name: str, *args: str, env: Mapping[str, str] | None = None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks.<name>`` with ``args`` to its end (its output captured as text); raises
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *args],
        cwd=REPO,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
