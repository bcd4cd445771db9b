"""Redaction and text safety, against tests/cases/redaction.tsv, this project's own
tests/agent/redaction-extra.tsv (a row per secret class once found leaking) and real /proc."""

from __future__ import annotations

import random
import string
import time

import pytest

from observe.agent.procs import ProcessTable
from observe.agent.redact import (
    MAX_ARG_CHARS,
    MAX_COMMAND_CHARS,
    POSITIONAL_SECRETS,
    REDACTED,
    cut,
    escape_controls,
    is_secret_name,
    looks_random,
    safe_command,
    safe_text,
)
from tests.support.cases import redaction_extra_rows, redaction_rows

ROWS = redaction_rows()


EXTRA_ROWS = redaction_extra_rows()
#: The classes once found leaking through the shared cases' rules, each needing a row.
LEAKED_CLASSES = {
    "shell-string assignment",
    "short flag",
    "glued short flag",
    "value starting with -",
    "camelCase name",
    "dotted camelCase name",
    "connection string",
    "JSON",
    "curl -u user:password",
    "URL token without colon",
    "URL password with @",
    "login positional",
    "bare AWS secret key",
    "PEM block",
    "PEM block after a secret flag",
    "Slack webhook",
    "high-entropy token",
    "bidi control",
    "tool's positional password",
    "quoted value",
}


def as_cmdline(command: str) -> bytes:
    """The case's command line as /proc/<pid>/cmdline holds it (arguments split on spaces)."""
    return "\0".join(command.split(" ")).encode() + b"\0"


@pytest.mark.parametrize("command, expected", ROWS, ids=[r[0][:40] for r in ROWS])
def test_redaction_case(command: str, expected: str) -> None:
    assert safe_command(as_cmdline(command)) == expected


@pytest.mark.parametrize("argv, expected, kind", EXTRA_ROWS, ids=[f"{r[2]}: {' '.join(r[0])[:40]}" for r in EXTRA_ROWS])
def test_extra_redaction_case(argv: list[str], expected: str, kind: str) -> None:
    assert safe_command("\0".join(argv).encode() + b"\0") == expected
    if kind == "none":
        assert expected == " ".join(argv)
    else:
        assert expected != " ".join(argv)


def test_every_class_issue_17_found_leaking_has_a_row() -> None:
    assert LEAKED_CLASSES <= {kind for _, _, kind in EXTRA_ROWS}
    assert sum(kind == "none" for _, _, kind in EXTRA_ROWS) >= 10  # and command lines that must stay


def test_redaction_cases_from_real_processes(sleepers) -> None:
    """Each row of both files as the command line of a real process, read back through /proc."""
    procs = {sleepers(command.split(" ")).pid: expected for command, expected in ROWS}
    procs |= {sleepers(argv).pid: expected for argv, expected, _ in EXTRA_ROWS}
    table = ProcessTable()
    table.refresh(time.monotonic())
    for pid, expected in procs.items():
        assert table.info(pid, None).command == expected
    table.close()


@pytest.mark.parametrize(
    "name, secret",
    [
        ("--hf_token", True),
        ("--token", True),
        ("HF_TOKEN", True),
        ("aws_secret_access_key", True),
        ("--api-key", True),
        ("--password", True),
        ("X-Amz-Signature", True),
        ("--token-budget", False),
        ("--max_tokens", False),
        ("--tokenizer", False),
        ("--keyboard", False),
        ("--secret-file", False),
        ("AWS_ACCESS_KEY_ID", False),
        ("--monkey", False),
        ("--hfToken", True),
        ("--authToken", True),
        ("-Djavax.net.ssl.keyStorePassword", True),
        ("AccountKey", True),
        ("APIKey", True),
        ("--dbpassword", True),
        ("--clientsecret", True),
        ("--db-pass", True),
        ("--maxTokens", False),
        ("--hotkey", False),
        ("--passwordFile", False),
        ("--tokenizerName", False),
    ],
)
def test_only_the_last_word_of_a_name_decides(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


@pytest.mark.parametrize(
    "arg, expected",
    [
        ("https://x/y?token=abc&page=2", f"https://x/y?token={REDACTED}&page=2"),
        ("Authorization: Bearer abcdefghijkl", f"Authorization: {REDACTED}"),
        ("ghp_" + "a" * 36, REDACTED),
        ("AKIAIOSFODNN7EXAMPLE", REDACTED),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig", REDACTED),
        ("--lr=1e-4", "--lr=1e-4"),
    ],
)
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


def test_bidirectional_and_invisible_characters_become_escapes() -> None:
    assert escape_controls("a\u202eb\u2066c\u200bd\ufeffe\u2028f") == "a\\u202eb\\u2066c\\u200bd\\ufeffe\\u2028f"
    assert safe_command("ls\0evil\u202etxt.exe\0".encode()) == "ls evil\\u202etxt.exe"
    assert safe_text("name\u202e") == "name\\u202e"


def _random_token(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_random_tokens_are_caught_without_a_name() -> None:
    rng = random.Random(17)
    tokens = [_random_token(rng, rng.randint(24, 64)) for _ in range(200)]
    assert sum(looks_random(t) for t in tokens) >= 198
    for t in tokens[:20]:
        assert safe_command(f"prog\0--input\0{t}\0".encode()) == f"prog --input {REDACTED}"


@pytest.mark.parametrize(
    "name",
    [
        "LlamaFinetuneExperiments2024",
        "meta-llama/Llama-2-70b-hf",
        "llama2-7b-fsdp-3f9a1c2e",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "test_redaction_cases_from_real_processes",
        "3f2a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a",
        "fa4e0000-0000-4000-8000-000000000000",
        "expandable_segments:True",
        "PYTORCH_CUDA_ALLOC_CONF",
        "Qwen2.5-72B-Instruct-GPTQ-Int4",
    ],
)
def test_names_ids_and_hashes_are_not_taken_for_secrets(name: str) -> None:
    assert safe_command(f"prog\0{name}\0".encode()) == f"prog {name}"


def test_a_shell_string_keeps_its_layout_around_what_it_redacts() -> None:
    script = "set -e;  export HF_TOKEN='a b c' ; curl -u bob:pw https://x  |  tee log"
    assert (
        safe_command(f"bash\0-c\0{script}\0".encode())
        == f"bash -c set -e;  export HF_TOKEN='{REDACTED}' ; curl -u bob:{REDACTED} https://x  |  tee log"
    )


def test_no_pattern_backtracks_on_the_longest_argument() -> None:
    """A hang guard, not a speed target: the longest argument Linux allows (MAX_ARG_STRLEN,
    128 KiB) of each adversarial shape finishes. Linear work here is about 0.1-0.3 s; a pattern
    that backtracks quadratically would take minutes, so the bound is loose enough for any load."""
    n = 128 * 1024
    for arg in (
        "a=" * (n // 2),
        "-----BEGIN X-----" + "y" * n,
        "https://" + "@" * n,
        "'" * n,
        '{"password": "' + "z" * n,
        "x " * (n // 2),
        "--token " * (n // 8),
        "a;" * (n // 2),
    ):
        started = time.perf_counter()
        safe_command(b"prog\0" + arg[:n].encode())
        assert time.perf_counter() - started < 20.0, arg[:20]


@pytest.mark.parametrize("tool", sorted(POSITIONAL_SECRETS))
def test_every_tool_with_a_positional_password_is_covered_by_a_case(tool: str) -> None:
    """The class, not two lines: each tool of the table has a case in redaction-extra.tsv."""
    rows = [(argv, shown) for argv, shown, cls in EXTRA_ROWS if cls == "tool's positional password"]
    assert any(tool in " ".join(argv).split() and REDACTED in shown for argv, shown in rows)
