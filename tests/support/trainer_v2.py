"""What Kubeflow Trainer v2 makes of a TrainJob, for tests where no Trainer controller can run.

A stand-in, written from Trainer v2.3's code (kubeflow/trainer): the runtime framework merges the
TrainJob's ``runtimePatches`` and ``spec.trainer`` into the runtime's pod template
(``pkg/runtime/framework``), the torch plugin adds torchrun's static rendezvous variables and the
trainer port (``plugins/torch/torch.go``), the TrainJobStatus plugin (feature gate
``TrainJobStatus``) adds the progress endpoint's variables and token volume
(``plugins/trainjobstatus``), and JobSet and the Job controller name and label the pod
(``<job>-node-0-<rank>-<random>``, host name ``<job>-node-0-<rank>``, subdomain ``<job>``). The
pods these give are checked as strict v1 Pods, so a field in the wrong place still fails.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.support.kube_checks import SCHEMAS

#: ``constants.ContainerTrainerPort``: PET_MASTER_PORT, and the port the plugin declares.
TRAINER_PORT = 29500
#: What the TrainJobStatus plugin mounts and points its variables at.
STATUS_MOUNT = "/var/run/secrets/kubeflow/trainer"


def stock_runtime() -> dict[str, Any]:
    """The ``torch-distributed`` ClusterTrainingRuntime Trainer v2.3 installs (tests/schemas copy)."""
    return yaml.safe_load((SCHEMAS / "runtime-torch_distributed.yaml").read_text())


def pet_env(
    job: dict[str, Any], node_rank: int, master_addr: str | None = None, master_port: int = TRAINER_PORT
) -> dict[str, str]:
    """The torch plugin's ``PET_*`` variables for node ``node_rank`` of TrainJob ``job``.

    ``master_addr`` replaces the cluster DNS name ``<job>-node-0-0.<job>`` (a local run has none).
    """
    name, trainer = job["metadata"]["name"], job["spec"]["trainer"]
    return {
        "PET_NNODES": str(trainer.get("numNodes", 1)),
        "PET_NPROC_PER_NODE": str(trainer.get("numProcPerNode", "auto")),
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": master_addr or f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": str(master_port),
    }


def status_env(job: dict[str, Any]) -> dict[str, str]:
    """The TrainJobStatus plugin's variables (the URL of the controller's status endpoint)."""
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    return {
        "KUBEFLOW_TRAINER_SERVER_URL": "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
        f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status",
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": f"{STATUS_MOUNT}/ca.crt",
        "KUBEFLOW_TRAINER_SERVER_TOKEN": f"{STATUS_MOUNT}/token",
    }


def _upsert(items: list[dict[str, Any]], new: list[dict[str, Any]], key: str = "name") -> list[dict[str, Any]]:
    out = {item[key]: item for item in items}
    out.update({item[key]: item for item in new})
    return list(out.values())


def effective_pod(
    job: dict[str, Any], node_rank: int = 0, runtime: dict[str, Any] | None = None, with_status: bool = True
) -> dict[str, Any]:
    """The v1 Pod of node ``node_rank`` that TrainJob ``job`` gets on ``runtime`` (default the stock one).

    Raises:
        AssertionError: the patch or trainer targets a replicated job or container the runtime lacks.
    """
    runtime = runtime or stock_runtime()
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    (rjob,) = [r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"] if r["name"] == "node"]
    template = copy.deepcopy(rjob["template"]["spec"]["template"])
    meta, spec = template.setdefault("metadata", {}), template["spec"]
    for patch in job["spec"].get("runtimePatches") or []:
        for r in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            assert r["name"] == rjob["name"], f"the runtime has no replicated job {r['name']}"
            pod_patch = r["template"]["spec"]["template"]
            for field in ("labels", "annotations"):
                meta[field] = {**meta.get(field, {}), **pod_patch.get("metadata", {}).get(field, {})}
            patch_spec = dict(pod_patch.get("spec", {}))
            for c in patch_spec.pop("containers", []):
                (target,) = [t for t in spec["containers"] if t["name"] == c["name"]]
                target.update({k: v for k, v in c.items() if k not in ("env", "volumeMounts")})
                target["env"] = _upsert(target.get("env", []), c.get("env", []))
                target["volumeMounts"] = _upsert(target.get("volumeMounts", []), c.get("volumeMounts", []))
            spec["volumes"] = _upsert(spec.get("volumes", []), patch_spec.pop("volumes", []))
            spec.update(patch_spec)
    (node,) = [c for c in spec["containers"] if c["name"] == "node"]
    trainer = job["spec"]["trainer"]
    node.update({k: trainer[k] for k in ("image", "command", "args") if k in trainer})
    if "resourcesPerNode" in trainer:
        node["resources"] = trainer["resourcesPerNode"]
    pet = [{"name": k, "value": v} for k, v in pet_env(job, node_rank).items()]
    pet[2] = {
        "name": "PET_NODE_RANK",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
    }
    node["env"] = _upsert(node.get("env", []), [*trainer.get("env", []), *pet])
    node["ports"] = [{"containerPort": TRAINER_PORT, "protocol": "TCP"}]
    if with_status:
        node["env"] = _upsert(node["env"], [{"name": k, "value": v} for k, v in status_env(job).items()])
        node["volumeMounts"] = _upsert(
            node.get("volumeMounts", []),
            [{"name": "kubeflow-trainer-token", "mountPath": STATUS_MOUNT, "readOnly": True}],
        )
        spec["volumes"] = _upsert(
            spec.get("volumes", []),
            [
                {
                    "name": "kubeflow-trainer-token",
                    "projected": {
                        "sources": [
                            {
                                "serviceAccountToken": {
                                    "audience": f"trainer.kubeflow.org/{namespace}/{name}",
                                    "expirationSeconds": 3600,
                                    "path": "token",
                                }
                            },
                            {
                                "configMap": {
                                    "name": f"{name}-tls-config",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ]
                    },
                }
            ],
        )
    job_name = f"{name}-node-0"
    meta["labels"] = {
        **meta.get("labels", {}),
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-name": job_name,
        "batch.kubernetes.io/job-completion-index": str(node_rank),
    }
    meta["annotations"] = {**meta.get("annotations", {}), "batch.kubernetes.io/job-completion-index": str(node_rank)}
    spec.update(hostname=f"{job_name}-{node_rank}", subdomain=name, restartPolicy="OnFailure")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job_name}-{node_rank}-x7k2p", "namespace": namespace, **meta},
        "spec": spec,
    }
