"""A restarted agent counts no XID twice and its counters never go down (``--state-dir``).

Real agent processes (``python -m observe.cli agent``) on the stand-in NVML follow one kernel-log
file through a crash (SIGKILL, nothing flushed), lines logged while the agent is down, a rotation
and a clean restart. Without the state a counter that drops is a reset to Prometheus, and
``increase()`` makes the remaining XIDs new: a re-page. A control agent without ``--state-dir``
shows exactly that drop, on the same file.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_nvml import FakeNvml
from tests.support.processes import AgentProcess, wait_for

NODE = "gpu-node-1"


_STAMPS = itertools.count(100, 5)


def line(code: int, bus: str = "10") -> str:
    """One XID line, each dated 5 s after the previous one (distinct faults, not lines of one report)."""
    return f"[{next(_STAMPS)}.000000] NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=4242, name=python, made up\n"


def counts(agent: AgentProcess) -> dict[int, int]:
    """XID code -> the agent's count, summed over GPUs (from /metrics: what Prometheus scrapes)."""
    out: dict[int, int] = {}
    for text in agent.metrics().splitlines():
        if text.startswith("fsdp_gpu_xid_errors_total{"):
            code = int(text.split('xid="', 1)[1].split('"', 1)[0])
            out[code] = out.get(code, 0) + int(float(text.rsplit(" ", 1)[1]))
    return out


@pytest.fixture
def start(native, tmp_path: Path) -> Iterator:
    nvml = FakeNvml(native.fake_nvml, tmp_path / "scenario.conf")
    nvml.set("gpus 2")
    agents: list[AgentProcess] = []

    def run(log: Path, state: Path | None) -> AgentProcess:
        flags = ["--interval", "0.2", "--node", NODE, "--kernel-log", str(log)]
        agent = AgentProcess(flags + (["--state-dir", str(state)] if state else []), nvml.env(), tmp_path)
        agents.append(agent)
        return agent

    yield run
    for agent in agents:
        agent.stop()


def read_through(agent: AgentProcess, log: Path, marker: int) -> dict[int, int]:
    """Append one ``marker`` XID (on GPU 1) and wait until it is counted: every earlier line has
    been read then. Returns the counts without the marker."""
    before = counts(agent).get(marker, 0)
    with log.open("a") as f:
        f.write(line(marker, "20"))
    wait_for(lambda: counts(agent).get(marker, 0) == before + 1, what=f"marker XID {marker}")
    return {code: n for code, n in counts(agent).items() if code != marker}


def test_a_restart_mid_stream_counts_every_xid_once(start, tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state"
    log.write_text("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06\n" + line(48) + line(48) + line(79))
    first = start(log, state)
    assert read_through(first, log, 31) == {48: 2, 79: 1}
    with log.open("a") as f:
        f.write(line(48))
    wait_for(lambda: counts(first).get(48) == 3, what="the third XID 48")
    first.proc.kill()  # a crash: whatever was not saved yet is read again, and counted once
    first.stop()

    with log.open("a") as f:  # logged while no agent ran
        f.write(line(48) + line(13))
    second = start(log, state)
    assert counts(second).get(48, 0) >= 3  # the first /metrics already carries the saved counts
    assert read_through(second, log, 31) == {48: 4, 79: 1, 13: 1}
    os.rename(log, tmp_path / "kern.log.1")  # rotated under the running agent, which follows it
    log.write_text(line(13))
    wait_for(lambda: counts(second).get(13) == 2, what="the rotated file's XID")
    assert second.stop() == 0

    # Today's behaviour without the state: the counts of the rotated-away file are gone (48 from 4
    # to nothing, 13 from 2 to 1), which Prometheus reads as a counter reset.
    control = start(log, None)
    assert read_through(control, log, 31) == {13: 1}
    control.stop()

    third = start(log, state)
    assert read_through(third, log, 31) == {48: 4, 79: 1, 13: 2}
    snapshot = third.snapshot()
    assert snapshot["agent"]["sources"]["xid_state"] == "ok"
    assert "xid_state_write" not in snapshot["agent"]["errors"]
