"""Helpers of the Kubernetes tests: build with the real kubectl, walk objects beside schemas."""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.crd_yaml import load_all

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "tests" / "schemas"
#: A current Kubernetes minor for kubernetes-validate.
K8S_VERSION = "1.34.0"


@functools.cache
def crd_schema(file: str) -> dict:
    """openAPIV3Schema of the one version of a CustomResourceDefinition under tests/schemas (read
    once per process: the files are large; do not change what it returns)."""
    crd = yaml.safe_load((SCHEMAS / file).read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def kustomize(path: Path) -> list[dict]:
    """Objects of ``kubectl kustomize path`` (the real kubectl; no cluster needed)."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is needed for the manifest tests (with its built-in kustomize)"
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [doc for doc in load_all(out.stdout) if doc]  # kustomize writes AlertmanagerConfig's `matchType: =` bare


def unknown_fields(obj: object, schema: dict, where: str = "") -> list[str]:
    """Paths in ``obj`` that ``schema`` does not declare.

    CRD schemas (and jsonschema) accept unknown properties, so a misspelt field passes plain
    validation; this walks the object beside its schema and lists every key that is neither a
    declared property nor allowed by ``additionalProperties``/``x-kubernetes-preserve-unknown-fields``.
    """
    found: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return found
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if props is not None and key in props:
                found += unknown_fields(value, props[key], f"{where}.{key}")
            elif isinstance(extra, dict):
                found += unknown_fields(value, extra, f"{where}.{key}")
            elif props is not None or extra is False:
                found.append(f"{where}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            found += unknown_fields(item, schema["items"], f"{where}[{i}]")
    return found


_VALIDATORS: dict[int, object] = {}


def validate_against(obj: object, schema: dict) -> None:
    """``jsonschema`` validation with the validator built once per schema (the CRD is large).

    Raises:
        jsonschema.ValidationError: the first violation.
    """
    import jsonschema

    validator = _VALIDATORS.get(id(schema))
    if validator is None:
        validator = _VALIDATORS[id(schema)] = jsonschema.validators.validator_for(schema)(schema)
    validator.validate(obj)
