"""Builds the C stand-ins the tests need, with gcc: the fake NVML library and the sleeper process."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
#: The library file name pynvml loads on Linux.
NVML_SONAME = "libnvidia-ml.so.1"


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("the tests build C stand-ins and need gcc: apt-get install gcc")
    return gcc


def build_fake_nvml(out_dir: Path, omit: tuple[str, ...] = ()) -> Path:
    """Compile ``fake_nvml.c`` to ``out_dir/libnvidia-ml.so.1`` (leaving out the functions in ``omit``).

    Returns the directory, for ``LD_LIBRARY_PATH``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    defines = [f"-DOMIT_{name}" for name in omit]
    subprocess.run(
        [
            _gcc(),
            "-O1",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            f"-Wl,-soname,{NVML_SONAME}",
            *defines,
            "-o",
            str(out_dir / NVML_SONAME),
            str(SUPPORT / "fake_nvml.c"),
        ],
        check=True,
    )
    return out_dir


def build_sleeper(out_dir: Path) -> Path:
    """Compile ``sleeper.c``: a program that pauses forever whatever its argv."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "sleeper"
    subprocess.run([_gcc(), "-O1", "-Wall", "-Werror", "-o", str(path), str(SUPPORT / "sleeper.c")], check=True)
    return path
