"""Validate a training configuration, then start its ranks with torchrun.

Used by ``fsdp-observe train`` and ``fsdp-observe demo``: every user mistake the launcher can
see (flags, data, ports) becomes one line before any rank starts. Torch-free.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from observe.errors import UserError
from trainer.runspec.checkpoint_files import TrainerState, resolve_resume
from trainer.runspec.config import TrainConfig, build_parser, config_from_args

#: torchrun's environment variable that stops its c10d rendezvous from sharing one TCPStore
#: server with the ranks for the whole job.
UNSHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def restart_store_hazard(env: dict[str, str]) -> bool:
    """Whether a restarted worker group may read the previous attempt's addresses and hang.

    torch 2.13's c10d rendezvous creates the TCPStore it shares with the ranks once, at the
    first rendezvous, and reuses it for every restart, so the store still holds the dead
    attempt's keys (cf. pytorch/pytorch#135712): gloo then connects to a dead address (an
    error, after retries) or, for a group made later, waits forever. It bites when torchrun may
    restart (``--max-restarts`` > 0) and shares its store (``TORCHELASTIC_USE_AGENT_STORE``);
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in torchrun's environment avoids it. etcd and
    etcd-v2 rendezvous give each attempt a new store.
    """
    return (env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0)


def check_ports_free(address: str, base: int, count: int) -> None:
    """Fail early when one of the ranks' metrics ports ``base .. base+count-1`` is taken.

    Raises:
        UserError: naming the port, for ``--metrics-port``.
    """
    for port in range(base, base + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as exc:
                problem = (f"port {port} (local_rank {port - base}) is already in use"
                           if exc.errno == errno.EADDRINUSE else f"cannot bind {address}:{port} ({exc.strerror})")
                raise UserError("--metrics-port", problem,
                                  "stop what holds it or pass --metrics-port with a free base port") from None


def prepare(trainer_args: list[str], nproc_per_node: int) -> TrainConfig:
    """Parse and validate ``trainer_args`` as ``python -m trainer`` would; check the ports.

    Raises:
        UserError: the first problem found.
        SystemExit: argparse's own usage errors (status 2).
    """
    if nproc_per_node < 1:
        raise UserError("--nproc-per-node", f"must be positive, got {nproc_per_node}",
                          "pass 1 or more ranks")
    cfg = config_from_args(build_parser().parse_args(trainer_args))
    cfg.validate(world_size=nproc_per_node, local_world_size=nproc_per_node)
    check_not_finished(cfg)
    if cfg.metrics.enabled:
        check_ports_free(cfg.metrics.address, cfg.metrics.port_base, nproc_per_node)
    return cfg


def check_not_finished(cfg: TrainConfig) -> None:
    """Refuse to start a run whose checkpoint already reached ``--steps``.

    (A rank that finds this, e.g. after an elastic restart, just exits 0 instead.)

    Raises:
        UserError: naming ``--steps``.
    """
    path = resolve_resume(cfg.checkpoint.dir, cfg.checkpoint.resume)
    if path is not None and (step := TrainerState.read(path).step) >= cfg.steps:
        raise UserError("--steps", f"checkpoint {path} is already at step {step}, the run is done",
                          f"pass --steps above {step} to continue it, or --resume never to start over")


#: torchrun as a module, and ``trainer.launcher``: torchrun whose stop on SIGTERM/SIGINT is one line
#: and exits with the ranks' status (143 / 130) instead of a traceback and 1.
TORCHRUN, QUIET_TORCHRUN = "torch.distributed.run", "trainer.launcher"


def torchrun_command(trainer_args: list[str], nproc_per_node: int, max_restarts: int = 0,
                     launcher: str = TORCHRUN) -> list[str]:
    """The command line of a single-node torchrun (c10d rendezvous on a free local port).

    ``max_restarts``: torchrun restarts the whole worker group this often after a rank fails
    (the ranks then resume from the newest complete checkpoint). ``launcher``: the module that
    runs torchrun (``QUIET_TORCHRUN`` for ``fsdp-observe train`` and ``demo``).
    """
    return [sys.executable, "-m", launcher, "--standalone",
            f"--nproc-per-node={nproc_per_node}", f"--max-restarts={max_restarts}", "-m", "trainer", *trainer_args]


def torchrun_env(nproc_per_node: int) -> dict[str, str]:
    """The environment for torchrun and the ranks: one OpenMP thread per rank unless the user
    chose, and a fresh rendezvous store per restart (``distributed.restart_store_hazard``)."""
    env = dict(os.environ)
    env.setdefault(UNSHARE_STORE_ENV, "1")
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc_per_node)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
