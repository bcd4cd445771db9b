"""The ``fsdp-observe`` command: one dispatcher, one module per subcommand.

Each subcommand is a module of this package with ``main(argv) -> int``, imported only when
chosen, so ``fsdp-observe top`` never imports torch. A user mistake anywhere below raises
``observe.errors.UserError``; this module alone turns it into one line,
``error: FIELD: PROBLEM; FIX``, and exit status 2, with no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from observe.errors import UserError

#: Subcommand → (module with ``main(argv)``, one-line help, the extra that installs what it needs).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("observe.cli.demo", "a two-rank CPU fine-tune on this machine, watched end to end", "all"),
    "train": ("observe.cli.train", "validate, then start a local torchrun run of the trainer", "trainer"),
    "run": ("observe.cli.run", "run your own training command unchanged, with per-step metrics on every rank",
            "training"),
    "scaling": ("observe.cli.scaling", "throughput, step time and memory against the number of ranks", "scaling"),
    "job": ("observe.cli.job", "render a PyTorchJob; show, read and stop one on Kubernetes", "k8s"),
    "top": ("observe.cli.top", "the terminal UI: nodes, GPUs, processes, the training run and XID alerts", ""),
    "agent": ("observe.cli.agent", "the node agent: host, process, GPU and XID data as /metrics and /snapshot",
              "agent"),
    "dashboards": ("observe.cli.dashboards", "write or --check the Grafana dashboards, Prometheus rules and "
                   "Alertmanager configuration", "dashboards"),
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fsdp-observe`` console script; returns the exit status.

    0 on success; 2 (one ``error:`` line) for a user mistake; otherwise what the command returns.
    """
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="fsdp-observe", description="Observability for FSDP fine-tunes of Llama models.",
        epilog="Run 'fsdp-observe COMMAND --help' for a command's options.")
    ap.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND",
                    help="; ".join(f"{name}: {text}" for name, (_, text, _) in COMMANDS.items()))
    if not argv or argv[0] not in COMMANDS:
        if argv and not argv[0].startswith("-"):
            return _report(UserError("fsdp-observe", f"unknown command {argv[0]!r}",
                                     f"choose one of {', '.join(sorted(COMMANDS))}"))
        ap.parse_args(argv[:1])  # --help (exit 0), or argparse's usage error (exit 2)
        return 2
    name = argv[0]
    module_name, _, extra = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
        return int(module.main(argv[1:]))
    except UserError as exc:
        return _report(exc)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] in ("observe", "trainer"):
            raise
        return _report(UserError(f"fsdp-observe {name}", f"needs the Python package {exc.name!r}, which is not "
                                 "installed", f"pip install 'fsdp-observe[{extra or 'all'}]'"))
    except BrokenPipeError:
        return _closed_stdout()


def _report(exc: UserError) -> int:
    print(f"error: {exc}", file=sys.stderr)
    return exc.exit_status


def _closed_stdout() -> int:
    """The reader of stdout went away (``| head``): exit quietly, as ``cat`` does."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not raise again
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
