"""``fsdp-observe train``: validate a configuration, then start its ranks with torchrun.

Its flags are the launcher's (``--nproc-per-node``, ``--max-restarts``) and every trainer flag,
both generated from their dataclasses (``trainer.runspec.launch.LaunchConfig``,
``trainer.runspec.config.TrainConfig``), so ``--help`` lists them all with their defaults.
"""

from __future__ import annotations

import subprocess

from observe.cli import require
from observe.flags import OneLineParser, add_flags, apply_flags, flag_names, parse_flags
from trainer.runspec.config import FLAG_GROUPS, TrainConfig, config_from_values
from trainer.runspec.launch import LaunchConfig, prepare, torchrun_command, torchrun_env

PROG = "fsdp-observe train"


def build_parser() -> OneLineParser:
    """The launcher's flags, then the trainer's."""
    ap = OneLineParser(prog=PROG, description="Validate a training configuration, then start its ranks on this "
                       "machine with torchrun.")
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


def main(argv: list[str]) -> int:
    """Validate ``argv``, then run torchrun; return its exit status.

    Raises:
        UserError: the first problem in the flags, the data, the ports or the checkpoint.
    """
    launch, cfg = parse(argv)
    require("torch", "transformers")  # the ranks import them; say so here, not from every rank
    prepare(cfg, launch.nproc_per_node)
    return subprocess.call(torchrun_command(cfg, launch.nproc_per_node, launch.max_restarts),
                           env=torchrun_env(launch.nproc_per_node))
