"""The README's entry-point table is ``observe.training.coverage``'s, and that source is coherent.

What each entry point really exports is checked against the same source by its end-to-end run
(``tests/support/instrumented.assert_as_the_table_says``: the trainer, the Hugging Face and
Lightning callbacks, zero code).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from observe import catalog as c
from observe.training import coverage

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_carries_the_table_as_generated() -> None:
    assert coverage.markdown() in README.read_text(), "regenerate README's table from coverage.markdown()"


def test_every_row_names_catalog_series_and_marks_every_entry_point() -> None:
    names = {m.name for m in c.TRAINER_METRICS}
    for row in coverage.TABLE:
        assert set(row.series) <= names, row.label
        assert list(row.marks) == list(coverage.ENTRY_POINTS), row.label


@pytest.mark.parametrize("entry", sorted(coverage.ENTRY_POINTS))
def test_what_the_table_promises_and_denies_never_overlap(entry: str) -> None:
    present, absent = coverage.expected(entry)
    assert present and not present & absent


def test_an_absent_cell_is_blank_and_an_exact_one_ticked() -> None:
    assert coverage.ABSENT.cell() == "" and coverage.exact("as logged").cell() == "✓ as logged"
    assert coverage.approx().cell() == "~"
