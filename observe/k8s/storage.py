"""Where a rendered job's model weights and checkpoints live: the volumes, the mounts, the paths.

**Weights** (``MODEL``):

- a trainer preset: random weights of that shape, nothing to mount;
- a hub id ``org/name``: every pod downloads it before torchrun starts (``fsdp-observe-fetch-model``,
  ``trainer.fetch``; the token from the ``HF_TOKEN`` Secret) into ``MODEL_MOUNT/<org>--<name>``,
  on ``MODEL_PVC`` when given (a volume every pod shares keeps one copy, and a restarted pod finds
  the files complete), else on an ``emptyDir`` of the pod (``MODEL_VOLUME_SIZE`` caps it);
- a path: in the image, or, with ``MODEL_PVC`` or ``MODEL_HOST_PATH``, in that volume (mounted
  read-only at ``MODEL_MOUNT``, which the path must be under).

**Checkpoints**: ``CHECKPOINT_PVC`` (an existing claim every pod can mount: ReadWriteMany) or
``CHECKPOINT_STORAGE_CLASS`` + ``CHECKPOINT_SIZE`` (the render adds a PersistentVolumeClaim
``<job>-checkpoints``) is mounted at ``CHECKPOINT_MOUNT``; the trainer saves to
``CHECKPOINT_MOUNT/<job>`` every ``CHECKPOINT_EVERY`` steps (and on SIGTERM, and at the end), and
every restart, elastic resize or new render of the same job resumes from the newest complete
checkpoint there (``--resume auto``: exactly at the same world size; resharded, with
``--resume-any-world-size``, at another).

Everything here is plain data for the pod of any job kind (``observe.k8s.pod``); a mistake is a
``UserError`` naming the setting. It reads the settings through ``StorageSettings`` (which
``observe.k8s.job_settings.JobSettings`` is), so it imports nothing of the settings module:
``check`` makes the ``ModelPlan`` once, ``JobSettings.validate`` keeps it, and everything after
reads that. Standard library only (with ``trainer.runspec``, torch-free).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from observe.errors import UserError
from observe.k8s.names import DNS1123_SUBDOMAIN, QUANTITY
from trainer.runspec.presets import PRESETS
from trainer.runspec.weights import is_hub_id, local_dir_name

MODEL_VOLUME = "model"
CHECKPOINT_VOLUME = "checkpoints"
#: The command that downloads a hub model before torchrun (``pyproject.toml`` [project.scripts]).
FETCH_COMMAND = "fsdp-observe-fetch-model"
#: Steps between checkpoints when a checkpoint volume is set and ``CHECKPOINT_EVERY`` is not.
DEFAULT_CHECKPOINT_EVERY = 500
#: The project image's user and group (``Dockerfile``): volumes are made writable for it.
IMAGE_GROUP_ID = 1000

_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")


@dataclass(frozen=True)
class ModelPlan:
    """How the pods get the weights.

    Attributes:
        kind: ``preset``, ``image`` (a path in the image), ``volume`` (a path in MODEL_PVC or
            MODEL_HOST_PATH) or ``hub`` (downloaded by each pod).
        path: the trainer's ``--model`` (``None`` for a preset).
        repo, revision: the hub repository and revision (``hub`` only).
    """

    kind: str
    path: str | None = None
    repo: str | None = None
    revision: str = "main"


class StorageSettings(Protocol):
    """The settings this module reads (``JobSettings`` has them; file keys in the class docstring
    there). ``model_plan`` is ``check``'s result, ``None`` before the settings are checked."""

    @property
    def job_name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def model_revision(self) -> str: ...
    @property
    def model_pvc(self) -> str | None: ...
    @property
    def model_host_path(self) -> str | None: ...
    @property
    def model_mount(self) -> str: ...
    @property
    def model_volume_size(self) -> str | None: ...
    @property
    def checkpoint_pvc(self) -> str | None: ...
    @property
    def checkpoint_storage_class(self) -> str | None: ...
    @property
    def checkpoint_size(self) -> str | None: ...
    @property
    def checkpoint_mount(self) -> str: ...
    @property
    def checkpoint_every(self) -> int | None: ...
    @property
    def model_plan(self) -> ModelPlan | None: ...


def plan_of(s: StorageSettings) -> ModelPlan:
    """``s.model_plan``, which ``check`` made when the settings were checked.

    Raises:
        ValueError: ``s`` was never checked (``JobSettings.validate``): a programming error.
    """
    if s.model_plan is None:
        raise ValueError("storage settings used before JobSettings.validate() made their model plan")
    return s.model_plan


def _model_plan(s: StorageSettings) -> ModelPlan:
    """How ``s``'s pods get their weights (the model settings already checked)."""
    if s.model in PRESETS:
        return ModelPlan("preset")
    if is_hub_id(s.model):
        return ModelPlan(
            "hub", f"{s.model_mount.rstrip('/')}/{local_dir_name(s.model, s.model_revision)}", s.model, s.model_revision
        )
    return ModelPlan("volume" if s.model_pvc or s.model_host_path else "image", s.model)


def checkpoint_dir(s: StorageSettings) -> str | None:
    """The trainer's ``--checkpoint-dir``: ``CHECKPOINT_MOUNT/<job>`` when a checkpoint volume is set."""
    return f"{s.checkpoint_mount.rstrip('/')}/{s.job_name}" if has_checkpoint_volume(s) else None


def has_checkpoint_volume(s: StorageSettings) -> bool:
    """A checkpoint volume is set (``CHECKPOINT_PVC`` or ``CHECKPOINT_STORAGE_CLASS``)."""
    return bool(s.checkpoint_pvc or s.checkpoint_storage_class)


def checkpoint_claim_name(s: StorageSettings) -> str:
    """The claim the checkpoints are on: ``CHECKPOINT_PVC``, or the rendered ``<job>-checkpoints``."""
    return s.checkpoint_pvc or f"{s.job_name}-checkpoints"


def check(s: StorageSettings) -> ModelPlan:
    """Refuse storage settings that cannot work together; return how the pods get the weights.

    Returns:
        The ``ModelPlan`` (``JobSettings.validate`` keeps it as ``model_plan``).

    Raises:
        UserError: naming the first setting at fault.
    """
    for key, value in (("MODEL_MOUNT", s.model_mount), ("CHECKPOINT_MOUNT", s.checkpoint_mount)):
        _mount_path(key, value)
    if s.model_mount.rstrip("/") == s.checkpoint_mount.rstrip("/"):
        raise UserError("CHECKPOINT_MOUNT", f"is MODEL_MOUNT too ({s.model_mount})", "give each its own folder")
    for key, claim in (("MODEL_PVC", s.model_pvc), ("CHECKPOINT_PVC", s.checkpoint_pvc)):
        if claim is not None and not (DNS1123_SUBDOMAIN.fullmatch(claim) and len(claim) <= 253):
            raise UserError(
                key, f"{claim!r} is not a PersistentVolumeClaim name", "use lower-case letters, digits, '-' and '.'"
            )
    for key, size in (("MODEL_VOLUME_SIZE", s.model_volume_size), ("CHECKPOINT_SIZE", s.checkpoint_size)):
        if size is not None and not QUANTITY.fullmatch(size):
            raise UserError(key, f"{size!r} is not a Kubernetes quantity", f"write e.g. {key}=500Gi")
    _check_model(s)
    _check_checkpoints(s)
    return _model_plan(s)


def _check_model(s: StorageSettings) -> None:
    hub, preset = is_hub_id(s.model), s.model in PRESETS
    if not (preset or hub or s.model.startswith("/")):
        raise UserError(
            "MODEL",
            f"{s.model!r} is neither a preset, an absolute path, nor a hub id",
            f"use one of {', '.join(PRESETS)}, /path/in/the/image (or in MODEL_PVC), or ORG/NAME",
        )
    if s.model_pvc and s.model_host_path:
        raise UserError("MODEL_HOST_PATH", "is set with MODEL_PVC", "mount the weights from one of them")
    if s.model_host_path is not None:
        _mount_path("MODEL_HOST_PATH", s.model_host_path)
    volume = "MODEL_PVC" if s.model_pvc else "MODEL_HOST_PATH" if s.model_host_path else None
    if preset and volume:
        raise UserError(
            volume,
            f"MODEL={s.model} is a preset (random weights): there is nothing to mount",
            f"set MODEL to the weights' folder in the volume, under {s.model_mount}/",
        )
    if hub and volume == "MODEL_HOST_PATH":
        raise UserError(
            "MODEL_HOST_PATH",
            f"MODEL={s.model} is downloaded by each pod; a host path is mounted read-only",
            f"set MODEL to the weights' folder on the host, under {s.model_mount}/, or use MODEL_PVC for the download",
        )
    if not hub and s.model_revision != "main":
        raise UserError(
            "MODEL_REVISION",
            f"applies to a hub id, and MODEL={s.model} is not one",
            "remove MODEL_REVISION, or set MODEL=ORG/NAME",
        )
    if hub and not _REVISION.fullmatch(s.model_revision):
        raise UserError(
            "MODEL_REVISION",
            f"{s.model_revision!r} is not a branch, tag or commit",
            "write e.g. main, v1.0 or a commit hash",
        )
    if s.model_volume_size is not None and not (hub and not s.model_pvc):
        raise UserError(
            "MODEL_VOLUME_SIZE",
            "sizes the pod's own download folder, which only a hub MODEL without MODEL_PVC has",
            "remove it (a PVC has its own size)",
        )
    if volume and not hub and not (s.model.rstrip("/") + "/").startswith(s.model_mount.rstrip("/") + "/"):
        raise UserError(
            "MODEL",
            f"{s.model} is not under MODEL_MOUNT {s.model_mount}, where {volume} is mounted",
            f"write the weights' folder as it appears in the pod: {s.model_mount.rstrip('/')}/...",
        )


def _check_checkpoints(s: StorageSettings) -> None:
    if s.checkpoint_pvc and s.checkpoint_storage_class:
        raise UserError(
            "CHECKPOINT_STORAGE_CLASS",
            "is set with CHECKPOINT_PVC",
            "use an existing claim (CHECKPOINT_PVC) or a new one (CHECKPOINT_STORAGE_CLASS), not both",
        )
    if s.checkpoint_storage_class is not None:
        if not DNS1123_SUBDOMAIN.fullmatch(s.checkpoint_storage_class):
            raise UserError(
                "CHECKPOINT_STORAGE_CLASS",
                f"{s.checkpoint_storage_class!r} is not a StorageClass name",
                "give one kubectl get storageclass lists (ReadWriteMany: EFS, FSx for Lustre, NFS)",
            )
        if s.checkpoint_size is None:
            raise UserError(
                "CHECKPOINT_SIZE",
                "is needed for the claim CHECKPOINT_STORAGE_CLASS makes",
                "set e.g. CHECKPOINT_SIZE=500Gi: a checkpoint holds the weights and AdamW's two moments "
                "(about 12-16 bytes per parameter), times --keep-checkpoints (2)",
            )
    elif s.checkpoint_size is not None:
        raise UserError(
            "CHECKPOINT_SIZE",
            "sizes the claim CHECKPOINT_STORAGE_CLASS makes",
            "set CHECKPOINT_STORAGE_CLASS too, or remove it (CHECKPOINT_PVC has its own size)",
        )
    if s.checkpoint_every is not None:
        if not has_checkpoint_volume(s):
            raise UserError(
                "CHECKPOINT_EVERY",
                "there is no checkpoint volume to save to",
                "set CHECKPOINT_PVC or CHECKPOINT_STORAGE_CLASS",
            )
        if s.checkpoint_every < 1:
            raise UserError(
                "CHECKPOINT_EVERY",
                f"must be 1 or more, got {s.checkpoint_every}",
                f"set e.g. CHECKPOINT_EVERY={DEFAULT_CHECKPOINT_EVERY}",
            )


def _mount_path(key: str, path: str) -> None:
    if not path.startswith("/") or path.rstrip("/") in ("", "/dev", "/dev/shm", "/proc", "/sys") or ":" in path:
        raise UserError(key, f"{path!r} is not a folder to mount on", "write an absolute path such as /models")


def volumes(s: StorageSettings) -> list[dict[str, Any]]:
    """The pod's model and checkpoint volumes (``/dev/shm`` aside)."""
    plan, out = plan_of(s), []
    if s.model_pvc:
        claim: dict[str, Any] = {"claimName": s.model_pvc, **({"readOnly": True} if plan.kind != "hub" else {})}
        out.append({"name": MODEL_VOLUME, "persistentVolumeClaim": claim})
    elif s.model_host_path:
        out.append({"name": MODEL_VOLUME, "hostPath": {"path": s.model_host_path, "type": "Directory"}})
    elif plan.kind == "hub":
        out.append(
            {"name": MODEL_VOLUME, "emptyDir": {"sizeLimit": s.model_volume_size} if s.model_volume_size else {}}
        )
    if has_checkpoint_volume(s):
        out.append({"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": {"claimName": checkpoint_claim_name(s)}})
    return out


def mounts(s: StorageSettings) -> list[dict[str, Any]]:
    """The trainer container's mounts of ``volumes(s)``: the weights read-only unless downloaded."""
    out: list[dict[str, Any]] = []
    if any(v["name"] == MODEL_VOLUME for v in volumes(s)):
        out.append(
            {
                "name": MODEL_VOLUME,
                "mountPath": s.model_mount,
                **({"readOnly": True} if plan_of(s).kind != "hub" else {}),
            }
        )
    if has_checkpoint_volume(s):
        out.append({"name": CHECKPOINT_VOLUME, "mountPath": s.checkpoint_mount})
    return out


def warnings(s: StorageSettings) -> list[str]:
    """What a rendered job cannot do with these settings, one line each (``job render`` prints
    them): without a checkpoint volume every restart starts at step 0."""
    if not has_checkpoint_volume(s):
        return [
            "no checkpoint volume (CHECKPOINT_PVC or CHECKPOINT_STORAGE_CLASS): a restarted pod or a resized job "
            "starts again from step 0"
        ]
    return []


def writes_volumes(s: StorageSettings) -> bool:
    """Some mounted claim is written (checkpoints, a download onto MODEL_PVC): the pod then needs
    ``fsGroup`` for the image's non-root user to write to it."""
    return has_checkpoint_volume(s) or (bool(s.model_pvc) and plan_of(s).kind == "hub")


def claims(s: StorageSettings) -> list[dict[str, Any]]:
    """The PersistentVolumeClaim the render adds for ``CHECKPOINT_STORAGE_CLASS`` (else none).

    ReadWriteMany: every pod of the job mounts it, on different nodes. Not deleted with the job
    (``kubectl delete pvc <job>-checkpoints`` when the run is over).
    """
    if not s.checkpoint_storage_class:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": checkpoint_claim_name(s),
                "namespace": s.namespace,
                "labels": {
                    "app.kubernetes.io/name": "fsdp-observe",
                    "app.kubernetes.io/component": "checkpoints",
                    "app.kubernetes.io/instance": s.job_name,
                },
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": s.checkpoint_storage_class,
                "resources": {"requests": {"storage": s.checkpoint_size}},
            },
        }
    ]
