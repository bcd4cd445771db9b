"""Fixtures for the Kubernetes tests: the recorded API server, kubeconfigs, the CRD schema."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.fake_apiserver import RecordedAPIServer, Reply, write_kubeconfig
from tests.support.kube_checks import SCHEMAS, crd_schema


@pytest.fixture
def api_server():
    """``api_server(routes)`` starts a RecordedAPIServer; all are stopped after the test."""
    started: list[RecordedAPIServer] = []

    def start(routes: dict[tuple[str, str], Reply]) -> RecordedAPIServer:
        server = RecordedAPIServer(routes)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def kubeconfig(tmp_path: Path):
    """``kubeconfig(server_url, namespace=..., token=...)`` writes a kubeconfig, returns its path."""

    def write(server: str, **kwargs: str) -> str:
        return str(write_kubeconfig(tmp_path / "kubeconfig", server, **kwargs))

    return write


@pytest.fixture(scope="session")
def pytorchjob_schema() -> dict:
    """openAPIV3Schema of the training operator's PyTorchJob CRD (tests/schemas copy)."""
    crd = yaml.safe_load((SCHEMAS / "kubeflow.org_pytorchjobs.yaml").read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


@pytest.fixture(scope="session")
def trainjob_schema() -> dict:
    """openAPIV3Schema of Kubeflow Trainer v2.3's TrainJob CRD (tests/schemas copy)."""
    return crd_schema("trainer.kubeflow.org_trainjobs.yaml")


@pytest.fixture(scope="session")
def clustertrainingruntime_schema() -> dict:
    """openAPIV3Schema of Kubeflow Trainer v2.3's ClusterTrainingRuntime CRD (tests/schemas copy)."""
    return crd_schema("trainer.kubeflow.org_clustertrainingruntimes.yaml")
