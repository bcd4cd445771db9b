"""Kubeflow Trainer v2's ``trainer.kubeflow.org/v1alpha1`` TrainJob, on a training runtime.

A TrainJob names a runtime (``RUNTIME``, by default the stock ``torch-distributed``
ClusterTrainingRuntime; ``RUNTIME_KIND=TrainingRuntime`` for a namespaced one) and says in
``spec.trainer`` what the runtime leaves open: image, command, environment, ``numNodes``,
``numProcPerNode`` and ``resourcesPerNode``. The runtime's JobSet runs one replicated job
``node`` with a container ``node`` per node; the torch plugin gives that container torchrun's
static rendezvous (``PET_NNODES``, ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``
``<job>-node-0-0.<job>``, ``PET_MASTER_PORT``), so the command carries no rendezvous flag.

What ``spec.trainer`` cannot say reaches the pod through one ``runtimePatches`` entry (manager
``fsdp-observe``): the trainer labels (the PodMonitor and ``top --kube`` find the pods by them),
the ranks' metrics ports as pod annotations (a patch cannot declare container ports:
``observe.k8s.names.trainer_port_annotation``), the hardened pod and container security contexts,
``/dev/shm`` and the weights and checkpoint volumes and their mounts, the node selector and GPU
toleration, and a service account whose ServiceAccount mounts no API token (a patch cannot set
``automountServiceAccountToken``). Field names follow the CRD in
``tests/schemas/trainer.kubeflow.org_trainjobs.yaml`` (Trainer v2.3).
"""

from __future__ import annotations

from typing import Any

from observe.errors import UserError
from observe.k8s import names, pod
from observe.k8s.job_settings import JobSettings
from observe.k8s.kinds.base import JobKind, JobState, default_of, int_label, last_true_condition
from observe.k8s.names import DNS1123_SUBDOMAIN

#: Trainer's name for the trainer's replicated job and its container (``constants.Node``).
NODE = "node"
#: Pod host names are ``<job>-node-0-<node rank>`` (JobSet: ``<jobset>-<replicated job>-<job
#: index>-<pod index>``); a host name is a DNS-1035 label of at most 63 characters.
HOSTNAME_INFIX = f"-{NODE}-0-"
#: The runtime kinds a TrainJob may name.
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
#: ``runtimePatches[].manager`` of our patch.
PATCH_MANAGER = names.APP
#: JobSet's label on every pod of a JobSet, which a TrainJob's JobSet is named after.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: The Job controller's label on an indexed Job's pod: its index, here the node rank.
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
#: Settings of a PyTorchJob's elastic rendezvous, which Trainer v2 does not have.
RENDEZVOUS_SETTINGS = (
    ("RDZV_BACKEND", "rdzv_backend"),
    ("RDZV_HOST", "rdzv_host"),
    ("RDZV_PORT", "rdzv_port"),
    ("MAX_RESTARTS", "max_restarts"),
)


def render(s: JobSettings, run_id: str | None = None) -> dict[str, Any]:
    """The TrainJob for settings ``s`` (the module docstring says what goes where).

    Args:
        s: validated settings (``JobSettings.validate()``); checked here for this kind.
        run_id: the run id (pods' ``fsdp-observe/run-id`` label, the trainer's ``run_id``); a new
            one from ``observe.k8s.pod.new_run_id`` when ``None``.

    Raises:
        UserError: settings a TrainJob cannot have (``TrainJobKind.check``).
    """
    TRAINJOB.check(s)
    run_id = run_id or pod.new_run_id(s.job_name)
    labels = pod.labels(s, run_id)
    trainer: dict[str, Any] = {
        "image": s.image,
        "command": pod.launch_command(s, run_id, nproc_per_node=None),  # PET_NPROC_PER_NODE from numProcPerNode
        "env": pod.env(s, run_id),
        "numNodes": s.num_nodes,
        "numProcPerNode": s.ranks_per_node,
    }
    if wanted := pod.devices(s):
        trainer["resourcesPerNode"] = {"requests": dict(wanted), "limits": dict(wanted)}
    return {
        "apiVersion": TRAINJOB.api_version,
        "kind": TRAINJOB.kind,
        "metadata": {"name": s.job_name, "namespace": s.namespace, "labels": labels},
        "spec": {
            "runtimeRef": {"apiGroup": TRAINJOB.group, "kind": s.runtime_kind, "name": s.runtime},
            "trainer": trainer,
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {"name": NODE, "template": {"spec": {"template": _pod_patch(s, labels)}}}
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }


def _pod_patch(s: JobSettings, labels: dict[str, str]) -> dict[str, Any]:
    annotations = {names.trainer_port_annotation(r): str(port) for r, (_, port) in enumerate(pod.metrics_ports(s))}
    spec: dict[str, Any] = {
        "serviceAccountName": names.TRAINER_SERVICE_ACCOUNT,
        "securityContext": pod.pod_security_context(s),
        "containers": [
            {"name": NODE, "securityContext": pod.container_security_context(), "volumeMounts": pod.volume_mounts(s)}
        ],
        "volumes": pod.volumes(s),
    }
    if (selector := pod.node_selector(s)) is not None:
        spec["nodeSelector"] = selector
    if (tolerations := pod.tolerations(s)) is not None:
        spec["tolerations"] = tolerations
    return {"metadata": {"labels": dict(labels), "annotations": annotations}, "spec": spec}


def service_account(namespace: str) -> dict[str, Any]:
    """The ranks' ServiceAccount in ``namespace``: no API token is mounted into its pods (torchrun
    and the trainer never call the Kubernetes API). Trainer's progress token is a projected
    volume of its own, which this does not stop."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": names.TRAINER_SERVICE_ACCOUNT,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": names.APP, "app.kubernetes.io/component": "trainer"},
        },
        "automountServiceAccountToken": False,
    }


class TrainJobKind(JobKind):
    """``trainer.kubeflow.org/v1alpha1`` TrainJob: a fixed node count, Trainer's static rendezvous,
    pods of the runtime's JobSet."""

    kind = "TrainJob"
    group, version, plural = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
    install = "install Kubeflow Trainer v2 (docs/kubernetes.md, prerequisites)"
    container = NODE

    def check(self, s: JobSettings) -> None:
        """Host names fit; no elastic range; no rendezvous setting; a runtime of a known kind.

        Raises:
            UserError: naming the setting, and ``JOB_KIND=PyTorchJob`` where that kind can do it.
        """
        longest = 63 - len(HOSTNAME_INFIX) - len(str(max(s.num_nodes - 1, 0)))
        if len(s.job_name) > longest:
            raise UserError(
                "JOB_NAME",
                f"{s.job_name!r} is {len(s.job_name)} characters; pod host names '{s.job_name}{HOSTNAME_INFIX}N' "
                "must fit in 63",
                f"use {longest} characters or fewer",
            )
        lo, hi = s.node_range
        if (lo, hi) != (s.num_nodes, s.num_nodes):
            raise UserError(
                "MIN_NODES" if lo != s.num_nodes else "MAX_NODES",
                f"{lo}..{hi} is an elastic range, and a TrainJob runs a fixed NUM_NODES (Kubeflow Trainer v2 has "
                "no elastic policy)",
                "leave MIN_NODES and MAX_NODES out, or set JOB_KIND=PyTorchJob for an elastic job",
            )
        for key, name in RENDEZVOUS_SETTINGS:
            if getattr(s, name) != default_of(name):
                raise UserError(
                    key,
                    "a TrainJob's nodes meet in the static rendezvous Kubeflow Trainer gives them "
                    "(PET_MASTER_ADDR, PET_MASTER_PORT) and its pods are retried by the runtime",
                    f"remove {key}, or set JOB_KIND=PyTorchJob for torchrun's elastic rendezvous and restarts",
                )
        if s.runtime_kind not in RUNTIME_KINDS:
            raise UserError(
                "RUNTIME_KIND", f"unknown runtime kind {s.runtime_kind!r}", f"choose one of {', '.join(RUNTIME_KINDS)}"
            )
        if not (DNS1123_SUBDOMAIN.fullmatch(s.runtime) and len(s.runtime) <= 253):
            raise UserError(
                "RUNTIME",
                f"{s.runtime!r} is not a runtime name",
                "name one kubectl get clustertrainingruntimes lists, e.g. torch-distributed",
            )

    def render(self, s: JobSettings, run_id: str) -> list[dict[str, Any]]:
        """The ranks' ServiceAccount, then the TrainJob (``render``)."""
        job = render(s, run_id)
        return [service_account(s.namespace), job]

    def warnings(self, s: JobSettings) -> list[str]:
        """A TrainJob cannot say ``restartPolicy: ExitCode``."""
        return [
            "a TrainJob has no restartPolicy ExitCode (retry pods stopped by a signal, fail on an error): its "
            "pods are retried as the runtime's Job and JobSet failure policies say"
        ]

    def policy_ports(self, s: JobSettings) -> list[dict[str, Any]]:
        """By number: the pods cannot declare named ports (their annotations give the numbers)."""
        return [{"port": port, "protocol": "TCP"} for _, port in pod.metrics_ports(s)]

    def pod_selector(self, name: str) -> str:
        """``jobset.sigs.k8s.io/jobset-name=<name>`` (the JobSet is named after the TrainJob)."""
        return f"{JOBSET_NAME_LABEL}={name}"

    def node_index(self, labels: dict[str, str]) -> int | None:
        """The indexed Job's completion index (= ``PET_NODE_RANK``)."""
        return int_label(labels, COMPLETION_INDEX_LABEL)

    def state(self, job: dict[str, Any]) -> JobState:
        """``Complete``, ``Failed`` (with its reason) or ``Suspended`` from the conditions; else
        ``Running`` while a child Job has an active pod, else ``Pending``."""
        found = last_true_condition(job)
        if found is not None and found.condition in ("Complete", "Failed", "Suspended"):
            return found
        if any(j.get("active") for j in (job.get("status") or {}).get("jobsStatus") or []):
            return JobState("Running")
        return found or JobState("Pending")

    def describe(self, job: dict[str, Any]) -> list[str]:
        """The runtime and size; each child Job's pod counts (``jobsStatus``); the progress rank 0
        pushed (``trainerStatus``), or why there is none."""
        spec, status = job.get("spec") or {}, job.get("status") or {}
        ref, trainer = spec.get("runtimeRef") or {}, spec.get("trainer") or {}
        lines = [
            f"runtime: {ref.get('kind', RUNTIME_KINDS[0])} {ref.get('name', '?')}, "
            f"nodes {trainer.get('numNodes', '?')} x {trainer.get('numProcPerNode', '?')} ranks"
        ]
        jobs = status.get("jobsStatus") or []
        lines += [
            f"jobs: {j.get('name', '?')}: {j.get('active', 0)} active, {j.get('ready', 0)} ready, "
            f"{j.get('succeeded', 0)} succeeded, {j.get('failed', 0)} failed, {j.get('suspended', 0)} suspended"
            for j in jobs
        ] or ["jobs: none yet"]
        lines.append(_progress(status.get("trainerStatus")))
        return lines

    def suspend_patch(self) -> dict[str, Any]:
        """``spec.suspend: true`` (Trainer suspends the JobSet; its pods are deleted)."""
        return {"spec": {"suspend": True}}


def _progress(trainer_status: dict[str, Any] | None) -> str:
    if not trainer_status:
        return (
            "progress: none pushed (Kubeflow Trainer's TrainJobStatus feature gate is off, or no log window "
            "has closed yet)"
        )
    parts = []
    if (pct := trainer_status.get("progressPercentage")) is not None:
        parts.append(f"{pct}%")
    if (eta := trainer_status.get("estimatedRemainingSeconds")) is not None:
        parts.append(f"ETA {duration(int(eta))}")
    parts += [f"{m.get('name')} {m.get('value')}" for m in trainer_status.get("metrics") or []]
    when = trainer_status.get("lastUpdatedTime")
    return "progress: " + (", ".join(parts) or "pushed without figures") + (f" (at {when})" if when else "")


def duration(seconds: int) -> str:
    """``H:MM:SS`` (hours unbounded) for a count of seconds."""
    hours, rest = divmod(max(0, seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


TRAINJOB = TrainJobKind()
