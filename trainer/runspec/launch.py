"""Validate a training configuration, then start its ranks with torchrun.

Used by ``fsdp-observe train``, ``demo`` and ``scaling``: every user mistake the launcher can
see (flags, data, ports) becomes one line before any rank starts. torchrun starts each rank as
the ``fsdp-observe-trainer`` console script (``--no-python``), never ``python -m trainer``, so a
``trainer.py`` in the working directory cannot shadow the trainer. Torch-free.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from observe.errors import PortInUseError, UserError, bind_error
from observe.flags import flag
from trainer.runspec.checkpoint_files import TrainerState, resolve_resume
from trainer.runspec.config import TRAINER_COMMAND, TrainConfig

#: torchrun's environment variable that stops its c10d rendezvous from sharing one TCPStore
#: server with the ranks for the whole job.
UNSHARE_STORE_ENV = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


@dataclass(frozen=True)
class LaunchConfig:
    """How ``fsdp-observe train`` starts torchrun on this machine.

    Attributes:
        nproc_per_node: ranks on this machine.
        max_restarts: worker-group restarts torchrun allows after a rank fails.
    """

    nproc_per_node: int = field(
        default=2, metadata=flag("--nproc-per-node", "ranks on this machine", group="launch", metavar="N")
    )
    max_restarts: int = field(
        default=0,
        metadata=flag(
            "--max-restarts",
            "torchrun restarts the ranks up to N times after a failure; they resume from the "
            "newest checkpoint in --checkpoint-dir",
            group="launch",
            metavar="N",
        ),
    )

    def validate(self) -> None:
        """Raises: UserError: a count below its minimum."""
        if self.nproc_per_node < 1:
            raise UserError("--nproc-per-node", f"must be positive, got {self.nproc_per_node}", "pass 1 or more ranks")
        if self.max_restarts < 0:
            raise UserError("--max-restarts", f"must be >= 0, got {self.max_restarts}", "pass 0 for no restarts")


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
    return env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0


def check_ports_free(address: str, base: int, count: int) -> None:
    """Fail early when one of the ranks' metrics ports ``base .. base+count-1`` is taken, or when
    ``address`` is not one of this machine's.

    Raises:
        UserError: naming the port (``--metrics-port``), or the address (``--metrics-address``).
    """
    for port in range(base, base + count):
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as exc:
                error = bind_error(
                    "--metrics-port",
                    address,
                    port,
                    exc,
                    "stop what holds it or pass --metrics-port with a free base port",
                    address_field="--metrics-address",
                )
                if isinstance(error, PortInUseError):
                    raise UserError(
                        "--metrics-port", f"port {port} (local_rank {port - base}) is already in use", error.fix
                    ) from None
                raise error from None


def prepare(cfg: TrainConfig, nproc_per_node: int) -> TrainConfig:
    """Validate ``cfg`` for ``nproc_per_node`` ranks on this machine as a rank would; check the
    ports and that the run is not already finished; return ``cfg``.

    Raises:
        UserError: the first problem found.
    """
    LaunchConfig(nproc_per_node=nproc_per_node).validate()
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
        raise UserError(
            "--steps",
            f"checkpoint {path} is already at step {step}, the run is done",
            f"pass --steps above {step} to continue it, or a new --checkpoint-dir to start another run",
        )


#: The console script of ``trainer.launcher``: torchrun (the same flags) whose stop on SIGTERM or
#: SIGINT is one line and exits with the ranks' status (143 / 130) instead of a traceback and 1.
#: ``fsdp-observe train`` and ``demo`` start the ranks through it.
QUIET_TORCHRUN = "fsdp-observe-torchrun"


def torchrun_command(cfg: TrainConfig, nproc_per_node: int, max_restarts: int = 0, quiet: bool = False) -> list[str]:
    """The command line of a single-node torchrun (c10d rendezvous on a free local port) over
    the ``fsdp-observe-trainer`` console script with ``cfg.to_argv()``.

    ``max_restarts``: torchrun restarts the whole worker group this often after a rank fails
    (the ranks then resume from the newest complete checkpoint). ``quiet``: run torchrun through
    ``QUIET_TORCHRUN`` (``trainer.launcher``), as ``fsdp-observe train`` and ``demo`` do. Both are
    console scripts, so a ``trainer.py`` in the working directory cannot shadow them.

    Raises:
        UserError: a console script is not installed (``installed_script``).
    """
    torchrun = [installed_script(QUIET_TORCHRUN)] if quiet else [sys.executable, "-m", "torch.distributed.run"]
    return [
        *torchrun,
        "--standalone",
        f"--nproc-per-node={nproc_per_node}",
        f"--max-restarts={max_restarts}",
        "--no-python",
        installed_script(TRAINER_COMMAND),
        *cfg.to_argv(),
    ]


def installed_script(name: str = TRAINER_COMMAND) -> str:
    """The path of one of the project's console scripts (``fsdp-observe-trainer`` by default): the
    one installed beside this Python (``sys.executable``'s folder, as pip installs it into a
    virtualenv), else on PATH.

    Raises:
        UserError: neither exists (the project is not installed with pip).
    """
    beside = Path(sys.executable).parent / name
    if os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise UserError(
            name,
            f"the command is not installed (not beside {sys.executable}, not on PATH)",
            "pip install -e '.[trainer]' in this environment",
        )
    return found


def oversubscription(nproc_per_node: int, cores: int | None = None) -> str | None:
    """A warning when ``nproc_per_node`` ranks exceed this machine's CPU cores (``os.cpu_count``),
    as ``fsdp-observe scaling`` notes it: the ranks then share cores, so step times and tokens/s
    measure the oversubscription; ``None`` when each rank has a core."""
    cores = cores or os.cpu_count() or 1
    if nproc_per_node <= cores:
        return None
    return (
        f"warning: {nproc_per_node} ranks on this machine's {cores} CPU core{'s' * (cores != 1)}: ranks share "
        f"cores, so step times and tokens/s measure that oversubscription (--nproc-per-node {cores} or less "
        "gives each rank a core)"
    )


def torchrun_env(nproc_per_node: int) -> dict[str, str]:
    """The environment for torchrun and the ranks: one OpenMP thread per rank unless the user
    chose, and a fresh rendezvous store per restart (``restart_store_hazard``)."""
    env = dict(os.environ)
    env.setdefault(UNSHARE_STORE_ENV, "1")
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc_per_node)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
