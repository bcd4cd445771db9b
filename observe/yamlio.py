"""The one YAML writer of fsdp-observe (manifests, rule files, Alertmanager configuration).

Block style, keys in the order built, no anchors, multi-line text as ``|`` blocks, UTF-8 text
kept as written.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml


class _ManifestDumper(yaml.SafeDumper):
    """SafeDumper that never writes anchors (``&id001``) and writes multi-line text as ``|`` blocks."""

    def ignore_aliases(self, data: Any) -> bool:  # PyYAML's hook
        return True


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_ManifestDumper.add_representer(str, _str_presenter)


def dump(obj: Any) -> str:
    """One manifest as YAML text (keys keep their insertion order)."""
    return yaml.dump(
        obj, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False, width=120, allow_unicode=True
    )


def dump_all(objs: Iterable[Any]) -> str:
    """Several manifests as one multi-document YAML stream (``---`` between documents)."""
    return yaml.dump_all(
        list(objs),
        Dumper=_ManifestDumper,
        sort_keys=False,
        default_flow_style=False,
        width=120,
        explicit_start=True,
        allow_unicode=True,
    )
