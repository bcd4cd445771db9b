"""Validate a training configuration, then start its ranks with torchrun.

Used by ``fsdp-observe train`` and ``fsdp-observe demo``: every user mistake the launcher can
see (flags, data, ports) becomes one line before any rank starts. Torch-free.
"""

from __future__ import annotations

import errno
import os
import socket
import sys

from trainer.config import TrainConfig, build_parser, config_from_args
from trainer.errors import ConfigError


def check_ports_free(address: str, base: int, count: int) -> None:
    """Fail early when one of the ranks' metrics ports ``base .. base+count-1`` is taken.

    Raises:
        ConfigError: naming the port, for ``--metrics-port``.
    """
    for port in range(base, base + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as exc:
                problem = (f"port {port} (local_rank {port - base}) is already in use"
                           if exc.errno == errno.EADDRINUSE else f"cannot bind {address}:{port} ({exc.strerror})")
                raise ConfigError("--metrics-port", problem,
                                  "stop what holds it or pass --metrics-port with a free base port") from None


def prepare(trainer_args: list[str], nproc_per_node: int) -> TrainConfig:
    """Parse and validate ``trainer_args`` as ``python -m trainer`` would; check the ports.

    Raises:
        ConfigError: the first problem found.
        SystemExit: argparse's own usage errors (status 2).
    """
    if nproc_per_node < 1:
        raise ConfigError("--nproc-per-node", f"must be positive, got {nproc_per_node}",
                          "pass 1 or more ranks")
    cfg = config_from_args(build_parser().parse_args(trainer_args))
    cfg.validate()
    if cfg.metrics.enabled:
        check_ports_free(cfg.metrics.address, cfg.metrics.port_base, nproc_per_node)
    return cfg


def torchrun_command(trainer_args: list[str], nproc_per_node: int) -> list[str]:
    """The command line of a single-node torchrun (c10d rendezvous on a free local port)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc_per_node}", "-m", "trainer", *trainer_args]


def torchrun_env(nproc_per_node: int) -> dict[str, str]:
    """The environment for the ranks: one OpenMP thread per rank unless the user chose."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc_per_node)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
