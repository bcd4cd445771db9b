"""The benchmarks are a package run as ``python -m benchmarks.NAME`` from the repository root: they
import the project and ``tests.support`` as any module does, never by editing ``sys.path``."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _edits_sys_path(source: str) -> list[int]:
    """Lines that call ``sys.path.insert``/``append``/``extend`` or assign ``sys.path``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        target = node.func if isinstance(node, ast.Call) else None
        if isinstance(target, ast.Attribute) and target.attr in ("insert", "append", "extend"):
            owner = target.value
            if isinstance(owner, ast.Attribute) and owner.attr == "path" and getattr(owner.value, "id", "") == "sys":
                lines.append(node.lineno)
    return lines


def test_no_benchmark_edits_sys_path() -> None:
    found = {p.name: _edits_sys_path(p.read_text()) for p in sorted(BENCHMARKS.glob("*.py"))}
    assert found and {name: lines for name, lines in found.items() if lines} == {}


def test_the_check_sees_an_edit() -> None:
    assert _edits_sys_path("import sys\nsys.path.insert(0, '.')\n") == [2]
    assert _edits_sys_path("import os\nos.path.join('a')\n") == []
