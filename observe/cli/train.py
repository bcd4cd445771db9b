"""``fsdp-observe train``: validate a configuration, then start its ranks with torchrun.

Killing the wrapper stops the run, never orphans it: SIGTERM or SIGINT (Ctrl-C) is passed on to
torchrun (``trainer.launcher``, in a session of its own), whose ranks agree on a step, save it
when ``--checkpoint-dir`` is set and exit; the wrapper waits and exits with the run's status
(``observe.supervise``). Exit status: 0 finished, 143 stopped by SIGTERM, 130 stopped by SIGINT,
2 a user mistake (one line), 1 (or the failing rank's status) a failure.
"""

from __future__ import annotations

import argparse

from observe import stopping
from observe.errors import UserError

#: Seconds a rank may outlive torchrun before the wrapper SIGKILLs it.
ORPHAN_GRACE_SECONDS = 5.0


def main(argv: list[str]) -> int:
    """Validate ``argv`` as trainer flags (plus ``--nproc-per-node``), then run torchrun; return the run's status."""
    stop = stopping.install()  # first: a Ctrl-C while torch's launcher is imported is kept, not a traceback
    from observe.supervise import Supervised
    from trainer.runspec.config import build_parser
    from trainer.runspec.launch import QUIET_TORCHRUN, prepare, torchrun_command, torchrun_env

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
    if stop.signum is not None:
        return stopping.exit_status(stop.signum)
    child = Supervised(stop, orphan_grace=ORPHAN_GRACE_SECONDS)
    child.start(torchrun_command(rest, ns.nproc_per_node, ns.max_restarts, launcher=QUIET_TORCHRUN),
                env=torchrun_env(ns.nproc_per_node))
    status = child.wait()
    if stop.signum is not None:
        stop.ignore_further()  # a late signal must not kill the wrapper as it exits
    return status
