"""What NVML answers is untrusted input: text that is not UTF-8, and any exception from any call the
agent makes, cost at most the GPU concerned, never the node's collection.

The GPUs are the stand-in NVML library (tests/support/fake_nvml.c, loaded by the real pynvml):
``name_hex@N``/``uuid_hex@N``/``pci_hex@N``/``driver_hex`` set the raw bytes of a text. The
"every call" test replaces one pynvml function at a time with one that raises on GPU 1's worker
thread (and on threads of no GPU, for calls that concern none), as a driver or binding bug would.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pynvml
import pytest

from observe.agent import gpu as gpu_module
from observe.agent.run import Agent
from observe.agent.sampler import Sampler, Settings
from tests.support.nvml import running_sampler, series, value
from tests.support.processes import wait_for

AGENT_SOURCES = [Path(gpu_module.__file__), Path(gpu_module.__file__).with_name("plausible.py")]
#: Bytes a failing InfoROM could hand back: invalid UTF-8, an ANSI colour, a newline, RIGHT-TO-LEFT OVERRIDE.
HOSTILE = "fffe1b5b33316d0a41e280ae42"


def test_a_name_that_is_not_utf8_is_escaped_counted_and_the_node_still_served(fake_nvml, tmp_path: Path) -> None:
    """Before: UnicodeDecodeError killed the collection thread at start; every request got 503 for good."""
    fake_nvml.set(f"gpus 2\nname_hex@1 {HOSTILE}")
    agent = Agent(Settings(node="n", kmsg=str(tmp_path / "no-kmsg"), interval_seconds=0.2), "127.0.0.1", 0)
    agent.start(wait=False)
    try:
        assert agent.wait_first(20), "no snapshot: the collection thread died"
        snap = agent.latest.current.snapshot
    finally:
        agent.stop()
    bad = snap.gpus[1]
    assert bad.name == "\\xff\\xfe\\x1b[31m\\nA\\u202eB" and bad.temperature_celsius == 45
    assert snap.gpus[0].name == "Fake H100 80GB HBM3 (test stand-in)"
    assert snap.agent.errors["nvml_invalid_text"] >= 1
    assert snap.host.processes > 0


@pytest.mark.parametrize("key", ["uuid_hex@1", "pci_hex@1", "driver_hex"])
def test_every_nvml_text_that_is_not_utf8_is_kept_escaped(fake_nvml, tmp_path: Path, key: str) -> None:
    fake_nvml.set(f"gpus 2\n{key} {HOSTILE}")
    with running_sampler(tmp_path) as sampler:
        snap = sampler.sample()
    assert [g.temperature_celsius for g in snap.gpus] == [45, 45]
    assert snap.agent.errors["nvml_invalid_text"] >= 1
    texts = [snap.gpus[1].uuid, snap.gpus[1].pci_bus, snap.gpus[1].driver_version]
    assert any(t and "\\xff\\xfe\\x1b" in t for t in texts), texts
    assert not any(t and re.search(r"[\x00-\x1f\u202e]", t) for t in texts)
    series(snap)  # the exposition renders


def nvml_functions() -> list[str]:
    """Every NVML function the agent's GPU code names."""
    return sorted({m for path in AGENT_SOURCES for m in re.findall(r'"(nvml[A-Z]\w+)"', path.read_text())})


def test_the_list_of_calls_is_the_agents() -> None:
    names = nvml_functions()
    assert {"nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetCount", "nvmlEventSetWait"} <= set(names)
    assert len(names) >= 35


#: Run through every path: MIG (instances), processes, samples, XID events, the old-driver reason call
#: (``reasons@1 nf``: GPU 1 falls back to it) and a lost GPU read again by PCI bus.
EVERY_PATH = "mig@1 1\nproc 1 4242 1048576\nsample 1 4242 1000 40 10\nxid 1 48\nreasons@1 nf"


@pytest.mark.parametrize("function", nvml_functions())
def test_an_exception_from_any_nvml_call_costs_at_most_its_value(
    fake_nvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str
) -> None:
    """Before: an exception other than GPU_IS_LOST escaped ``collect`` (every GPU gone from that
    snapshot) or ``start`` (the collection thread died: the agent never served)."""
    monkeypatch.setattr(gpu_module, "REPROBE_SECONDS", 0.0)
    real = getattr(pynvml, function)
    raised = []

    def failing(*args, **kwargs):
        name = threading.current_thread().name
        if name == "nvml-gpu1" or not name.startswith("nvml-gpu"):
            raised.append(name)
            raise RuntimeError(f"injected into {function}")
        return real(*args, **kwargs)

    monkeypatch.setattr(pynvml, function, failing)
    fake_nvml.set(EVERY_PATH)
    with running_sampler(tmp_path) as sampler:
        snaps = [sampler.sample()]
        fake_nvml.set(EVERY_PATH + "\nlost@1 1")
        snaps.append(sampler.sample())
        fake_nvml.set(EVERY_PATH)
        snaps.append(sampler.sample())
        snaps.append(sampler.sample())
    assert raised, f"{function} was never called"
    assert snaps[-1].agent.errors["nvml_runtime_error"] >= 1
    for snap in snaps:
        assert snap.host.processes > 0
        if function == "nvmlDeviceGetCount":  # no count, no GPUs: the host is still served
            assert snap.gpus == ()
            continue
        assert [g.index for g in snap.gpus] == [0, 1, 2, 3]
        assert [g.temperature_celsius for g in snap.gpus if g.index != 1] == [45, 45, 45]
        series(snap)
    if function != "nvmlDeviceGetCount":
        gpu1 = snaps[-1].gpus[1]
        assert not gpu1.lost and not gpu1.stale
        if function == "nvmlDeviceGetHandleByIndex":
            assert gpu1.unreadable == "nvml_runtime_error"


def test_a_failing_collector_start_leaves_the_host_served(fake_nvml, tmp_path: Path, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("injected into nvmlInit")

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    sampler = Sampler(Settings(node="n", kmsg=str(tmp_path / "no-kmsg")))
    sampler.start()
    try:
        snap = wait_for(lambda: sampler.sample(), what="a snapshot")
    finally:
        sampler.stop()
    assert snap.host.processes > 0 and snap.gpus == ()
    assert snap.agent.errors["collect_start_gpu"] == 1


def test_a_gpu_whose_every_text_is_hostile_is_read_collection_after_collection(fake_nvml, tmp_path: Path) -> None:
    """Twenty collections with GPU 1's UUID, name and bus all hostile: its figures every time."""
    fake_nvml.set(f"gpus 2\nname_hex@1 {HOSTILE}\nuuid_hex@1 {HOSTILE}\npci_hex@1 {HOSTILE}")
    with running_sampler(tmp_path) as sampler:
        snaps = [sampler.sample() for _ in range(20)]
    assert all(s.gpus[1].temperature_celsius == 45 for s in snaps)
    assert value(series(snaps[-1]), "fsdp_gpu_temperature_celsius", gpu="1") == 45
