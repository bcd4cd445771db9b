"""Drives the fake ``libnvidia-ml.so.1`` (``fake_nvml.c``), which stands in for a GPU driver.

The real pynvml loads the fake library and the agent's NVML code runs unchanged; the library
answers from a scenario file that a test writes (and may replace between collections).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from tests.support.native import NVML_SONAME

_preloaded: set[Path] = set()


class FakeNvml:
    """The scenario file of the fake NVML library.

    Args:
        lib_dir: the directory holding the compiled ``libnvidia-ml.so.1``.
        config: the scenario file to write.
    """

    def __init__(self, lib_dir: Path, config: Path) -> None:
        self.lib_dir = lib_dir
        self.config = config
        self.set("")

    def set(self, scenario: str) -> None:
        """Replace the scenario (settings as in ``fake_nvml.c``); the library re-reads it on its next call."""
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(scenario.strip() + "\n")
        os.replace(tmp, self.config)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment in which a child process loads this fake library instead of a driver's."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(self.lib_dir), env.get("LD_LIBRARY_PATH")]))
        env["FAKE_NVML_CONFIG"] = str(self.config)
        return env

    def preload(self) -> None:
        """Load the library into this process, so pynvml's ``CDLL("libnvidia-ml.so.1")`` finds it.

        The dynamic loader matches an already loaded library by its soname before searching the
        disk, so even a machine with a real driver gets the stand-in.
        """
        lib = self.lib_dir / NVML_SONAME
        if lib not in _preloaded:
            ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
            _preloaded.add(lib)
