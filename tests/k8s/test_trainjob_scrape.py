"""The two trainer PodMonitors of ``daemonsets/`` scrape every rank of a PyTorchJob and of a TrainJob,
each exactly once.

A PyTorchJob's pods declare ``metrics-<r>`` ports (``trainer-podmonitor.yaml`` selects them by
name); a TrainJob's runtime patch cannot declare ports, so its pods carry
``fsdp-observe/metrics-port-<r>`` annotations (``trainer-podmonitor-trainjob.yaml`` relabels the
address from them). No Prometheus can discover pods here (that needs an API server): the pods'
targets and their relabelling follow Prometheus' semantics in ``tests/support/relabel.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest
import yaml

from observe.k8s.job_settings import settings_from_mapping
from observe.k8s.kinds import pytorchjob, trainjob
from tests.support.kube_checks import REPO, crd_schema, unknown_fields, validate_against
from tests.support.relabel import pod_targets, relabel
from tests.support.trainer_v2 import effective_pod

DAEMONSETS = REPO / "daemonsets"
MONITORS = ("trainer-podmonitor.yaml", "trainer-podmonitor-trainjob.yaml")
SETTINGS = {"IMAGE_URI": "r/fsdp-observe:1", "GPU_PER_NODE": 4, "METRICS_PORT": 9600}
IP = "10.1.2.3"


def monitors() -> list[dict]:
    return [yaml.safe_load((DAEMONSETS / name).read_text()) for name in MONITORS]


def scraped(pod: dict) -> Counter[str]:
    """Addresses both monitors scrape on ``pod``: selector, then (for a named port, the operator's
    keep on the port name) the endpoint's relabelling."""
    pod = {**pod, "status": {"podIP": IP}}
    found: Counter[str] = Counter()
    for monitor in monitors():
        if not monitor["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items():
            continue
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            configs = list(endpoint.get("relabelings", []))
            if "port" in endpoint:
                configs.insert(
                    0,
                    {
                        "sourceLabels": ["__meta_kubernetes_pod_container_port_name"],
                        "regex": endpoint["port"],
                        "action": "keep",
                    },
                )
            for target in pod_targets(pod):
                kept = relabel(target, configs)
                if kept is not None:
                    found[kept["__address__"]] += 1
    return found


def test_both_monitors_are_podmonitors_the_operator_accepts() -> None:
    schema = crd_schema("monitoring.coreos.com_podmonitors.yaml")
    for monitor in monitors():
        validate_against(monitor, schema)
        assert unknown_fields(monitor, schema) == []


def test_a_trainjob_pod_is_scraped_once_per_rank() -> None:
    job = trainjob.render(settings_from_mapping({**SETTINGS, "JOB_KIND": "TrainJob"}), "r")
    assert scraped(effective_pod(job, 1)) == Counter(f"{IP}:{9600 + r}" for r in range(4))


def test_a_pytorchjob_pod_is_scraped_once_per_rank() -> None:
    job = pytorchjob.render(settings_from_mapping(SETTINGS), "r")
    template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    pod = {"metadata": {"name": "j-worker-0", **template["metadata"]}, "spec": template["spec"]}
    assert scraped(pod) == Counter(f"{IP}:{9600 + r}" for r in range(4))


@pytest.mark.parametrize("ranks", [1, 8])
def test_the_annotations_reach_every_rank_the_monitor_has_an_endpoint_for(ranks: int) -> None:
    job = trainjob.render(settings_from_mapping({**SETTINGS, "JOB_KIND": "TrainJob", "GPU_PER_NODE": ranks}), "r")
    assert sorted(scraped(effective_pod(job, 0)).values()) == [1] * ranks
