"""Read YAML holding a bare ``=`` as Kubernetes does: prometheus-operator's CRDs (matcher enums) and
``kubectl kustomize`` output of an ``AlertmanagerConfig`` (``matchType: =``).

YAML 1.1 gives ``=`` the "value" tag, which PyYAML's safe loader has no constructor for; Kubernetes
(YAML 1.2) reads it as the string ``"="``. This loader does the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


class _Loader(yaml.SafeLoader):
    """SafeLoader without the YAML 1.1 ``value`` resolver, so ``=`` is a plain string."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(path: Path) -> Any:
    """The YAML document at ``path``, ``=`` read as a string."""
    return yaml.load(path.read_text(), Loader=_Loader)


def load_all(text: str) -> Iterator[Any]:
    """Every document of a YAML stream, ``=`` read as a string."""
    return yaml.load_all(text, Loader=_Loader)
