"""docs/design.md names every module of observe/ and trainer/ with its concern, and its floors are the
floors of the import contract: when code and page part, this fails and says what to write where."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    tomllib = None

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "design.md"
#: A line of the module tree: indentation (two spaces a level), a file or folder/, then its concern.
ENTRY = re.compile(r"^(?P<indent> *)(?P<name>\S+)(?: {2,}(?P<concern>\S.*))?$")


def section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def named_paths() -> dict[str, str]:
    """Every path the module tree names (folders end with ``/``) -> its concern."""
    block = section("Every module").split("```")[1]
    named: dict[str, str] = {}
    folders: list[str] = []
    for n, line in enumerate(block.splitlines(), 1):
        if not line.strip():
            continue
        m = ENTRY.match(line)
        assert m, f"docs/design.md, module tree line {n}: {line!r} is not 'NAME  concern'"
        depth, rest = divmod(len(m["indent"]), 2)
        assert not rest and depth <= len(folders), f"docs/design.md, module tree line {n}: indent {line!r} by 2"
        del folders[depth:]
        path = "".join(folders) + m["name"]
        assert m["concern"], f"docs/design.md: {path} has no concern beside it"
        assert path not in named, f"docs/design.md names {path} twice"
        named[path] = m["concern"]
        if m["name"].endswith("/"):
            folders.append(m["name"])
    return named


def modules() -> set[str]:
    """Every module and package folder of observe/ and trainer/ (a package's ``__init__.py`` stands
    for its folder, which the page names)."""
    found: set[str] = set()
    for package in ("observe", "trainer"):
        for path in (REPO / package).rglob("*.py"):
            relative = path.relative_to(REPO)
            if "__pycache__" in relative.parts:
                continue
            found.update(f"{'/'.join(relative.parts[:i])}/" for i in range(1, len(relative.parts)))
            if path.name != "__init__.py":
                found.add(relative.as_posix())
    return found


def test_the_page_names_every_module_and_folder() -> None:
    missing = sorted(modules() - set(named_paths()))
    assert not missing, f"docs/design.md, 'Every module': add a line with its concern for {', '.join(missing)}"


def test_every_path_the_page_names_exists() -> None:
    gone = sorted(path for path in named_paths() if not (REPO / path).exists())
    assert not gone, f"docs/design.md names what does not exist: {', '.join(gone)}; remove or rename the lines"


def floors_of_the_contract() -> list[str]:
    assert tomllib is not None
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (floors,) = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c["type"] == "layers" and c.get("containers") == ["observe"]
    ]
    return [" ".join(layer.split()) for layer in floors["layers"]]


@pytest.mark.skipif(tomllib is None, reason="reading pyproject.toml needs tomllib (Python 3.11+)")
def test_the_floors_are_the_import_contracts_floors() -> None:
    rows = re.findall(r"^\| \d+ \| `([^`]+)` \|", section("Floors"), re.M)
    assert [row.replace("\\|", "|") for row in rows] == floors_of_the_contract(), (
        "docs/design.md's floor table and pyproject.toml's layers contract for observe differ: make them the same"
    )
