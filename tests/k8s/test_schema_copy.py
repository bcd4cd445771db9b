"""The schema copies under tests/schemas/ stay equal to the shared originals (``../shared/schemas/``,
beside the checkout on the machines where the project is developed) while those exist."""

from __future__ import annotations

from tests.support.kube_checks import REPO, SCHEMAS

SHARED = REPO.parent / "shared" / "schemas"


def test_the_pytorchjob_crd_copy_equals_the_shared_file() -> None:
    copy = SCHEMAS / "kubeflow.org_pytorchjobs.yaml"
    assert "kind: PyTorchJob" in copy.read_text()
    shared = SHARED / copy.name
    if shared.exists():  # a clean clone without ../shared has only the copy, which is then the truth
        assert copy.read_bytes() == shared.read_bytes()


def test_the_alertmanagerconfig_crd_copy_equals_the_shared_file() -> None:
    copy = SCHEMAS / "monitoring.coreos.com_alertmanagerconfigs.yaml"
    assert "kind: AlertmanagerConfig" in copy.read_text()
    shared = SHARED / copy.name
    if shared.exists():
        assert copy.read_bytes() == shared.read_bytes()
