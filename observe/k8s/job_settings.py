"""Typed settings of a training job on Kubernetes, read from a ``.env``-style file or YAML.

The ``.env`` form follows the AWS EKS FSDP walkthroughs (awsome-distributed-training
``3.test_cases/10.FSDP``, aws-do-eks ``pytorchjob/fsdp/.env``): ``KEY=value`` lines, an optional
``export``, ``#`` comments, shell quoting. Nothing is expanded (no ``$VAR``, no ``$(...)``) and
nothing is read from the process environment, so what renders is exactly what the file says.
Keys are case-insensitive (``NUM_NODES`` or ``num_nodes``); the walkthroughs' older names
(``NUM_WORKERS``, ``GPU_PER_WORKER`` ...) are accepted as aliases.

Every mistake is a ``UserError`` naming the key and the fix (printed as one line, exit 2).
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from observe.catalog import TRAINER_PORT_BASE
from observe.errors import UserError
from observe.flags import flag_names, parse_flags
from observe.k8s import names, storage
from observe.k8s.names import DNS1035_LABEL, DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_VALUE, QUANTITY, SECRET_KEY
from observe.k8s.storage import ModelPlan
from trainer.runspec.config import (
    SHARDING_STRATEGIES,
    CheckpointConfig,
    DataConfig,
    MetricsConfig,
    ModelConfig,
    ParallelConfig,
    TrainConfig,
    build_parser,
    config_from_values,
)

#: torchrun rendezvous backends a PyTorchJob can use. ``etcd`` and ``etcd-v2`` talk to the etcd
#: v2 API (``daemonsets/etcd-deployment.yaml`` runs etcd 3.5 with ``--enable-v2``).
RDZV_BACKENDS = ("c10d", "etcd", "etcd-v2")
ETCD_BACKENDS = ("etcd", "etcd-v2")

#: Keys that would put a Hugging Face token into the manifest. Never echoed back.
TOKEN_KEYS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN")

#: Older names used by the walkthroughs' env files → our key.
ALIASES = {
    "NUM_WORKERS": "NUM_NODES",
    "GPU_PER_WORKER": "GPU_PER_NODE",
    "NPROC_PER_WORKER": "NPROC_PER_NODE",
    "EFA_PER_WORKER": "EFA_PER_NODE",
    "MODEL_NAME": "MODEL",
}

#: Trainer settings (``TrainConfig`` paths) a job setting owns → that setting; TRAINER_ARGS may
#: not give their flags (``--preset`` ..., see ``managed_trainer_flags``).
MANAGED_TRAINER_SETTINGS = {
    "model.preset": "MODEL",
    "model.path": "MODEL",
    "data.paths": "DATA",
    "parallel.sharding_strategy": "SHARDING_STRATEGY",
    "metrics.port_base": "METRICS_PORT",
    "metrics.run_id": "the rendered run id",
    "parallel.device": "GPU_PER_NODE",
    "metrics.enabled": "the job (metrics are always on)",
    "checkpoint.dir": "CHECKPOINT_PVC or CHECKPOINT_STORAGE_CLASS (a volume every pod shares)",
    "checkpoint.every": "CHECKPOINT_EVERY",
}


def managed_trainer_flags() -> dict[str, str]:
    """``{trainer flag: the setting that owns it}``, e.g. ``{"--preset": "MODEL", ...}``."""
    names_ = flag_names(TrainConfig)
    return {names_[path]: setting for path, setting in MANAGED_TRAINER_SETTINGS.items()}


_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class JobSettings:
    """What ``fsdp-observe job render`` needs to write one training job, of either kind.

    The rules every kind shares are checked here (``validate``); what only one kind can or cannot
    do (elastic bounds, a rendezvous backend, a runtime, how long the name may be) is checked by
    that kind (``observe.k8s.kinds``) when it renders.

    Attributes (file key in brackets):
        job_name [JOB_NAME]: the job's name; pods are ``<job_name>-worker-<i>`` (PyTorchJob) or
            ``<job_name>-node-0-<i>-<random>`` (TrainJob).
        namespace [NAMESPACE]: namespace of the job.
        job_kind [JOB_KIND]: ``PyTorchJob`` (Kubeflow training operator v1, ``kubeflow.org/v1``;
            elastic) or ``TrainJob`` (Kubeflow Trainer v2, ``trainer.kubeflow.org/v1alpha1``).
        runtime, runtime_kind [RUNTIME, RUNTIME_KIND]: the training runtime a TrainJob names
            (default the stock ``torch-distributed`` ClusterTrainingRuntime; ``TrainingRuntime``
            for a namespaced one).
        image [IMAGE_URI]: the project image (``Dockerfile``), e.g. ``<registry>/fsdp-observe:0.1.0``.
        num_nodes [NUM_NODES]: worker pods, one per node.
        gpu_per_node [GPU_PER_NODE]: ``nvidia.com/gpu`` per pod; 0 trains on CPU (``--device cpu``).
        nproc_per_node [NPROC_PER_NODE]: ranks per pod; default one per GPU (1 on CPU nodes).
        efa_per_node [EFA_PER_NODE]: ``vpc.amazonaws.com/efa`` devices per pod (p4d 4, p5 32).
        instance_type [INSTANCE_TYPE]: pins pods to ``node.kubernetes.io/instance-type``.
        model [MODEL]: a trainer preset (``llama2-7b`` ..., random weights), an absolute path (in the
            image, or in MODEL_PVC / MODEL_HOST_PATH), or a hub id ``org/name`` that every pod
            downloads before training (``observe.k8s.storage``).
        model_revision [MODEL_REVISION]: the hub id's branch, tag or commit (default ``main``).
        model_pvc [MODEL_PVC]: a PersistentVolumeClaim holding the weights (MODEL is then their
            folder under MODEL_MOUNT), or receiving the download of a hub MODEL (one copy for
            every pod that mounts it; a restarted pod finds it complete).
        model_host_path [MODEL_HOST_PATH]: a folder on every node holding the weights, mounted
            read-only at MODEL_MOUNT (a hostPath volume: not Pod Security baseline).
        model_mount [MODEL_MOUNT]: where the model volume is mounted (default ``/models``).
        model_volume_size [MODEL_VOLUME_SIZE]: size limit of the pod's own download folder (an
            ``emptyDir``) for a hub MODEL without MODEL_PVC.
        checkpoint_pvc [CHECKPOINT_PVC]: an existing ReadWriteMany claim for the checkpoints.
        checkpoint_storage_class, checkpoint_size [CHECKPOINT_STORAGE_CLASS, CHECKPOINT_SIZE]: or
            a new claim ``<job>-checkpoints`` of this class and size, rendered with the job.
        checkpoint_mount [CHECKPOINT_MOUNT]: where it is mounted (default ``/checkpoints``); the
            trainer saves to ``CHECKPOINT_MOUNT/<job>`` and every restart resumes from there.
        checkpoint_every [CHECKPOINT_EVERY]: steps between checkpoints (default 500 with a volume).
        data [DATA]: training files or globs inside the pod (default: the image's own text).
        sharding_strategy [SHARDING_STRATEGY]: one of ``trainer.runspec.config.SHARDING_STRATEGIES``.
        rdzv_backend [RDZV_BACKEND]: ``c10d`` (worker 0 hosts it), ``etcd`` or ``etcd-v2``.
        rdzv_host, rdzv_port [RDZV_HOST, RDZV_PORT]: rendezvous endpoint; default for etcd
            backends: the add-on's etcd Service; for c10d: the operator's (worker 0).
        min_nodes, max_nodes [MIN_NODES, MAX_NODES]: elastic bounds (PyTorchJob); default ``num_nodes``.
        max_restarts [MAX_RESTARTS]: worker-group restarts torchrun allows before failing.
        hf_token_secret, hf_token_secret_key [HF_TOKEN_SECRET, HF_TOKEN_SECRET_KEY]: the Secret
            (and its key) that holds the Hugging Face token; the value never enters the manifest.
        shm_size [SHM_SIZE]: size limit of the memory-backed ``/dev/shm`` (e.g. ``64Gi``).
        metrics_port [METRICS_PORT]: rank ``r`` serves ``/metrics`` on ``metrics_port + r``.
        trainer_args [TRAINER_ARGS]: further trainer flags (``--steps 5000 ...``).
        command [COMMAND]: your own training program instead of our trainer: what torchrun runs,
            a script in your image and its flags (``/app/train.py --lr 1e-4``) or ``-m package.module
            ...``; the pods run it with zero-code instrumentation on (``FSDP_OBSERVE_INSTRUMENT=1``;
            the image must have fsdp-observe installed). ``MODEL``, ``DATA``, ``SHARDING_STRATEGY``
            and ``TRAINER_ARGS`` belong to our trainer and cannot be combined with it.
        model_plan: how the pods get the weights (``storage.ModelPlan``), made once by
            ``validate``; ``None`` before. Not a file key.
    """

    job_name: str = "fsdp"
    namespace: str = "default"
    job_kind: str = "PyTorchJob"
    runtime: str = "torch-distributed"
    runtime_kind: str = "ClusterTrainingRuntime"
    image: str = ""
    num_nodes: int = 2
    gpu_per_node: int = 8
    nproc_per_node: int | None = None
    efa_per_node: int = 0
    instance_type: str | None = None
    model: str = "llama2-7b"
    model_revision: str = "main"
    model_pvc: str | None = None
    model_host_path: str | None = None
    model_mount: str = "/models"
    model_volume_size: str | None = None
    checkpoint_pvc: str | None = None
    checkpoint_storage_class: str | None = None
    checkpoint_size: str | None = None
    checkpoint_mount: str = "/checkpoints"
    checkpoint_every: int | None = None
    data: tuple[str, ...] = ()
    sharding_strategy: str = "FULL_SHARD"
    rdzv_backend: str = "c10d"
    rdzv_host: str | None = None
    rdzv_port: int | None = None
    min_nodes: int | None = None
    max_nodes: int | None = None
    max_restarts: int = 3
    hf_token_secret: str | None = None
    hf_token_secret_key: str = "token"
    shm_size: str | None = None
    metrics_port: int = TRAINER_PORT_BASE
    trainer_args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    model_plan: ModelPlan | None = field(default=None, compare=False, repr=False, metadata={"derived": True})

    # --- derived values (valid after validate()) ------------------------------------------

    @property
    def ranks_per_node(self) -> int:
        """Processes torchrun starts in each pod."""
        if self.nproc_per_node is not None:
            return self.nproc_per_node
        return self.gpu_per_node if self.gpu_per_node > 0 else 1

    @property
    def node_range(self) -> tuple[int, int]:
        """``(min_nodes, max_nodes)`` with their defaults filled in."""
        lo = self.min_nodes if self.min_nodes is not None else self.num_nodes
        hi = self.max_nodes if self.max_nodes is not None else max(self.num_nodes, lo)
        return lo, hi

    @property
    def rdzv_endpoint(self) -> tuple[str | None, int | None]:
        """``(host, port)`` for elasticPolicy; ``(None, None)`` lets the operator choose (c10d)."""
        if self.rdzv_backend in ETCD_BACKENDS:
            return self.rdzv_host or names.ETCD_HOST, self.rdzv_port or names.ETCD_CLIENT_PORT
        return self.rdzv_host, self.rdzv_port

    def validate(self) -> JobSettings:
        """Check every setting every kind shares; return ``self`` with ``sharding_strategy``
        upper-cased and ``model_plan`` made.

        Raises:
            UserError: naming the first key at fault (``NUM_NODES`` ...) and the fix.
        """
        s = replace(self, sharding_strategy=self.sharding_strategy.upper())
        lo, hi = s.node_range
        _check_name(s.job_name, s.job_kind)
        if not DNS1123_LABEL.fullmatch(s.namespace) or len(s.namespace) > 63:
            raise UserError(
                "NAMESPACE", f"{s.namespace!r} is not a valid namespace name", "use lower-case letters, digits and '-'"
            )
        if not s.image:
            raise UserError(
                "IMAGE_URI",
                "is not set",
                "build and push the project image (Dockerfile), then set IMAGE_URI=<registry>/fsdp-observe:<tag>",
            )
        if any(ch.isspace() for ch in s.image):
            raise UserError("IMAGE_URI", f"{s.image!r} contains white space", "write the image reference alone")
        if s.num_nodes < 1:
            raise UserError(
                "NUM_NODES", f"must be 1 or more, got {s.num_nodes}", "set NUM_NODES to the number of nodes to train on"
            )
        if lo < 1:
            raise UserError("MIN_NODES", f"must be 1 or more, got {lo}", "set MIN_NODES=1 or more")
        if not lo <= s.num_nodes <= hi:
            raise UserError(
                "NUM_NODES",
                f"{s.num_nodes} is outside MIN_NODES..MAX_NODES = {lo}..{hi}",
                "set MIN_NODES <= NUM_NODES <= MAX_NODES",
            )
        _in_range("GPU_PER_NODE", s.gpu_per_node, 0, names.MAX_RANKS_PER_NODE)
        _in_range("NPROC_PER_NODE", s.ranks_per_node, 1, names.MAX_RANKS_PER_NODE)
        if s.gpu_per_node > 0 and s.ranks_per_node != s.gpu_per_node:
            raise UserError(
                "NPROC_PER_NODE",
                f"{s.ranks_per_node} ranks for {s.gpu_per_node} GPUs",
                "run one rank per GPU: leave NPROC_PER_NODE unset",
            )
        _in_range("EFA_PER_NODE", s.efa_per_node, 0, 64)
        if s.instance_type is not None and not (LABEL_VALUE.fullmatch(s.instance_type) and len(s.instance_type) <= 63):
            raise UserError(
                "INSTANCE_TYPE",
                f"{s.instance_type!r} is not a valid label value",
                "write an instance type such as p5.48xlarge",
            )
        s = replace(s, model_plan=storage.check(s))
        _one_of("SHARDING_STRATEGY", "strategy", self.sharding_strategy, s.sharding_strategy, SHARDING_STRATEGIES)
        _one_of("RDZV_BACKEND", "backend", s.rdzv_backend, s.rdzv_backend, RDZV_BACKENDS)
        if s.rdzv_host is not None and not DNS1123_SUBDOMAIN.fullmatch(s.rdzv_host):
            raise UserError(
                "RDZV_HOST",
                f"{s.rdzv_host!r} is not a host name",
                f"write a host such as {names.ETCD_HOST}, without scheme or port",
            )
        if s.rdzv_port is not None:
            _in_range("RDZV_PORT", s.rdzv_port, 1, 65535)
        _in_range("MAX_RESTARTS", s.max_restarts, 0, 10_000)
        if s.hf_token_secret is not None and not (
            DNS1123_SUBDOMAIN.fullmatch(s.hf_token_secret) and len(s.hf_token_secret) <= 253
        ):
            raise UserError(
                "HF_TOKEN_SECRET",
                f"{s.hf_token_secret!r} is not a Secret name",
                "use lower-case letters, digits, '-' and '.'",
            )
        if not SECRET_KEY.fullmatch(s.hf_token_secret_key):
            raise UserError(
                "HF_TOKEN_SECRET_KEY",
                f"{s.hf_token_secret_key!r} is not a Secret key",
                "use letters, digits, '-', '_' and '.'",
            )
        if s.shm_size is not None and not QUANTITY.fullmatch(s.shm_size):
            raise UserError("SHM_SIZE", f"{s.shm_size!r} is not a Kubernetes quantity", "write e.g. SHM_SIZE=64Gi")
        _in_range("METRICS_PORT", s.metrics_port, 1024, 65535 - s.ranks_per_node)
        _trainer_values(s.trainer_args)
        _check_command(s.command)
        if not s.command:
            _check_trainer(s)
        return s

    def trainer_config(self, run_id: str) -> TrainConfig:
        """The ranks' trainer settings: the job's (model, data, strategy, device, metrics port and
        linger, run id, checkpoints), then ``TRAINER_ARGS`` on top. A downloaded hub model is also
        the tokenizer unless ``TRAINER_ARGS`` names one. Not validated (paths are in the pod).

        Raises:
            UserError: a mistake in ``TRAINER_ARGS`` (``validate`` finds it first).
        """
        plan = storage.plan_of(self)
        model = (
            ModelConfig(preset=self.model)
            if plan.kind == "preset"
            else ModelConfig(path=plan.path, tokenizer=plan.path if plan.kind == "hub" else None)
        )
        every = self.checkpoint_every or storage.DEFAULT_CHECKPOINT_EVERY
        base = TrainConfig(
            model=model,
            data=DataConfig(paths=list(self.data)),
            parallel=ParallelConfig(
                sharding_strategy=self.sharding_strategy,
                device="cpu" if self.gpu_per_node == 0 else ParallelConfig.device,
            ),
            metrics=MetricsConfig(
                port_base=self.metrics_port, run_id=run_id, linger_seconds=names.RENDERED_METRICS_LINGER_SECONDS
            ),
            checkpoint=CheckpointConfig(
                dir=storage.checkpoint_dir(self),
                every=every if storage.has_checkpoint_volume(self) else 0,
                any_world_size=storage.has_checkpoint_volume(self),
            ),
        )
        return config_from_values(_trainer_values(self.trainer_args), base=base)

    @property
    def world_size(self) -> int:
        """Ranks in the job at ``NUM_NODES`` nodes."""
        return self.num_nodes * self.ranks_per_node


def _check_name(name: str, kind: str) -> None:
    """A DNS-1035 label: both kinds name pods and Services after the job (each kind also limits
    its length: ``observe.k8s.kinds``)."""
    if not DNS1035_LABEL.fullmatch(name):
        hint = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
        hint = hint if hint[:1].isalpha() else f"fsdp-{hint}".rstrip("-")
        raise UserError(
            "JOB_NAME",
            f"{name!r} is not a name Kubernetes accepts for a {kind} "
            "(lower-case letters, digits and '-', starting with a letter)",
            f"use e.g. JOB_NAME={hint}",
        )


def _one_of(key: str, what: str, given: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(key, f"unknown {what} {given!r}", f"choose one of {', '.join(choices)}")


def _in_range(key: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise UserError(key, f"must be between {lo} and {hi}, got {value}", f"set {key} to a value in {lo}..{hi}")


#: Settings of our trainer that a job running the user's own COMMAND cannot use (the checkpoint
#: volume it can: it is mounted at CHECKPOINT_MOUNT for the program's own flags).
TRAINER_ONLY_KEYS = (
    "MODEL",
    "MODEL_REVISION",
    "MODEL_PVC",
    "MODEL_HOST_PATH",
    "MODEL_VOLUME_SIZE",
    "DATA",
    "SHARDING_STRATEGY",
    "TRAINER_ARGS",
    "CHECKPOINT_EVERY",
)
#: Launchers COMMAND must not start with: the pod already runs torchrun.
_LAUNCHERS = re.compile(r"(.*/)?(torchrun|python[0-9.]*|accelerate|deepspeed)")


def _check_command(command: tuple[str, ...]) -> None:
    if command and _LAUNCHERS.fullmatch(command[0]):
        rest = " ".join(command[1:]) or "train.py"
        raise UserError(
            "COMMAND",
            f"starts with {command[0]!r}, but the pod already runs torchrun",
            f'write only what torchrun runs, e.g. COMMAND="{rest}"',
        )


def _check_trainer(s: JobSettings) -> None:
    """Refuse what the ranks would refuse at start: the trainer's own checks that read no file
    (``TrainConfig.check_settings``) on the job's settings at ``NUM_NODES`` nodes, so a job never
    renders whose every pod exits 2 and restarts.

    Raises:
        UserError: field ``TRAINER_ARGS``, with the trainer flag and its fix.
    """
    try:
        s.trainer_config("render-check").check_settings(s.world_size, s.ranks_per_node)
    except UserError as exc:
        raise UserError(
            "TRAINER_ARGS", f"{exc.field}: {exc.problem} (at NUM_NODES={s.num_nodes}, {s.world_size} ranks)", exc.fix
        ) from None


def _trainer_values(args: tuple[str, ...]) -> dict[str, Any]:
    """The trainer flags ``TRAINER_ARGS`` gives (``{path: value}``), parsed by the trainer's own
    parser; a flag a job setting owns is refused.

    Raises:
        UserError: field ``TRAINER_ARGS``: a usage mistake, or a flag a setting owns.
    """
    try:
        values = parse_flags(build_parser(), list(args))
    except UserError as exc:
        flag = "" if exc.field == build_parser().prog else f"{exc.field}: "
        raise UserError("TRAINER_ARGS", f"{flag}{exc.problem}", exc.fix) from None
    names_ = flag_names(TrainConfig)
    for path in values:
        if path in MANAGED_TRAINER_SETTINGS:
            flag = names_[path]
            raise UserError(
                "TRAINER_ARGS", f"{flag} is set by {MANAGED_TRAINER_SETTINGS[path]}", f"remove {flag} from TRAINER_ARGS"
            )
    return values


# --- reading files ---------------------------------------------------------------------------

_FIELDS = {f.name: f for f in fields(JobSettings) if not f.metadata.get("derived")}
#: File key (upper case) → field name. IMAGE_URI is the walkthrough's name for the image.
_KEY_TO_FIELD = {name.upper(): name for name in _FIELDS if name != "image"} | {"IMAGE_URI": "image"}
_KEY_OF_FIELD = {field: key for key, field in _KEY_TO_FIELD.items()}
_KEY_TO_FIELD |= {alias: _KEY_TO_FIELD[target] for alias, target in ALIASES.items()}


def load_settings(path: str | Path, overrides: Iterable[str] = ()) -> JobSettings:
    """Read ``path`` (``.yaml``/``.yml`` as YAML, anything else as ``.env``), apply ``KEY=VALUE``
    ``overrides`` (from ``--set``), and validate.

    Raises:
        UserError: a missing or unreadable file, an unknown key, a value of the wrong type, or
            any rule of ``JobSettings.validate``.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise UserError(
            "--config",
            f"cannot read {path} ({exc.strerror})",
            "pass a settings file (.env or .yaml), e.g. examples/llama2-7b.env",
        ) from None
    raw = _parse_yaml(text, path) if path.suffix in (".yaml", ".yml") else _parse_env(text, path)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError("--set", f"{item!r} is not KEY=VALUE", "write e.g. --set NUM_NODES=4")
        raw[key.strip()] = value
    return settings_from_mapping(raw)


def settings_from_mapping(raw: dict[str, Any]) -> JobSettings:
    """Build and validate settings from ``{key: value}`` (strings from ``.env``, or YAML values)."""
    values: dict[str, Any] = {}
    for key, value in raw.items():
        upper = str(key).upper()
        _reject_token_key(upper)
        if upper not in _KEY_TO_FIELD:
            close = difflib.get_close_matches(upper, list(_KEY_TO_FIELD), n=1)
            fix = f"did you mean {close[0]}?" if close else "remove it (settings are listed in docs/kubernetes.md)"
            raise UserError(upper, "unknown setting", fix)
        name = _KEY_TO_FIELD[upper]
        values[name] = _coerce(_KEY_OF_FIELD[name], str(_FIELDS[name].type), value)
    if values.get("command"):
        given = [key for key in TRAINER_ONLY_KEYS if _KEY_TO_FIELD[key] in values]
        if given:
            raise UserError(
                given[0],
                "configures fsdp-observe's trainer, but COMMAND runs your own program",
                f"remove {given[0]} (pass your program's own flags in COMMAND)",
            )
    return JobSettings(**values).validate()


def _reject_token_key(key: str) -> None:
    if key in TOKEN_KEYS:
        raise UserError(
            key,
            "a token written into the settings would end up in the manifest",
            "remove it; store the token in a Secret (kubectl create secret generic hf-token "
            "--from-literal=token=...) and set HF_TOKEN_SECRET=hf-token",
        )


def _coerce(key: str, kind: str, value: Any) -> Any:
    """Turn a file value into the field's type (``kind`` is the annotation string)."""
    if kind == "int" or kind == "int | None":
        if value is None or value == "":
            if kind == "int":
                raise UserError(key, "is empty", f"set {key} to a whole number")
            return None
        if isinstance(value, bool) or not (
            isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()))
        ):
            raise UserError(key, f"{value!r} is not a whole number", f"write e.g. {key}=2")
        return int(value)
    if kind == "tuple[str, ...]":
        if isinstance(value, list):
            return tuple(str(v) for v in value)
        try:
            return tuple(shlex.split(str(value)))
        except ValueError as exc:
            raise UserError(key, f"cannot split the value ({exc})", "balance the quotes") from None
    if isinstance(value, (dict, list)):
        raise UserError(key, "expects a single value", f"write {key} as text")
    if value is None or value == "":
        return None if kind == "str | None" else ""
    return str(value)


def _parse_env(text: str, path: Path) -> dict[str, str]:
    """``KEY=value`` lines with optional ``export``, ``#`` comments and shell quoting."""
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        where = f"{path.name}:{lineno}"
        if not sep or not _ENV_KEY.fullmatch(key):
            raise UserError(where, "expected KEY=VALUE", "write one setting per line, e.g. NUM_NODES=2")
        _reject_token_key(key.upper())  # before the value is even parsed; never echoed
        if "$" in value or "`" in value:
            raise UserError(key, "shell expansion ($VAR, $(...)) is not supported", "write the value out in full")
        try:
            words = shlex.split(value, comments=True)
        except ValueError as exc:
            raise UserError(where, f"{key}: {exc}", "balance the quotes") from None
        if len(words) > 1:
            raise UserError(key, "has several words", f'quote the value: {key}="..."')
        if key.upper() in seen:
            raise UserError(key, f"is set twice (lines {seen[key.upper()]} and {lineno})", "keep one")
        seen[key.upper()] = lineno
        out[key] = words[0] if words else ""
    return out


def _parse_yaml(text: str, path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path.name}:{mark.line + 1}" if mark else path.name
        raise UserError(where, "is not valid YAML", "fix the syntax (key: value per line)") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(path.name, "must be a mapping of settings", "write key: value lines, e.g. num_nodes: 2")
    return data
