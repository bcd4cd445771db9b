"""Run ``fsdp-observe`` in this process and check its one-line user errors.

``observe.cli.main(argv)`` is what the console script runs; calling it here tests the same
dispatcher, parser and ``UserError`` line as a subprocess would, without an interpreter start.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from observe.cli import main


@dataclass(frozen=True)
class Result:
    """What one ``fsdp-observe`` call returned and printed."""

    status: int
    stdout: str
    stderr: str


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    """``fsdp-observe ARGS`` in-process; ``SystemExit`` (``--help``) becomes its status."""
    capsys.readouterr()
    try:
        status = main(args)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return Result(status, out, err)


def assert_one_line_error(result: Result, *needles: str) -> str:
    """Exit status 2, exactly one ``error: ...`` line on stderr, no traceback; return the line."""
    assert result.status == 2, result
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
