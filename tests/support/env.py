"""The one environment for child processes of the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def child_env() -> dict[str, str]:
    """A fresh copy of this environment for a child process: this interpreter's bin folder first
    on PATH (its console scripts), one OpenMP thread per rank, unbuffered output, and no
    ``FSDP_OBSERVE_RUN_ID`` inherited from the shell."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("FSDP_OBSERVE_RUN_ID", None)
    return env
