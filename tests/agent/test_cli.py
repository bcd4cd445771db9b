"""Bad input to ``fsdp-observe agent``: one line naming the flag and the fix, exit status 2, no traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from observe.cli import main as top_main


def one_error_line(capsys: pytest.CaptureFixture, argv: list[str]) -> str:
    assert top_main(["agent", *argv]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: ")
    return lines[0]


def test_taken_port(capsys, taken_port: int) -> None:
    line = one_error_line(capsys, ["--address", "127.0.0.1", "--port", str(taken_port)])
    assert line == (
        f"error: --port: port {taken_port} on 127.0.0.1 is already in use by pid {os.getpid()} "
        f"({Path('/proc/self/comm').read_text().strip()}); "
        "stop what holds it or pass --port with a free port"
    )


def test_unreadable_kernel_log(capsys, unreadable_path: Path) -> None:
    line = one_error_line(capsys, ["--kernel-log", str(unreadable_path)])
    assert line.startswith("error: --kernel-log: cannot read") and "Permission denied" in line
    assert "leave the flag out to read /dev/kmsg" in line


def test_missing_kernel_log(capsys, tmp_path: Path) -> None:
    assert "No such file" in one_error_line(capsys, ["--kernel-log", str(tmp_path / "nope")])


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--interval", "0"], "--interval"),
        (["--interval", "99999"], "--interval"),
        (["--port", "70000"], "--port"),
        (["--max-processes", "-1"], "--max-processes"),
        (["--process-series", "-5"], "--process-series"),
        (["--proc-root", "/nonexistent"], "--proc-root"),
        (["--node", ""], "--node"),
    ],
)
def test_bad_values(capsys, argv: list[str], flag: str) -> None:
    line = one_error_line(capsys, argv)
    assert line.startswith(f"error: {flag}: ") and "; " in line


@pytest.mark.parametrize("argv, text", [(["--interval", "soon"], "--interval"), (["--bogus"], "--bogus")])
def test_argparse_errors_are_one_line_too(capsys, argv: list[str], text: str) -> None:
    line = one_error_line(capsys, argv)
    assert text in line and "fsdp-observe agent --help" in line


def test_the_top_level_command_knows_agent(capsys, taken_port: int) -> None:
    assert top_main(["agent", "--address", "127.0.0.1", "--port", str(taken_port)]) == 2
    assert "already in use" in capsys.readouterr().err


@pytest.mark.parametrize("address", ["10.255.255.1", "no-such-host.invalid"])
def test_an_address_this_machine_cannot_serve_names_address(capsys, address: str) -> None:
    """Before: 'error: --port: cannot serve on 10.255.255.1:0 ...; pass --port with a free port'."""
    line = one_error_line(capsys, ["--address", address, "--port", "0"])
    assert line.startswith(f"error: --address: cannot serve on {address!r}")
    assert "not an address of this machine" in line and "pass --address 127.0.0.1" in line and "--port" not in line
