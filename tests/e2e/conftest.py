"""Fixtures of the end-to-end tests; every test under tests/e2e/ is marked ``e2e``.

``python -m pytest -m "not e2e"`` is the inner loop (no torchrun, no real servers); CI and the
README's test command run everything.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path

import pytest

from tests.support.env import child_env


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test of this folder ``e2e`` (multi-process or real-server)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


#: Standard-library modules cut into paragraphs: several hundred short documents, so a small
#: ``--val-fraction`` holds some out and packing crosses many document boundaries.
CORPUS_SOURCES = ("argparse.py", "json/decoder.py", "textwrap.py", "shlex.py")


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> Path:
    """A directory with one ``docs.jsonl`` file of real text (one paragraph per document)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = tmp_path_factory.mktemp("corpus")
    with (out / "docs.jsonl").open("w") as fh:
        for name in CORPUS_SOURCES:
            for paragraph in (root / name).read_text().split("\n\n"):
                if paragraph.strip():
                    fh.write(json.dumps({"text": paragraph}) + "\n")
    return out


@pytest.fixture(scope="session")
def session_env() -> dict[str, str]:
    """``subprocess_env`` for module- and session-scoped fixtures (the same ``child_env``)."""
    return child_env()
