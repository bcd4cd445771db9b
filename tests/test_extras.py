"""A command whose extra is not installed says which one to install, in one line.

Each case hides one third-party module in this process (``sys.modules[name] = None`` makes its
import fail as if it were not installed, and forgets the project modules that imported it), then
runs the command in-process. ``tests/e2e/test_installs.py`` proves the same on real installs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from observe.cli import COMMANDS, EXTRA_MODULES, missing_extra
from tests.support.cli import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parents[1]
#: Project modules kept while a module is hidden (the dispatcher, and the error type it catches).
KEEP = ("observe", "observe.errors", "observe.cli", "observe.flags")


@pytest.fixture
def hide(monkeypatch: pytest.MonkeyPatch):
    """``hide("torch", ...)``: make those modules uninstalled for the rest of the test."""

    def hide_(*modules: str) -> None:
        for name in list(sys.modules):
            top = name.split(".")[0]
            if name in modules or top in modules or (top in ("observe", "trainer") and name not in KEEP):
                monkeypatch.delitem(sys.modules, name)
        for name in modules:
            monkeypatch.setitem(sys.modules, name, None)

    return hide_


@pytest.mark.parametrize(
    "argv, hidden, extra",
    [
        (["dashboards", "--check"], "grafanalib", "dashboards"),
        (
            ["job", "render", "--config", str(REPO / "examples" / "llama2-7b.env"), "--set", "IMAGE_URI=r/i:1"],
            "yaml",
            "k8s",
        ),
        (["job", "status", "some-job"], "kubernetes", "k8s"),
        (["top", "--kube"], "kubernetes", "k8s"),  # the base command, an option that needs an extra
        (["agent", "--port", "0"], "pynvml", "agent"),
        (["train", "--steps", "1"], "torch", "trainer"),  # the ranks would import it: checked up front
        (
            ["scaling", "--prometheus", "http://127.0.0.1:9", "--run-id", "a", "--run-id", "b"],
            "matplotlib",
            "scaling",
        ),  # report.png is drawn last: checked before Prometheus is read
        (["scaling", "--world-sizes", "1,2"], "torch", "trainer"),  # local mode runs the trainer
        (["demo", "--no-tui"], "torch", "all"),
    ],
)
def test_a_missing_extra_is_named_in_one_line(argv, hidden, extra, hide, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    hide(hidden)
    line = assert_one_line_error(
        run_cli(argv, capsys),
        f"fsdp-observe {argv[0]}: needs the Python module '{hidden}', which is not installed",
        f"pip install 'fsdp-observe[{extra}]'",
    )
    assert line.endswith(f"pip install 'fsdp-observe[{extra}]'")
    assert not list(tmp_path.iterdir())  # nothing was started or written first


def test_every_extra_named_exists_in_pyproject() -> None:
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_MODULES) <= set(extras)
    assert {extra for _, _, extra in COMMANDS.values() if extra} <= set(extras)
    assert missing_extra("top", "kubernetes.client") == "k8s" and missing_extra("top", "left_pad") == "all"
