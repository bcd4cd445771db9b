"""Finding and reading the training text: files and globs, or the Python standard library.

Torch-free, so the launcher can check ``--data`` before starting any rank.
"""

from __future__ import annotations

import glob
import json
import os
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from observe.errors import UserError

#: File types ``--data`` accepts. ``.jsonl`` files hold one JSON object per line with a ``text``
#: field; every other type is read whole as one document.
SUPPORTED_SUFFIXES = (".txt", ".md", ".py", ".jsonl")


def stdlib_sources() -> list[Path]:
    """The default corpus: the ``.py`` files of this interpreter's standard library, sorted.

    Real code and docstrings present on every machine with Python. Third-party packages
    (``site-packages``, ``dist-packages``) are left out.

    Raises:
        UserError: when the standard library's source files are not on disk.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )
    if not files:
        raise UserError("--data", f"no standard-library sources under {root}",
                          "pass --data with your own .txt/.md/.py/.jsonl files")
    return files


def resolve_data_files(patterns: list[str]) -> list[Path]:
    """Expand ``--data`` arguments (files, directories or globs) into a sorted file list.

    Args:
        patterns: paths or glob patterns; an empty list selects ``stdlib_sources()``.

    Returns:
        Sorted, de-duplicated paths of supported, non-empty files.

    Raises:
        UserError: a pattern matches nothing, a file has an unsupported type, or every
            matched file is empty.
    """
    if not patterns:
        return stdlib_sources()
    found: set[Path] = set()
    for pattern in patterns:
        matches = [Path(m) for m in glob.glob(os.path.expanduser(pattern), recursive=True)]
        if not matches:
            raise UserError("--data", f"nothing matches {pattern!r}",
                              "pass existing files, directories or globs")
        for match in matches:
            if match.is_dir():
                found.update(p for p in match.rglob("*") if p.suffix in SUPPORTED_SUFFIXES)
            elif match.suffix in SUPPORTED_SUFFIXES:
                found.add(match)
            elif len(matches) == 1:
                raise UserError("--data", f"{str(match)!r} has an unsupported type",
                                  f"use {', '.join(SUPPORTED_SUFFIXES)} files")
    files = sorted(p for p in found if p.is_file() and p.stat().st_size > 0)
    if not files:
        raise UserError("--data", f"no non-empty {'/'.join(SUPPORTED_SUFFIXES)} files in "
                          f"{' '.join(patterns)}", "point --data at files that hold text")
    return files


def read_documents(path: Path) -> Iterator[str]:
    """Yield the documents of one file: the whole file, or each ``text`` of a ``.jsonl`` file.

    Undecodable bytes are replaced (U+FFFD), so a stray binary byte never stops a run;
    ``.jsonl`` lines without a string ``text`` field are skipped.
    """
    if path.suffix != ".jsonl":
        yield path.read_text(encoding="utf-8", errors="replace")
        return
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                text = json.loads(line).get("text")
            except (ValueError, AttributeError):
                continue
            if isinstance(text, str) and text:
                yield text
