"""DESIGN.md's import rule: observe.agent uses only observe.catalog, observe.model and observe.xid of the
project (never trainer, the TUI or torch); observe.model and observe.xid use the standard library only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

OBSERVE = Path(__file__).resolve().parents[2] / "observe"


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_agent_imports_only_what_it_may() -> None:
    allowed_project = {"observe", "observe.catalog", "observe.model", "observe.xid", "observe.usage"}
    allowed_third_party = {"psutil", "pynvml", "prometheus_client"}
    for path in (OBSERVE / "agent").rglob("*.py"):
        for name in imported(path):
            top = name.split(".")[0]
            if name.startswith("observe.agent"):
                continue
            assert (name in allowed_project or top in allowed_third_party or top in sys.stdlib_module_names
                    or name.startswith("prometheus_client.")), f"{path.name} imports {name}"


def test_model_and_xid_need_only_the_standard_library() -> None:
    for path in (OBSERVE / "model.py", OBSERVE / "xid.py"):
        for name in imported(path):
            assert name == "observe.model" or name.split(".")[0] in sys.stdlib_module_names, f"{path.name}: {name}"
