"""The schema copies under tests/schemas/ stay equal to the shared originals (``../shared/schemas/``,
beside the checkout on the machines where the project is developed) while those exist."""

from __future__ import annotations

import pytest

from tests.support.kube_checks import REPO, SCHEMAS

SHARED = REPO.parent / "shared" / "schemas"

#: copy -> a line it must hold (what it is)
COPIES = {
    "kubeflow.org_pytorchjobs.yaml": "kind: PyTorchJob",
    "monitoring.coreos.com_alertmanagerconfigs.yaml": "kind: AlertmanagerConfig",
    "monitoring.coreos.com_podmonitors.yaml": "kind: PodMonitor",
    "trainer.kubeflow.org_trainjobs.yaml": "kind: TrainJob",
    "trainer.kubeflow.org_trainingruntimes.yaml": "kind: TrainingRuntime",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml": "kind: ClusterTrainingRuntime",
    "runtime-torch_distributed.yaml": "name: torch-distributed",
}


@pytest.mark.parametrize("name", sorted(COPIES))
def test_the_copy_equals_the_shared_file(name: str) -> None:
    copy = SCHEMAS / name
    assert COPIES[name] in copy.read_text()
    shared = SHARED / name
    if shared.exists():  # a clean clone without ../shared has only the copy, which is then the truth
        assert copy.read_bytes() == shared.read_bytes()


def test_every_copy_is_listed() -> None:
    assert sorted(p.name for p in SCHEMAS.glob("*.yaml")) == sorted(COPIES)
