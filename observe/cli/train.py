"""``fsdp-observe train``: validate a configuration, then start its ranks with torchrun.

Its flags are the launcher's (``--nproc-per-node``, ``--max-restarts``) and every trainer flag,
both generated from their dataclasses (``trainer.runspec.launch.LaunchConfig``,
``trainer.runspec.config.TrainConfig``), so ``--help`` lists them all with their defaults.

Killing the wrapper stops the run, never orphans it: SIGTERM or SIGINT (Ctrl-C) is passed on to
torchrun (``trainer.launcher``, in a session of its own), whose ranks agree on a step, save it
when ``--checkpoint-dir`` is set and exit; the wrapper waits and exits with the run's status
(``observe.supervise``). Exit status: 0 finished, 143 stopped by SIGTERM, 130 stopped by SIGINT,
2 a user mistake (one line), 1 (or the failing rank's status) a failure.
"""

from __future__ import annotations

import sys

from observe import stopping
from observe.cli import require
from observe.flags import OneLineParser, add_flags, apply_flags, flag_names, parse_flags
from trainer.runspec.config import FLAG_GROUPS, TrainConfig, config_from_values
from trainer.runspec.launch import LaunchConfig, oversubscription, prepare, torchrun_command, torchrun_env

PROG = "fsdp-observe train"


def build_parser() -> OneLineParser:
    """The launcher's flags, then the trainer's."""
    ap = OneLineParser(
        prog=PROG, description="Validate a training configuration, then start its ranks on this machine with torchrun."
    )
    add_flags(ap, LaunchConfig)
    add_flags(ap, TrainConfig, FLAG_GROUPS)
    return ap


def parse(argv: list[str]) -> tuple[LaunchConfig, TrainConfig]:
    """The launch settings and the training settings of ``argv`` (validated: launch only).

    Raises:
        UserError: a usage mistake or a bad launch setting.
    """
    values = parse_flags(build_parser(), argv)
    launch_paths = flag_names(LaunchConfig)
    launch = apply_flags(LaunchConfig(), {k: v for k, v in values.items() if k in launch_paths})
    launch.validate()
    return launch, config_from_values({k: v for k, v in values.items() if k not in launch_paths})


#: Seconds a rank may outlive torchrun before the wrapper SIGKILLs it.
ORPHAN_GRACE_SECONDS = 5.0


def main(argv: list[str]) -> int:
    """Validate ``argv``, then run torchrun through ``trainer.launcher``; return the run's status.

    Raises:
        UserError: the first problem in the flags, the data, the ports or the checkpoint.
    """
    stop = stopping.install()  # first: a Ctrl-C while the launcher is being checked is kept, not a traceback
    from observe.supervise import Supervised

    launch, cfg = parse(argv)
    require("torch", "transformers")  # the ranks import them; say so here, not from every rank
    prepare(cfg, launch.nproc_per_node)
    if cfg.parallel.device != "cuda" and (warning := oversubscription(launch.nproc_per_node)) is not None:
        print(f"{PROG}: {warning}", file=sys.stderr, flush=True)
    if stop.signum is not None:
        return stopping.exit_status(stop.signum)
    child = Supervised(stop, orphan_grace=ORPHAN_GRACE_SECONDS)
    child.start(
        torchrun_command(cfg, launch.nproc_per_node, launch.max_restarts, quiet=True),
        env=torchrun_env(launch.nproc_per_node),
    )
    status = child.wait()
    if stop.signum is not None:
        stop.ignore_further()  # a late signal must not kill the wrapper as it exits
    return status
