"""The ``fsdp-observe`` command.

Each subcommand is a module with ``main(argv) -> int``, imported only when chosen, so
``fsdp-observe top`` never imports torch. A user mistake exits with status 2 and one line
naming the flag and the fix.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: Subcommand → (module with ``main(argv)``, one-line help).
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("observe.demo", "a two-rank CPU fine-tune on this machine, watched end to end"),
    "train": ("observe.train_cmd", "validate, then start a local torchrun run of the trainer"),
    "scaling": ("observe.scaling.cli", "throughput, step time and memory against the number of ranks"),
    "job": ("observe.job_cmd", "render a PyTorchJob; show, read and stop one on Kubernetes"),
    "top": ("observe.tui.cli", "the terminal UI: nodes, GPUs, processes, the training run and XID alerts"),
    "agent": ("observe.agent.cli", "the node agent: host, process, GPU and XID data as /metrics and /snapshot"),
    "dashboards": ("observe.dashboards_cmd", "write or --check the Grafana dashboards and Prometheus rules"),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fsdp-observe`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="fsdp-observe", description="Observability for FSDP fine-tunes of Llama models.",
        epilog="Run 'fsdp-observe COMMAND --help' for a command's options.")
    ap.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND",
                    help="; ".join(f"{name}: {text}" for name, (_, text) in COMMANDS.items()))
    if not argv or argv[0] not in COMMANDS:
        ap.parse_args(argv[:1])  # --help, or a one-line "invalid choice" usage error (exit 2)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
