"""The end of a paired-run benchmark: its ``(label, value)`` rows as an aligned table, and its
report as JSON at ``--out`` (the folder made if missing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def print_and_write(rows: list[tuple[str, str]], report: dict[str, Any], out: str | Path) -> None:
    """Print ``rows`` as two aligned columns, write ``report`` to ``out`` and say where."""
    width = max(len(label) for label, _ in rows)
    print()
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten: {out}")
