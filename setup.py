"""Build hook: ship ``fsdp_observe_instrument.pth`` at the root of site-packages.

Everything else is declared in ``pyproject.toml``. A ``.pth`` file must sit directly in
site-packages to be read at interpreter start-up, outside any package, which setuptools'
declarative configuration cannot express: ``build_py`` copies it there, into the wheel's root
for a normal install and into the editable wheel for ``pip install -e .`` (whose other files are
links to the source tree). Its one line starts ``observe.training.inject.bootstrap`` only when
``FSDP_OBSERVE_INSTRUMENT=1`` is set; otherwise it costs one dictionary lookup at start-up.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = Path("observe", "training", "inject", "fsdp_observe_instrument.pth")


class BuildPyWithPth(build_py):
    """``build_py`` that also puts the ``.pth`` at the root of what gets installed."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # pip install -e: the editable wheel's root
            root = Path(self.get_finalized_command("install").install_lib)
        else:
            root = Path(self.build_lib)
        root.mkdir(parents=True, exist_ok=True)
        self.copy_file(str(PTH), str(root / PTH.name))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            outputs.append(str(Path(self.build_lib) / PTH.name))
        return outputs


setup(cmdclass={"build_py": BuildPyWithPth})
