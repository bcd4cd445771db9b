"""Redaction and text safety, against ../shared/cases/redaction.tsv (in-repo copy) and real /proc."""

from __future__ import annotations

import time

import pytest

from observe.agent.procs import ProcessTable
from observe.agent.redact import (
    MAX_ARG_CHARS,
    MAX_COMMAND_CHARS,
    REDACTED,
    cut,
    escape_controls,
    is_secret_name,
    safe_command,
    safe_text,
)
from tests.support.cases import redaction_rows

ROWS = redaction_rows()


def as_cmdline(command: str) -> bytes:
    """The case's command line as /proc/<pid>/cmdline holds it (arguments split on spaces)."""
    return "\0".join(command.split(" ")).encode() + b"\0"


@pytest.mark.parametrize("command, expected", ROWS, ids=[r[0][:40] for r in ROWS])
def test_redaction_case(command: str, expected: str) -> None:
    assert safe_command(as_cmdline(command)) == expected


def test_redaction_cases_from_real_processes(sleepers) -> None:
    """Each row as the command line of a real process, read back through /proc by the process table."""
    procs = {sleepers(command.split(" ")).pid: expected for command, expected in ROWS}
    table = ProcessTable()
    table.refresh(time.monotonic())
    for pid, expected in procs.items():
        assert table.info(pid, None).command == expected
    table.close()


@pytest.mark.parametrize("name, secret", [
    ("--hf_token", True), ("--token", True), ("HF_TOKEN", True), ("aws_secret_access_key", True),
    ("--api-key", True), ("--password", True), ("X-Amz-Signature", True),
    ("--token-budget", False), ("--max_tokens", False), ("--tokenizer", False), ("--keyboard", False),
    ("--secret-file", False), ("AWS_ACCESS_KEY_ID", False), ("--monkey", False),
])
def test_only_the_last_word_of_a_name_decides(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize("arg, expected", [
    ("https://x/y?token=abc&page=2", f"https://x/y?token={REDACTED}&page=2"),
    ("Authorization: Bearer abcdefghijkl", f"Authorization: {REDACTED}"),
    ("ghp_" + "a" * 36, REDACTED),
    ("AKIAIOSFODNN7EXAMPLE", REDACTED),
    ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig", REDACTED),
    ("--lr=1e-4", "--lr=1e-4"),
])
def test_secrets_anywhere_in_an_argument(arg: str, expected: str) -> None:
    assert safe_command(b"prog\0" + arg.encode()) == f"prog {expected}"


def test_a_secret_flag_followed_by_another_flag_redacts_nothing() -> None:
    assert safe_command(b"prog\0--use-token\0--lr\0001") == "prog --use-token --lr 1"
    assert safe_command(b"prog\0--token\0--lr\0001") == "prog --token --lr 1"


def test_control_characters_become_visible_escapes() -> None:
    assert escape_controls("a\nb\tc\x1b[31m\x7f\x9b") == "a\\nb\\tc\\x1b[31m\\x7f\\x9b"


def test_invalid_utf8_becomes_escapes() -> None:
    assert safe_command(b"cat\0\xff\xfe\0") == "cat \\xff\\xfe"


def test_long_arguments_and_command_lines_are_cut_with_a_marker() -> None:
    assert safe_command(b"python\0" + b"x" * 100_000) == "python " + "x" * MAX_ARG_CHARS + "…[+99744 chars]"
    many = safe_command(b"\0".join([b"y" * 200] * 20))
    assert len(many) == MAX_COMMAND_CHARS + len(f"…[+{20 * 201 - 1 - MAX_COMMAND_CHARS} chars]")
    assert cut("short", 10) == "short"


def test_redaction_happens_before_cutting() -> None:
    # the secret sits past the cut: it must not survive in the part that is kept
    command = safe_command(b"prog\0--token\0" + b"s" * 5000)
    assert "s" * 10 not in command and REDACTED in command


def test_kernel_threads_have_empty_command_lines() -> None:
    assert safe_command(b"") == ""


def test_safe_text_redacts_short_fields() -> None:
    assert safe_text("HF_TOKEN=hf_QmW3rT7yU1iO5pA9sD2fG6hJ0kL4zX8c") == f"HF_TOKEN={REDACTED}"
    assert safe_text("x" * 300, 10) == "x" * 10 + "…[+290 chars]"
