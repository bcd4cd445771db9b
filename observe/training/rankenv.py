"""Where this process runs, read from the launcher's environment: the labels every series carries.

torchrun (and the Kubeflow training operator, which starts torchrun) sets ``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``TORCHELASTIC_RUN_ID`` and ``TORCHELASTIC_RESTART_COUNT``
for every worker (https://pytorch.org/docs/stable/elastic/run.html#environment-variables). A
launcher that sets no ``LOCAL_RANK`` (a plain ``python train.py``, ``mp.spawn``) gives rank 0 of a
world of one unless ``torch.distributed`` is already initialised, in which case its rank is used
and the problem is reported (``no_local_rank``). Standard library only; torch is consulted only
when the caller already imported it.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass

from observe.catalog import TRAINER_PORT_BASE
from observe.training.phases import process_start_time

#: Settings of every entry point, read from the environment (a keyword argument wins).
RUN_ID_ENV = "FSDP_OBSERVE_RUN_ID"
PORT_BASE_ENV = "FSDP_OBSERVE_PORT_BASE"
ADDRESS_ENV = "FSDP_OBSERVE_ADDRESS"
LINGER_ENV = "FSDP_OBSERVE_LINGER_SECONDS"
LOG_EVERY_ENV = "FSDP_OBSERVE_LOG_EVERY"
#: Defaults: serve on every interface (a pod's Prometheus scrapes the pod IP); linger a bit longer
#: than the trainer PodMonitor's 15 s scrape interval so the last steps are scraped once.
DEFAULT_ADDRESS = "0.0.0.0"
DEFAULT_LINGER_SECONDS = 20.0
DEFAULT_LOG_EVERY = 10


@dataclass(frozen=True)
class RankEnv:
    """One process's place in the run.

    Attributes:
        rank, local_rank, world_size, local_world_size: as torchrun sets them.
        node: ``NODE_NAME`` (Kubernetes downward API) or the host name.
        restarts: ``TORCHELASTIC_RESTART_COUNT`` (0 without torchrun).
        elastic_run_id: ``TORCHELASTIC_RUN_ID`` (``None`` without torchrun or when ``none``).
        no_local_rank: the launcher set no ``LOCAL_RANK`` although the process is one rank of several.
    """

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node: str
    restarts: int = 0
    elastic_run_id: str | None = None
    no_local_rank: bool = False


def _int(env: dict[str, str] | os._Environ[str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def _distributed_rank() -> tuple[int, int] | None:
    """``(rank, world_size)`` of an initialised ``torch.distributed`` (only if torch is imported)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # noqa: BLE001 - a half-torn-down group: treat as not initialised
        return None
    return None


def read_rank_env(env: dict[str, str] | None = None) -> RankEnv:
    """This process's ``RankEnv`` from ``env`` (default ``os.environ``)."""
    e = os.environ if env is None else env
    local_rank, rank, world = _int(e, "LOCAL_RANK"), _int(e, "RANK"), _int(e, "WORLD_SIZE")
    no_local_rank = False
    if local_rank is None:
        group = _distributed_rank()
        if group is not None and group[1] > 1:
            rank, world = group
            local_rank, no_local_rank = group[0], True
        else:
            local_rank = rank if rank is not None else 0
    rank = local_rank if rank is None else rank
    world = world if world is not None else 1
    local_world = _int(e, "LOCAL_WORLD_SIZE") or world
    elastic = e.get("TORCHELASTIC_RUN_ID") or None
    return RankEnv(
        rank=rank,
        local_rank=local_rank,
        world_size=world,
        local_world_size=local_world,
        node=e.get("NODE_NAME") or socket.gethostname(),
        restarts=_int(e, "TORCHELASTIC_RESTART_COUNT") or 0,
        elastic_run_id=None if elastic == "none" else elastic,
        no_local_rank=no_local_rank,
    )


def resolve_run_id(given: str | None, rank_env: RankEnv, env: dict[str, str] | None = None) -> str:
    """The run's id, the same on every rank without a collective.

    ``given``, else ``FSDP_OBSERVE_RUN_ID``, else torchrun's ``TORCHELASTIC_RUN_ID``, else one
    made from the parent process (ranks started by one launcher share it):
    ``run-<parent pid>-<parent start, Unix seconds>``; a lone process uses its own.
    """
    e = os.environ if env is None else env
    if given:
        return given
    if e.get(RUN_ID_ENV):
        return e[RUN_ID_ENV]
    if rank_env.elastic_run_id:
        return rank_env.elastic_run_id
    if rank_env.world_size > 1:
        parent = os.getppid()
        return f"run-{parent}-{int(process_start_time(f'/proc/{parent}/stat'))}"
    return f"run-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"


def env_float(name: str, default: float, env: dict[str, str] | None = None) -> float:
    """A float setting from the environment; ``default`` when unset or not a number."""
    raw = (os.environ if env is None else env).get(name, "")
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        return default


def env_int(name: str, default: int, env: dict[str, str] | None = None) -> int:
    """An int setting from the environment; ``default`` when unset or not a whole number."""
    raw = (os.environ if env is None else env).get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        return default


def log_every_setting(env: dict[str, str] | None = None) -> tuple[int | None, str | None]:
    """``FSDP_OBSERVE_LOG_EVERY`` as ``(steps, None)``; ``(None, None)`` when unset; ``(None, why)``
    when it is not a whole number of 1 or more (``why``: one line naming the variable and the fix)."""
    raw = (os.environ if env is None else env).get(LOG_EVERY_ENV, "").strip()
    if not raw:
        return None, None
    try:
        steps = int(raw)
    except ValueError:
        steps = 0
    if steps >= 1:
        return steps, None
    return None, (
        f"{LOG_EVERY_ENV}={raw!r} is not a whole number of 1 or more: windows close every "
        f"{DEFAULT_LOG_EVERY} steps; set e.g. {LOG_EVERY_ENV}=10"
    )


def port_base(given: int | None = None, env: dict[str, str] | None = None) -> int:
    """The metrics port base: ``given``, else ``FSDP_OBSERVE_PORT_BASE``, else 9500."""
    return given if given is not None else env_int(PORT_BASE_ENV, TRAINER_PORT_BASE, env)


def bind_address(given: str | None = None, env: dict[str, str] | None = None) -> str:
    """The bind address: ``given``, else ``FSDP_OBSERVE_ADDRESS``, else ``0.0.0.0``."""
    return given or (os.environ if env is None else env).get(ADDRESS_ENV) or DEFAULT_ADDRESS


def cuda_identity(local_rank: int) -> tuple[str | None, str | None]:
    """``(gpu_uuid, device name)`` of this rank's CUDA device, or ``(None, None)``.

    Only when the caller already imported torch and CUDA is available: the current device once
    CUDA is initialised, else device ``local_rank`` (torchrun's one-GPU-per-rank layout).
    """
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return None, None
        index = torch.cuda.current_device() if torch.cuda.is_initialized() else local_rank
        props = torch.cuda.get_device_properties(index % max(1, torch.cuda.device_count()))
        uuid_ = getattr(props, "uuid", None)
        return (f"GPU-{uuid_}" if uuid_ else None), props.name
    except Exception:  # noqa: BLE001 - a broken driver must not stop training: no GPU labels
        return None, None


def rank_labels(run_id: str, rank_env: RankEnv, gpu_uuid: str | None) -> dict[str, str]:
    """The constant labels of every series of this rank (``observe.catalog.TRAINER_LABELS``, and
    ``gpu_uuid``, the ``GPU-...`` string NVML and DCGM print, on CUDA)."""
    labels = {
        "run_id": run_id,
        "rank": str(rank_env.rank),
        "local_rank": str(rank_env.local_rank),
        "node": rank_env.node,
    }
    if gpu_uuid:
        labels["gpu_uuid"] = gpu_uuid
    return labels
