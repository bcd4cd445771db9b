"""``fsdp-observe train``: validate a configuration, then start its ranks with torchrun."""

from __future__ import annotations

import argparse
import subprocess

from observe.errors import UserError


def main(argv: list[str]) -> int:
    """Validate ``argv`` as trainer flags (plus ``--nproc-per-node``), then run torchrun."""
    from trainer.runspec.config import build_parser
    from trainer.runspec.launch import prepare, torchrun_command, torchrun_env

    ap = argparse.ArgumentParser(prog="fsdp-observe train", add_help=False)
    ap.add_argument("--nproc-per-node", type=int, default=2)
    ap.add_argument("--max-restarts", type=int, default=0)
    ap.add_argument("-h", "--help", action="store_true")
    ns, rest = ap.parse_known_args(argv)
    if ns.help:
        print("usage: fsdp-observe train [--nproc-per-node N] [--max-restarts N] [trainer flags]\n\n"
              "  --nproc-per-node N    ranks on this machine (default 2)\n"
              "  --max-restarts N      torchrun restarts the ranks up to N times after a failure; they\n"
              "                        resume from the newest checkpoint in --checkpoint-dir (default 0)\n")
        build_parser("fsdp-observe train").print_help()
        return 0
    if ns.max_restarts < 0:
        raise UserError("--max-restarts", f"must be >= 0, got {ns.max_restarts}", "pass 0 for no restarts")
    prepare(rest, ns.nproc_per_node)
    return subprocess.call(torchrun_command(rest, ns.nproc_per_node, ns.max_restarts),
                           env=torchrun_env(ns.nproc_per_node))
