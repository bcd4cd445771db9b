"""The trainer pod every job kind runs, from validated ``JobSettings``: kind-independent parts.

What a rank's pod holds does not depend on who creates it: the launcher and what it starts (our
trainer with the settings' flags, or the user's own ``COMMAND`` with zero-code instrumentation),
behind a hub download for a hub ``MODEL``; the environment (``NODE_NAME`` from the downward API,
``LOGLEVEL=INFO`` so torchrun logs the rendezvous result, the Hugging Face token from a Secret
only); ``/dev/shm`` in memory and the weights and checkpoint volumes (``observe.k8s.storage``); a
named metrics port per rank; GPUs and EFA devices; the hardened security context. Each kind
(``observe.k8s.kinds``) puts these pieces where its API takes them.

Plain data (dicts and lists) ready for ``yaml.safe_dump``; field names follow the Kubernetes v1
Pod API.
"""

from __future__ import annotations

import copy
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

#: Trainer settings written out on the pod's command line even at their defaults, so a reader
#: of the manifest sees them (the rest appear only when they differ from the trainer's defaults).
SHOWN_TRAINER_SETTINGS = ("parallel.sharding_strategy", "metrics.port_base", "metrics.run_id")

#: The pod's launcher: torchrun (the same flags) whose stop on the kubelet's SIGTERM exits 143 (the
#: ranks' status) instead of a traceback and 1 (``trainer.launcher``), so a kind that restarts pods
#: by exit status restarts a pod that was stopped and not one whose ranks failed.
LAUNCHER = QUIET_TORCHRUN


def new_run_id(job_name: str) -> str:
    """A fresh rendezvous id, ``<job_name>-<8 hex>``: ≤ 63 characters for a validated name.

    torchrun keeps rendezvous state in its backend under this id, so a job that reused an id
    (the walkthrough's fixed one) could meet the closed rendezvous of an earlier run
    (``RendezvousClosedError``). The same id becomes the trainer's ``run_id`` label.
    """
    return f"{job_name}-{secrets.token_hex(4)}"


def labels(s: JobSettings, run_id: str) -> dict[str, str]:
    """The job's and its pods' labels: the trainer PodMonitor's selector, the job, the run id."""
    return {**names.TRAINER_LABELS, "app.kubernetes.io/instance": s.job_name, names.RUN_ID_LABEL: run_id}


def launch_command(s: JobSettings, run_id: str, nproc_per_node: int | None) -> list[str]:
    """The pod's command: ``fsdp-observe-torchrun --no-python fsdp-observe-trainer`` with the flags of
    ``s.trainer_config(run_id)`` (the job's settings, then ``TRAINER_ARGS``), or the launcher over
    the user's own ``COMMAND``; for a hub ``MODEL``, behind ``fsdp-observe-fetch-model`` (the
    download, then the launcher in its place).

    Args:
        s: validated settings.
        run_id: the rendezvous id and ``run_id`` label.
        nproc_per_node: written as ``--nproc-per-node=N``; ``None`` leaves it to torchrun's
            ``PET_NPROC_PER_NODE`` (a kind whose controller sets it).

    Rendezvous options are never on the command line: each kind's controller passes them as
    torchrun's ``PET_*`` variables, which torchrun reads as its defaults.
    """
    launcher = [LAUNCHER, *([f"--nproc-per-node={nproc_per_node}"] if nproc_per_node is not None else [])]
    if s.command:
        return [*launcher, *s.command]
    cfg = s.trainer_config(run_id)
    shown = ("model.preset" if cfg.model.path is None else "model.path", *SHOWN_TRAINER_SETTINGS)
    command = [*launcher, "--no-python", TRAINER_COMMAND, *to_argv(cfg, explicit=shown)]
    plan = storage.plan_of(s)
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


def env(s: JobSettings, run_id: str) -> list[dict[str, Any]]:
    """The trainer container's environment (``V1EnvVar`` dicts); the token only by reference."""
    out: list[dict[str, Any]] = [
        {"name": names.NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        *({"name": k, "value": v} for k, v in BASE_ENV + (GPU_ENV if s.gpu_per_node else ())),
    ]
    if s.command:  # the user's own program: zero-code instrumentation (observe.training.inject)
        out += [{"name": k, "value": v} for k, v in instrumentation_env(s, run_id)]
    if s.hf_token_secret:
        out.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": s.hf_token_secret, "key": s.hf_token_secret_key}},
            }
        )
    if storage.plan_of(s).kind == "hub":
        out.append({"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"})  # the download reports nothing back
    return out


def metrics_ports(s: JobSettings) -> list[tuple[str, int]]:
    """``(name, port)`` of each rank's ``/metrics``: ``metrics-<local_rank>``, ``METRICS_PORT + r``."""
    return [(names.trainer_port_name(r), names.trainer_port(r, s.metrics_port)) for r in range(s.ranks_per_node)]


def pod_security_context(s: JobSettings) -> dict[str, Any]:
    """``POD_SECURITY_CONTEXT``, and ``fsGroup`` when a mounted claim is written: a claim's root is
    root's, so the image's user (uid/gid 1000) writes by group."""
    security = copy.deepcopy(POD_SECURITY_CONTEXT)
    if storage.writes_volumes(s):
        security.update(fsGroup=storage.IMAGE_GROUP_ID, fsGroupChangePolicy="OnRootMismatch")
    return security


def container_security_context() -> dict[str, Any]:
    """A fresh copy of ``CONTAINER_SECURITY_CONTEXT``."""
    return copy.deepcopy(CONTAINER_SECURITY_CONTEXT)


def volumes(s: JobSettings) -> list[dict[str, Any]]:
    """``/dev/shm`` in memory (``SHM_SIZE`` caps it), then the weights and checkpoint volumes."""
    shm = {"medium": "Memory", **({"sizeLimit": s.shm_size} if s.shm_size else {})}
    return [{"name": SHM_VOLUME, "emptyDir": shm}, *storage.volumes(s)]


def volume_mounts(s: JobSettings) -> list[dict[str, Any]]:
    """The trainer container's mounts of ``volumes(s)``."""
    return [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}, *storage.mounts(s)]


def devices(s: JobSettings) -> dict[str, int]:
    """GPUs and EFA devices one pod requests (and limits to), those asked for only."""
    wanted = {GPU_RESOURCE: s.gpu_per_node, EFA_RESOURCE: s.efa_per_node}
    return {name: count for name, count in wanted.items() if count}


def node_selector(s: JobSettings) -> dict[str, str] | None:
    """``node.kubernetes.io/instance-type`` when ``INSTANCE_TYPE`` is set."""
    return {"node.kubernetes.io/instance-type": s.instance_type} if s.instance_type else None


def tolerations(s: JobSettings) -> list[dict[str, str]] | None:
    """The GPU nodes' ``nvidia.com/gpu`` taint tolerated, on GPU jobs."""
    return [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}] if s.gpu_per_node else None
