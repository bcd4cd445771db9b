"""Comments, docstrings and docs say things in plain words: none cites an issue number or a review
file, which a reader of the repository cannot open. The field cases keep their own words
(``tests/cases`` is a copy of recorded reports and must equal its source)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.processes import REPO

#: "issue 16", "Issue 18 and 15", "issues #3", or a path into the reviews folder.
CITATION = re.compile(r"\bissues? ?#?\d+|\breviews/\w", re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    """The repository's tracked files, less the field cases, binary files and this file (its examples)."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    paths = [
        REPO / n for n in names.splitlines() if not n.startswith("tests/cases/") and n != "tests/test_plain_words.py"
    ]
    return [p for p in paths if p.is_file() and b"\0" not in p.read_bytes()[:4096]]


def citations(text: str) -> list[str]:
    return [m.group(0) for m in CITATION.finditer(text)]


def test_the_pattern_finds_the_forms_that_were_cited() -> None:
    assert citations('"""Issue 16\'s defects""" # see issue #3; ../shared/reviews/aesthetics.md') == [
        "Issue 16",
        "issue #3",
        "reviews/a",
    ]
    assert citations("the issues this run had; review the 16 ranks") == []


def test_no_tracked_file_cites_an_issue_or_a_review_file() -> None:
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()[:100]}"
        for path in tracked_text_files()
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if citations(line)
    ]
    assert not found, "say it in plain words:\n" + "\n".join(found)
