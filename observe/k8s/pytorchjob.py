"""Build a Kubeflow ``kubeflow.org/v1`` PyTorchJob from validated ``JobSettings``.

The shape follows the AWS EKS FSDP walkthroughs (one ``Worker`` replica set, one pod per node,
torchrun started by the pod, an ``elasticPolicy`` the training operator turns into torchrun's
``PET_*`` rendezvous variables, ``/dev/shm`` in memory) with what they lacked: a unique
rendezvous id per job, named metrics ports per rank with the labels the trainer PodMonitor selects,
the Hugging Face token taken from a Secret only, real weights (a hub download before training, or
a volume that holds them) and a shared checkpoint volume every restart resumes from
(``observe.k8s.storage``), and a launcher whose exit status tells a stopped pod from a failed one
(``restartPolicy: ExitCode``).

The result is plain data (dicts and lists) ready for ``yaml.safe_dump``; nothing here is a
string template. Field names follow the CRD in ``tests/schemas/kubeflow.org_pytorchjobs.yaml``
(training-operator release-1.9).
"""

from __future__ import annotations

import secrets
from typing import Any

from observe.catalog import INSTRUMENT_ENV
from observe.flags import to_argv
from observe.k8s import names, storage
from observe.k8s.job_settings import JobSettings
from trainer.runspec.config import TRAINER_COMMAND
from trainer.runspec.launch import QUIET_TORCHRUN, UNSHARE_STORE_ENV

#: Environment of every rank. LOGLEVEL=INFO makes torchrun's elastic agent log its rendezvous
#: result (``master_addr=...``), which ``fsdp-observe job status`` reads to find the leader.
#: ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` keeps a c10d restart from reading the dead attempt's
#: addresses (``trainer.runspec.launch.restart_store_hazard``).
BASE_ENV: tuple[tuple[str, str], ...] = (
    ("LOGLEVEL", "INFO"),
    ("PYTHONUNBUFFERED", "1"),
    (UNSHARE_STORE_ENV, "1"),
)
#: Added on GPU nodes: NCCL and allocator settings of the walkthrough's manifests.
GPU_ENV: tuple[tuple[str, str], ...] = (
    ("NCCL_DEBUG", "WARN"),
    ("NCCL_SOCKET_IFNAME", "^lo"),
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
)
#: The ranks' pod security: non-root (the project image runs as its ``fsdp`` user, uid 1000: an
#: image whose user is root fails to start with a clear kubelet error), the runtime's default
#: seccomp filter, every capability dropped, no privilege escalation, and no service-account
#: token (torchrun and the trainer never call the Kubernetes API). Pod Security "restricted".
POD_SECURITY_CONTEXT: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
SHM_VOLUME = "shm"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"


def new_run_id(job_name: str) -> str:
    """A fresh rendezvous id, ``<job_name>-<8 hex>``: ≤ 63 characters for a validated name.

    torchrun keeps rendezvous state in its backend under this id, so a job that reused an id
    (the walkthrough's fixed one) could meet the closed rendezvous of an earlier run
    (``RendezvousClosedError``). The same id becomes the trainer's ``run_id`` label.
    """
    return f"{job_name}-{secrets.token_hex(4)}"


#: Trainer settings written out on the pod's command line even at their defaults, so a reader
#: of the manifest sees them (the rest appear only when they differ from the trainer's defaults).
SHOWN_TRAINER_SETTINGS = ("parallel.sharding_strategy", "metrics.port_base", "metrics.run_id")


#: The pod's launcher: torchrun (the same flags) whose stop on the kubelet's SIGTERM exits 143 (the
#: ranks' status) instead of a traceback and 1 (``trainer.launcher``), so ``restartPolicy: ExitCode``
#: restarts a pod that was stopped and not one whose ranks failed.
LAUNCHER = QUIET_TORCHRUN
#: Kubeflow's ``restartPolicy: ExitCode``: the operator recreates a pod whose container exited
#: 128-255 (a signal: 143 SIGTERM on eviction or preemption, 137 SIGKILL or the OOM killer) and
#: fails the job for 1-127 (2: a user mistake, 1: a failure), instead of restarting it forever.
RESTART_POLICY = "ExitCode"


def trainer_command(s: JobSettings, run_id: str) -> list[str]:
    """The pod's command: ``fsdp-observe-torchrun --no-python fsdp-observe-trainer`` with the flags of
    ``s.trainer_config(run_id)`` (the job's settings, then ``TRAINER_ARGS``), or the launcher over
    the user's own ``COMMAND``; for a hub ``MODEL``, behind ``fsdp-observe-fetch-model`` (the
    download, then the launcher in its place).

    Rendezvous options are not on the command line: the operator passes them from
    ``elasticPolicy`` as ``PET_*`` variables, which torchrun reads as its defaults.
    """
    if s.command:
        return [LAUNCHER, f"--nproc-per-node={s.ranks_per_node}", *s.command]
    cfg = s.trainer_config(run_id)
    shown = ("model.preset" if cfg.model.path is None else "model.path", *SHOWN_TRAINER_SETTINGS)
    command = [
        LAUNCHER,
        f"--nproc-per-node={s.ranks_per_node}",
        "--no-python",
        TRAINER_COMMAND,
        *to_argv(cfg, explicit=shown),
    ]
    plan = storage.model_plan(s)
    if plan.kind != "hub":
        return command
    assert plan.repo is not None and plan.path is not None  # a hub plan names both
    fetch = [storage.FETCH_COMMAND, plan.repo, "--revision", plan.revision, "--local-dir", plan.path]
    if cfg.model.tokenizer == plan.path:
        fetch.append("--require-tokenizer")
    return [*fetch, "--", *command]


def instrumentation_env(s: JobSettings, run_id: str) -> list[tuple[str, str]]:
    """What turns metrics on in a pod running the user's ``COMMAND``: the variable the installed
    ``.pth`` reads, the port base the trainer PodMonitor scrapes (``metrics-<local_rank>``), the
    run id the pods are labelled with, and the linger of rendered jobs."""
    return [
        (INSTRUMENT_ENV, "1"),
        ("FSDP_OBSERVE_PORT_BASE", str(s.metrics_port)),
        ("FSDP_OBSERVE_RUN_ID", run_id),
        ("FSDP_OBSERVE_LINGER_SECONDS", str(names.RENDERED_METRICS_LINGER_SECONDS)),
    ]


def render(s: JobSettings, run_id: str | None = None) -> dict[str, Any]:
    """The PyTorchJob for settings ``s`` (already validated).

    Args:
        s: validated settings (``JobSettings.validate()``).
        run_id: the rendezvous id; a new one from ``new_run_id`` when ``None``.

    Returns:
        The manifest as a JSON-compatible dict.
    """
    run_id = run_id or new_run_id(s.job_name)
    lo, hi = s.node_range
    host, port = s.rdzv_endpoint
    elastic: dict[str, Any] = {"rdzvBackend": s.rdzv_backend, "rdzvId": run_id}
    if host is not None:
        elastic["rdzvHost"] = host
    if port is not None:
        elastic["rdzvPort"] = port
    elastic.update(minReplicas=lo, maxReplicas=hi, maxRestarts=s.max_restarts)
    labels = {**names.TRAINER_LABELS, "app.kubernetes.io/instance": s.job_name, names.RUN_ID_LABEL: run_id}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
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
    security = {k: (dict(v) if isinstance(v, dict) else v) for k, v in POD_SECURITY_CONTEXT.items()}
    if storage.writes_volumes(s):  # a claim's root is root's: the image's user (uid/gid 1000) writes by group
        security.update(fsGroup=storage.IMAGE_GROUP_ID, fsGroupChangePolicy="OnRootMismatch")
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": security,
        "containers": [_container(s, run_id)],
        "volumes": [
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", **({"sizeLimit": s.shm_size} if s.shm_size else {})}},
            *storage.volumes(s),
        ],
    }
    if s.instance_type:
        spec["nodeSelector"] = {"node.kubernetes.io/instance-type": s.instance_type}
    if s.gpu_per_node:
        spec["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    return spec


def _container(s: JobSettings, run_id: str) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": names.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        *({"name": k, "value": v} for k, v in BASE_ENV + (GPU_ENV if s.gpu_per_node else ())),
    ]
    if s.command:  # the user's own program: zero-code instrumentation (observe.training.inject)
        env += [{"name": k, "value": v} for k, v in instrumentation_env(s, run_id)]
    if s.hf_token_secret:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": s.hf_token_secret, "key": s.hf_token_secret_key}},
            }
        )
    if storage.model_plan(s).kind == "hub":
        env.append({"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"})  # the download reports nothing back
    ports = [{"name": names.OPERATOR_PORT_NAME, "containerPort": names.OPERATOR_PORT, "protocol": "TCP"}]
    ports += [
        {"name": names.trainer_port_name(r), "containerPort": names.trainer_port(r, s.metrics_port), "protocol": "TCP"}
        for r in range(s.ranks_per_node)
    ]
    devices = {GPU_RESOURCE: s.gpu_per_node, EFA_RESOURCE: s.efa_per_node}
    wanted = {name: count for name, count in devices.items() if count}
    container: dict[str, Any] = {
        "name": names.TRAINER_CONTAINER,
        "image": s.image,
        "command": trainer_command(s, run_id),
        "env": env,
        "ports": ports,
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}, *storage.mounts(s)],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if wanted:
        container["resources"] = {"requests": dict(wanted), "limits": dict(wanted)}
    return container
