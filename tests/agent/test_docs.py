"""docs/agent.md documents every /snapshot field and every flag (the TUI and operators rely on it)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from observe import model
from observe.agent.redact import MAX_ARG_CHARS, MAX_COMMAND_CHARS
from observe.cli.agent import build_parser

DOC = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()


def test_every_snapshot_field_is_documented() -> None:
    classes = [obj for obj in vars(model).values() if dataclasses.is_dataclass(obj)]
    missing = [
        f"{cls.__name__}.{f.name}"
        for cls in classes
        for f in dataclasses.fields(cls)
        if not re.search(rf"`{f.name}`|\b{f.name}\b", DOC)
    ]
    assert not missing


def test_every_flag_is_documented() -> None:
    flags = [o for action in build_parser()._actions for o in action.option_strings if o.startswith("--")]
    assert [f for f in flags if f != "--help" and f"`{f}`" not in DOC] == []


def test_the_documented_cut_lengths_are_the_real_ones() -> None:
    assert f"**{MAX_ARG_CHARS}**" in DOC and f"**{MAX_COMMAND_CHARS:,}**" in DOC
    assert f"`schema_version` is `{model.SCHEMA_VERSION}`" in DOC
