"""Shared fixtures: free TCP ports and a clean environment for subprocesses."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def free_port_block(count: int) -> int:
    """A base port such that ``base .. base+count-1`` are free right now on 127.0.0.1."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count >= 65535:
            continue
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free block of ports")


@pytest.fixture
def port_block():
    """A function returning a base port with ``n`` consecutive free ports."""
    return free_port_block


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child processes: this interpreter's bin first, one thread per rank."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("FSDP_OBSERVE_RUN_ID", None)
    return env
