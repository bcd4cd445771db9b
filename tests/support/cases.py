"""The field cases (``tests/cases``, a byte copy of ``../shared/cases``) and what tests read from them."""

from __future__ import annotations

import shlex
from pathlib import Path

from observe.agent.redact import MAX_ARG_CHARS

#: The in-repo copy of the shared field cases (``../shared/cases``), so a clean clone has them.
CASES = Path(__file__).resolve().parents[1] / "cases"

LONG = "x" * 100_000

#: Each bullet of exposition.md -> (argv of a real process, the command text that must come out).
EXPOSITION_CASES: dict[str, tuple[list[str | bytes], str]] = {
    '`python -c "print(\\"}{\\")"`': (["python", "-c", '"print(\\"}{\\")"'], 'python -c "print(\\"}{\\")"'),
    "a command line holding a newline: `bash -c 'echo a` + newline + `echo b'`": (
        ["bash", "-c", "'echo a\necho b'"],
        "bash -c 'echo a\\necho b'",
    ),
    "a backslash at the end: `printf foo\\`": (["printf", "foo\\"], "printf foo\\"),
    "ANSI escapes: `ESC[31mredESC[0m` (byte 0x1b)": (["echo", "\x1b[31mred\x1b[0m"], "echo \\x1b[31mred\\x1b[0m"),
    "invalid UTF-8 bytes in `/proc/<pid>/cmdline` (0xff 0xfe)": ([b"cat", b"\xff\xfe"], "cat \\xff\\xfe"),
    "an argument of 100,000 characters (cut to a documented length, with a marker)": (
        ["python", LONG],
        "python " + "x" * MAX_ARG_CHARS + f"…[+{100_000 - MAX_ARG_CHARS} chars]",
    ),
}


def redaction_rows() -> list[tuple[str, str]]:
    """``(command line, what may leave the node)`` rows of ``redaction.tsv``."""
    lines = (CASES / "redaction.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["command line", "may leave the node as"]
    return [(line.split("\t")[0], line.split("\t")[1]) for line in lines[1:] if line]


#: This project's own redaction rows (a row per secret class once found leaking), beside the
#: shared cases file, which is a byte copy and never edited.
REDACTION_EXTRA = Path(__file__).resolve().parents[1] / "agent" / "redaction-extra.tsv"


def redaction_extra_rows() -> list[tuple[list[str], str, str]]:
    """``(argv, expected, class)`` of redaction-extra.tsv (column 1 is shell-quoted)."""
    lines = REDACTION_EXTRA.read_text().splitlines()
    assert lines[0].split("\t") == ["command line (shell-quoted)", "may leave the node as", "class"]
    rows = []
    for line in lines[1:]:
        if line and not line.startswith("#"):
            command, expected, kind = line.split("\t")
            rows.append((shlex.split(command), expected, kind))
    return rows
