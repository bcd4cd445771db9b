"""Shared fixtures: free TCP ports, a clean environment for subprocesses, the field cases, and the
C stand-ins (fake NVML library, sleeper) built with gcc; and, under pytest-xdist, the ``serial``
marker's turn-taking (``pytest_runtest_protocol``)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from observe.ports import free_port_block
from tests.support.env import child_env
from tests.support.fake_nvml import FakeNvml
from tests.support.native import build_fake_nvml, build_sleeper
from tests.support.processes import spawn_sleeper
from tests.support.turns import pytest_runtest_protocol  # noqa: F401  (the serial marker's hook: pytest finds it here)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def port_block():
    """A function returning a base port with ``n`` consecutive free ports."""
    return free_port_block


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child processes (``tests.support.env.child_env``), one per test."""
    return child_env()


@dataclass(frozen=True)
class Native:
    """Paths of the compiled stand-ins."""

    fake_nvml: Path  # directory with libnvidia-ml.so.1 (every function)
    fake_nvml_old_driver: Path  # the same without the encoder/decoder and clock-event-reason calls
    sleeper: Path


@pytest.fixture(scope="session")
def native(tmp_path_factory: pytest.TempPathFactory) -> Native:
    """Builds the fake NVML library (two variants) and the sleeper once per session."""
    root = tmp_path_factory.mktemp("native")
    return Native(
        fake_nvml=build_fake_nvml(root / "nvml"),
        fake_nvml_old_driver=build_fake_nvml(
            root / "nvml-old",
            omit=(
                "nvmlDeviceGetEncoderUtilization",
                "nvmlDeviceGetDecoderUtilization",
                "nvmlDeviceGetCurrentClocksEventReasons",
            ),
        ),
        sleeper=build_sleeper(root / "bin"),
    )


@pytest.fixture
def fake_nvml(native: Native, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """The fake NVML library loaded in this process, standing in for a GPU driver; default: 4 healthy GPUs."""
    fake = FakeNvml(native.fake_nvml, tmp_path / "nvml-scenario.conf")
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(fake.config))
    fake.preload()
    return fake


@pytest.fixture
def sleepers(native: Native) -> Iterator[Callable[[list], subprocess.Popen]]:
    """Starts sleeper processes with chosen command lines; kills them after the test."""
    started: list[subprocess.Popen] = []

    def start(argv: list) -> subprocess.Popen:
        proc = spawn_sleeper(native.sleeper, argv)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.fixture
def unreadable_path(tmp_path: Path) -> Path:
    """A path this user cannot open for reading (a mode-000 file; for root, a write-only sysctl)."""
    path = tmp_path / "no-permission"
    path.write_text("secret\n")
    path.chmod(0)
    if os.access(path, os.R_OK):  # root reads mode-000 files; procfs sysctl modes bind root too
        path = Path("/proc/sys/vm/drop_caches")
    try:
        open(path, "rb").close()
    except PermissionError:
        return path
    pytest.fail(f"found no path this user cannot read (tried {path})")


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Path:
    """An existing directory this user cannot create files in (mode 555; for root, who writes
    there anyway, sysfs's /sys/kernel, which refuses even root)."""
    path = tmp_path / "read-only"
    path.mkdir()
    path.chmod(0o555)
    for candidate in (path, Path("/sys/kernel")):
        try:
            (candidate / f".probe-{os.getpid()}").open("w").close()
        except OSError:
            return candidate
        (candidate / f".probe-{os.getpid()}").unlink()
    pytest.fail("found no directory this user cannot write (tried a mode-555 folder and /sys/kernel)")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A 127.0.0.1 port something is listening on for the whole test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]
