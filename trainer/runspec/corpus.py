"""Finding and reading the training text: files and globs, or the Python standard library.

Torch-free, so the launcher can check ``--data`` before starting any rank.
"""

from __future__ import annotations

import glob
import hashlib
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
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)
    if not files:
        raise UserError(
            "--data", f"no standard-library sources under {root}", "pass --data with your own .txt/.md/.py/.jsonl files"
        )
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
            raise UserError("--data", f"nothing matches {pattern!r}", "pass existing files, directories or globs")
        for match in matches:
            if match.is_dir():
                found.update(p for p in match.rglob("*") if p.suffix in SUPPORTED_SUFFIXES)
            elif match.suffix in SUPPORTED_SUFFIXES:
                found.add(match)
            elif len(matches) == 1:
                raise UserError(
                    "--data", f"{str(match)!r} has an unsupported type", f"use {', '.join(SUPPORTED_SUFFIXES)} files"
                )
    files = sorted(p for p in found if p.is_file() and p.stat().st_size > 0)
    if not files:
        raise UserError(
            "--data",
            f"no non-empty {'/'.join(SUPPORTED_SUFFIXES)} files in {' '.join(patterns)}",
            "point --data at files that hold text",
        )
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


def is_held_out(text: str, fraction: float) -> bool:
    """Whether a document belongs to the held-out (validation) split.

    The first 8 bytes of the BLAKE2b digest of its UTF-8 text, read as a fraction of 2**64, fall
    below ``fraction``: the split depends on the text only, not on file order, epoch or world size.
    """
    if fraction <= 0:
        return False
    digest = hashlib.blake2b(text.encode("utf-8", errors="replace"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < fraction * 2**64


#: Lines of a ``.jsonl`` file looked at, at most, for the first one with a ``text`` field.
JSONL_PROBE_LINES = 10_000


def check_jsonl_text(path: Path) -> None:
    """Refuse a ``.jsonl`` file none of whose first ``JSONL_PROBE_LINES`` lines holds a document:
    a JSON object with a non-empty string ``text`` field (what ``read_documents`` reads).

    Raises:
        UserError: naming the field, and what the first line holds instead.
    """
    first: str | None = None
    with path.open(encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if number > JSONL_PROBE_LINES:
                break
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                first = first or f"line {number} is not JSON"
                continue
            if isinstance(record, dict) and isinstance(record.get("text"), str) and record["text"]:
                return
            if first is None:
                keys = ", ".join(sorted(map(str, record))) if isinstance(record, dict) else type(record).__name__
                first = (
                    f"line {number} has {'no keys' if not keys else 'keys ' + keys}"
                    if isinstance(record, dict)
                    else f"line {number} is a JSON {keys}, not an object"
                )
    raise UserError(
        "--data",
        f'{str(path)!r}: no line has a "text" field holding a document' + (f" ({first})" if first else ""),
        'write one JSON object per line with the document under "text", e.g. {"text": "..."}',
    )


def count_tokens_upto(files: list[Path], limit: int, held_out: float = 0.0) -> int:
    """Tokens the training split of ``files`` gives the byte tokenizer (UTF-8 bytes plus one EOS
    per document), counted until ``limit`` is reached: ``min(total, limit)`` or a little more.

    Every Hugging Face tokenizer the trainer uses gives at most as many tokens as bytes (each token
    covers at least one byte), so a count below what one step needs means the corpus is too small
    for any tokenizer. Files are read in the order given; documents held out for validation
    (``is_held_out``) do not count.
    """
    total = 0
    for path in files:
        for doc in read_documents(path):
            if is_held_out(doc, held_out):
                continue
            total += len(doc.encode("utf-8", errors="replace")) + 1
            if total >= limit:
                return total
    return total


def check_enough_text(
    files: list[Path], world_size: int, batch_size: int, grad_accum_steps: int, seq_len: int, held_out: float = 0.0
) -> None:
    """Refuse a corpus too small to fill one optimizer step without repeating its text.

    One step draws ``world_size x grad_accum_steps x batch_size`` blocks of ``seq_len + 1``
    tokens (``trainer.data.packed_blocks``); fewer tokens than that in one pass over the training
    split would repeat the same text inside a single step, and training would "succeed" on it.

    Raises:
        UserError: field ``--data``, with the sizes and what to change.
    """
    need = world_size * grad_accum_steps * batch_size * (seq_len + 1)
    have = count_tokens_upto(files, need, held_out)
    if have < need:
        held = " (documents held out for validation not counted)" if held_out > 0 else ""
        raise UserError(
            "--data",
            f"the training text holds {have:,} tokens at most{held}, fewer than one step "
            f"takes ({world_size} rank(s) x {grad_accum_steps} micro-batch(es) x {batch_size} sequences x "
            f"{seq_len + 1} tokens = {need:,}), so every step would repeat it",
            "add text, or lower --batch-size, --seq-len, --grad-accum-steps or the ranks",
        )
