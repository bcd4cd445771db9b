"""The Kubeflow training operator's ``kubeflow.org/v1`` PyTorchJob (legacy, and the elastic kind).

The shape follows the AWS EKS FSDP walkthroughs (one ``Worker`` replica set, one pod per node,
torchrun started by the pod, an ``elasticPolicy`` the training operator turns into torchrun's
``PET_*`` rendezvous variables, ``/dev/shm`` in memory) with what they lacked: a unique
rendezvous id per job, named metrics ports per rank with the labels the trainer PodMonitor selects,
the Hugging Face token taken from a Secret only, real weights and a shared checkpoint volume
(``observe.k8s.pod``, ``observe.k8s.storage``), and a launcher whose exit status tells a stopped pod
from a failed one (``restartPolicy: ExitCode``). Field names follow the CRD in
``tests/schemas/kubeflow.org_pytorchjobs.yaml`` (training-operator release-1.9).
"""

from __future__ import annotations

from typing import Any

from observe.errors import UserError
from observe.k8s import pod
from observe.k8s.job_settings import ETCD_BACKENDS, JobSettings
from observe.k8s.kinds.base import JobKind, JobState, default_of, int_label, last_true_condition

#: The training operator fills in its defaults (the c10d port) only for a container of this name.
TRAINER_CONTAINER = "pytorch"
#: The operator's rendezvous port for c10d (kubeflow training-operator ``pytorchjob-port``).
OPERATOR_PORT_NAME = "pytorchjob-port"
OPERATOR_PORT = 23456
#: Labels the training operator sets on a PyTorchJob's pods.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
#: ``<job>-worker-<index>`` names pods and Services; the operator requires a DNS-1035 label
#: (≤ 63 characters) for them.
WORKER_INFIX = "-worker-"
#: Kubeflow's ``restartPolicy: ExitCode``: the operator recreates a pod whose container exited
#: 128-255 (a signal: 143 SIGTERM on eviction or preemption, 137 SIGKILL or the OOM killer) and
#: fails the job for 1-127 (2: a user mistake, 1: a failure), instead of restarting it forever.
RESTART_POLICY = "ExitCode"
#: Settings only a TrainJob reads.
TRAINJOB_ONLY = (("RUNTIME", "runtime"), ("RUNTIME_KIND", "runtime_kind"))


def trainer_command(s: JobSettings, run_id: str) -> list[str]:
    """The worker's command (``observe.k8s.pod.launch_command``) with ``--nproc-per-node``: the
    operator's ``nprocPerNode`` reaches torchrun only as this flag's default."""
    return pod.launch_command(s, run_id, nproc_per_node=s.ranks_per_node)


def render(s: JobSettings, run_id: str | None = None) -> dict[str, Any]:
    """The PyTorchJob for settings ``s``.

    Args:
        s: validated settings (``JobSettings.validate()``); checked here for this kind.
        run_id: the rendezvous id; a new one from ``observe.k8s.pod.new_run_id`` when ``None``.

    Returns:
        The manifest as a JSON-compatible dict.

    Raises:
        UserError: settings a PyTorchJob cannot have (``PyTorchJobKind.check``).
    """
    PYTORCHJOB.check(s)
    run_id = run_id or pod.new_run_id(s.job_name)
    lo, hi = s.node_range
    host, port = s.rdzv_endpoint
    elastic: dict[str, Any] = {"rdzvBackend": s.rdzv_backend, "rdzvId": run_id}
    if host is not None:
        elastic["rdzvHost"] = host
    if port is not None:
        elastic["rdzvPort"] = port
    elastic.update(minReplicas=lo, maxReplicas=hi, maxRestarts=s.max_restarts)
    labels = pod.labels(s, run_id)
    return {
        "apiVersion": PYTORCHJOB.api_version,
        "kind": PYTORCHJOB.kind,
        "metadata": {"name": s.job_name, "namespace": s.namespace, "labels": labels},
        "spec": {
            "elasticPolicy": elastic,
            "nprocPerNode": str(s.ranks_per_node),
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": s.num_nodes,
                    "restartPolicy": RESTART_POLICY,
                    "template": {"metadata": {"labels": dict(labels)}, "spec": _pod_spec(s, run_id)},
                },
            },
        },
    }


def _pod_spec(s: JobSettings, run_id: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": pod.pod_security_context(s),
        "containers": [_container(s, run_id)],
        "volumes": pod.volumes(s),
    }
    if (selector := pod.node_selector(s)) is not None:
        spec["nodeSelector"] = selector
    if (tolerations := pod.tolerations(s)) is not None:
        spec["tolerations"] = tolerations
    return spec


def _container(s: JobSettings, run_id: str) -> dict[str, Any]:
    ports = [{"name": OPERATOR_PORT_NAME, "containerPort": OPERATOR_PORT, "protocol": "TCP"}]
    ports += [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in pod.metrics_ports(s)]
    container: dict[str, Any] = {
        "name": TRAINER_CONTAINER,
        "image": s.image,
        "command": trainer_command(s, run_id),
        "env": pod.env(s, run_id),
        "ports": ports,
        "volumeMounts": pod.volume_mounts(s),
        "securityContext": pod.container_security_context(),
    }
    if wanted := pod.devices(s):
        container["resources"] = {"requests": dict(wanted), "limits": dict(wanted)}
    return container


class PyTorchJobKind(JobKind):
    """``kubeflow.org/v1`` PyTorchJob: elastic (``MIN_NODES..MAX_NODES``), any torchrun rendezvous
    backend, pods ``<job>-worker-<i>`` labelled by the training operator."""

    kind = "PyTorchJob"
    group, version, plural = "kubeflow.org", "v1", "pytorchjobs"
    install = "install the Kubeflow training operator (docs/kubernetes.md, prerequisites)"
    container = TRAINER_CONTAINER

    def check(self, s: JobSettings) -> None:
        """Pod names ``<job>-worker-<i>`` fit in 63 characters; no TrainJob-only setting.

        Raises:
            UserError: ``JOB_NAME`` too long, or ``RUNTIME``/``RUNTIME_KIND`` set.
        """
        longest = 63 - len(WORKER_INFIX) - len(str(max(s.node_range[1] - 1, 0)))
        if len(s.job_name) > longest:
            raise UserError(
                "JOB_NAME",
                f"{s.job_name!r} is {len(s.job_name)} characters; "
                f"pod names '{s.job_name}{WORKER_INFIX}N' must fit in 63",
                f"use {longest} characters or fewer",
            )
        for key, name in TRAINJOB_ONLY:
            if getattr(s, name) != default_of(name):
                raise UserError(
                    key,
                    "names a Kubeflow Trainer runtime, which only a TrainJob uses",
                    "remove it, or set JOB_KIND=TrainJob",
                )

    def render(self, s: JobSettings, run_id: str) -> list[dict[str, Any]]:
        """The PyTorchJob alone (``render``)."""
        return [render(s, run_id)]

    def policy_ports(self, s: JobSettings) -> list[dict[str, Any]]:
        """By name (``metrics-<r>``): the pods declare them."""
        return [{"port": name, "protocol": "TCP"} for name, _ in pod.metrics_ports(s)]

    def pod_selector(self, name: str) -> str:
        """``training.kubeflow.org/job-name=<name>``."""
        return f"{JOB_NAME_LABEL}={name}"

    def node_index(self, labels: dict[str, str]) -> int | None:
        """The operator's replica index."""
        return int_label(labels, REPLICA_INDEX_LABEL)

    def state(self, job: dict[str, Any]) -> JobState:
        """The last condition that is ``True`` (``Created``, ``Running``, ``Succeeded``, ``Failed``,
        ``Restarting``, ``Suspended``), else ``Pending``."""
        return last_true_condition(job) or JobState("Pending")

    def describe(self, job: dict[str, Any]) -> list[str]:
        """The rendezvous: backend, endpoint, id, node range and restarts from ``elasticPolicy``."""
        e = (job.get("spec") or {}).get("elasticPolicy") or {}
        endpoint = f" at {e['rdzvHost']}:{e.get('rdzvPort', '')}".rstrip(":") if e.get("rdzvHost") else ""
        return [
            f"rendezvous: {e.get('rdzvBackend', 'c10d')}{endpoint}, id {e.get('rdzvId', 'n/a')}, "
            f"nodes {e.get('minReplicas', '?')}..{e.get('maxReplicas', '?')}, max restarts {e.get('maxRestarts', '?')}"
        ]

    def suspend_patch(self) -> dict[str, Any]:
        """``spec.runPolicy.suspend: true`` (the operator deletes the pods)."""
        return {"spec": {"runPolicy": {"suspend": True}}}

    def etcd_host(self, job: dict[str, Any]) -> str | None:
        """``elasticPolicy.rdzvHost`` of an etcd or etcd-v2 rendezvous (torchrun's state outlives
        the job there, and a job reusing it meets ``RendezvousClosedError``)."""
        elastic = (job.get("spec") or {}).get("elasticPolicy") or {}
        if elastic.get("rdzvBackend") not in ETCD_BACKENDS:
            return None
        return str(elastic.get("rdzvHost") or "")


PYTORCHJOB = PyTorchJobKind()
