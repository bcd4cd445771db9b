"""``fsdp-observe run``: its environment, and its mistakes in one line (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from observe import catalog as c
from observe.cli import main as cli_main
from observe.cli.run import SITE_DIR, build_parser, instrumented_env


def test_the_environment_puts_the_injector_first_and_keeps_the_rest() -> None:
    ns = build_parser().parse_args(["--port-base", "9600", "--linger", "5", "--", "torchrun", "x.py"])
    env = instrumented_env(ns, {"PYTHONPATH": f"/theirs{os.pathsep}{SITE_DIR}", "HOME": "/root"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(SITE_DIR), "/theirs"]  # ours once, first
    assert env[c.INSTRUMENT_ENV] == "1" and env["FSDP_OBSERVE_PORT_BASE"] == "9600"
    assert env["FSDP_OBSERVE_LINGER_SECONDS"] == "5.0" and env["HOME"] == "/root"
    assert "FSDP_OBSERVE_RUN_ID" not in env
    assert sorted(p.name for p in SITE_DIR.iterdir() if p.suffix == ".py") == ["sitecustomize.py"]


@pytest.mark.parametrize(
    "argv, line",
    [
        (["run"], "error: fsdp-observe run: no command given; write the command after --"),
        (["run", "--", "no-such-launcher-xyz"], "error: fsdp-observe run: command 'no-such-launcher-xyz' not found"),
        (["run", "--port-base", "70000", "--", "true"], "error: --port-base: 70000 is not a TCP port"),
        (["run", "--linger", "-1", "--", "true"], "error: --linger: must be 0 or more, got -1"),
    ],
)
def test_mistakes_are_one_line(argv: list[str], line: str, capsys) -> None:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err


def test_the_command_replaces_it_with_its_own_status(subprocess_env) -> None:
    code = "import os, sys; print(os.environ['FSDP_OBSERVE_INSTRUMENT']); sys.exit(7)"
    done = subprocess.run(
        [sys.executable, "-m", "observe.cli", "run", "--", sys.executable, "-c", code],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (7, "1")
