"""What makes one environment variable enough: the ``.pth`` and ``sitecustomize`` in the wheel,
the Lightning entry point, and the ``.pth`` line itself (``pip install -e .`` installs the same
file: the e2e tests of third-party trainers run with the variable alone in this editable install)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from observe.cli.run import PTH_NAME

REPO = Path(__file__).resolve().parents[2]
PTH = REPO / "observe" / "training" / "inject" / PTH_NAME


def test_the_wheel_ships_the_pth_at_the_root_the_sitecustomize_the_entry_point_and_py_typed(
    tmp_path: Path, subprocess_env
) -> None:
    tree = tmp_path / "src"
    tree.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, tree / name)
    for package in ("observe", "trainer"):
        shutil.copytree(REPO / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(tree),
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert z.read(PTH_NAME) == PTH.read_bytes()  # at the root: site-packages itself
        assert "observe/training/inject/site/sitecustomize.py" in names
        assert "observe/py.typed" in names  # PEP 561: users' type checkers read our annotations
        entry_points = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "[lightning.pytorch.callbacks_factory]\nfsdp_observe = observe.training.lightning:callbacks" in entry_points


def test_this_install_has_the_pth() -> None:
    assert (Path(sysconfig.get_paths()["purelib"]) / PTH_NAME).read_bytes() == PTH.read_bytes()


def test_the_pth_line_starts_the_bootstrap_only_under_the_variable(tmp_path: Path, subprocess_env) -> None:
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(PTH, site_dir / "zz_copy.pth")
    code = (
        f"import site, sys; site.addsitedir({str(site_dir)!r}); "
        "print('observe.training.inject.bootstrap' in sys.modules)"
    )
    env = {k: v for k, v in subprocess_env.items() if k != "FSDP_OBSERVE_INSTRUMENT"}
    for value, expected in (("1", "True"), ("0", "False"), (None, "False")):
        environ = env if value is None else {**env, "FSDP_OBSERVE_INSTRUMENT": value}
        done = subprocess.run(
            [sys.executable, "-S", "-c", code], env=environ, capture_output=True, text=True, timeout=60
        )
        assert done.stdout.strip() == expected, (value, done.stdout, done.stderr)
