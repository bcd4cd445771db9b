"""Process-group set-up and tear-down for one rank started by torchrun (or alone)."""

from __future__ import annotations

import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass

import torch
import torch.distributed as dist

from observe.errors import UserError
from observe.ports import free_port
from trainer.runspec.config import ParallelConfig
from trainer.runspec.launch import UNSHARE_STORE_ENV, restart_store_hazard


@dataclass(frozen=True)
class Runtime:
    """Where this rank runs.

    Attributes:
        rank, local_rank, world_size, local_world_size: from torchrun's environment.
        device: ``cuda:<local_rank>`` or ``cpu``.
        backend: the torch.distributed backend in use (``nccl``, ``gloo``, ...).
        node: ``NODE_NAME`` (Kubernetes downward API) or the host name.
        gpu_uuid: the ``GPU-…`` UUID of this rank's GPU (``None`` on CPU).
        device_name: ``torch.cuda.get_device_name`` (``None`` on CPU).
        restart_count: how often torchrun has restarted the worker group
            (``TORCHELASTIC_RESTART_COUNT``; 0 without torchrun).
    """

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str
    node: str
    gpu_uuid: str | None
    device_name: str | None
    restart_count: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that logs for the run."""
        return self.rank == 0


def init(parallel: ParallelConfig) -> Runtime:
    """Join the process group: NCCL on CUDA, gloo on CPU, unless ``parallel.backend`` says.

    Without torchrun's environment the process runs as a world of one (handy for references).

    Raises:
        UserError: ``--device cuda`` on a machine without CUDA.
    """
    if "RANK" not in os.environ:
        os.environ.update(
            RANK="0",
            LOCAL_RANK="0",
            WORLD_SIZE="1",
            LOCAL_WORLD_SIZE="1",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    use_cuda = parallel.device == "cuda" or (parallel.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise UserError(
            "--device", "cuda was asked for but no CUDA device is visible", "pass --device cpu or run on a GPU node"
        )
    gpu_uuid = device_name = None
    if use_cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        device_name = props.name
        gpu_uuid = f"GPU-{props.uuid}" if getattr(props, "uuid", None) else None
    else:
        device = torch.device("cpu")
    backend = parallel.backend if parallel.backend != "auto" else ("nccl" if use_cuda else "gloo")
    dist.init_process_group(backend=backend, device_id=device if use_cuda else None)
    if rank == 0 and restart_store_hazard(dict(os.environ)):
        print(
            f"warning: torchrun shares its rendezvous store with the ranks across restarts, so a restarted "
            f"group can hang on the previous attempt's addresses; set {UNSHARE_STORE_ENV}=1 in torchrun's "
            f"environment",
            file=sys.stderr,
            flush=True,
        )
    node = os.environ.get("NODE_NAME") or socket.gethostname()
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    return Runtime(
        rank, local_rank, world_size, local_world_size, device, backend, node, gpu_uuid, device_name, restarts
    )


def resolve_run_id(given: str | None) -> str:
    """The run's id, the same on every rank.

    ``given`` (``--run-id``, or the id of the checkpoint a run resumes) when set; else torchrun's
    rendezvous id (``TORCHELASTIC_RUN_ID``) when set; else rank 0 makes one
    (``run-<UTC time>-<random>``) and broadcasts it.
    """
    if given:
        return given
    elastic = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if elastic and elastic != "none":
        return elastic
    box = [f"run-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def shutdown() -> None:
    """Barrier, then destroy the process group.

    On gloo, destroying the group while a peer is still inside a collective ends about one run
    in eight with ``terminate called without an active exception``; the barrier first, and the
    caller's ``os._exit`` after, make the exit deterministic.
    """
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
