"""tests/cases is a copy of the shared field cases (../shared/cases): it must not drift from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cases import CASES

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "cases"


def copied_files() -> list[Path]:
    return sorted(p.relative_to(CASES) for p in CASES.rglob("*") if p.is_file())


def test_the_copy_is_not_empty() -> None:
    assert {
        "redaction.tsv",
        "exposition.md",
        "nvml-scenarios.md",
        "xid/kernel-log.txt",
        "xid/expected.jsonl",
        "dcgm/README.md",
        "dcgm/exposition-v3.prom",
        "dcgm/exposition-v4.prom",
    } <= {str(p) for p in copied_files()}


@pytest.mark.skipif(
    not SHARED.is_dir(),
    reason="../shared/cases is not beside this checkout (a clean clone): nothing to compare the copy with",
)
def test_the_copy_equals_the_shared_cases() -> None:
    shared = sorted(p.relative_to(SHARED) for p in SHARED.rglob("*") if p.is_file())
    assert copied_files() == shared, (
        "copy ../shared/cases into tests/cases again (cp -r ../shared/cases/. tests/cases/)"
    )
    for relative in copied_files():
        assert (CASES / relative).read_bytes() == (SHARED / relative).read_bytes(), f"{relative} differs from ../shared"
