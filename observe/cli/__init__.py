"""The ``fsdp-observe`` command: one dispatcher, one module per subcommand.

Each subcommand is a module of this package with ``main(argv) -> int``, imported only when
chosen, so ``fsdp-observe top`` never imports torch. A user mistake anywhere below raises
``observe.errors.UserError``; this module alone turns it into one line,
``error: FIELD: PROBLEM; FIX``, and exit status 2, with no traceback.

The base install (``pip install fsdp-observe``) holds the CLI and the TUI; each role adds an
extra (``pyproject.toml``). A third-party module missing anywhere below a command, at its import
or deep inside, becomes one line naming the extra that installs it (``missing_extra``); commands
whose imports come late (after a run) check up front with ``require``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from observe.errors import UserError
from observe.flags import OneLineParser

#: Subcommand → (module with ``main(argv)``, one-line help, the extra that installs what it needs).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "demo": ("observe.cli.demo", "a two-rank CPU fine-tune on this machine, watched end to end", "all"),
    "train": ("observe.cli.train", "validate, then start a local torchrun run of the trainer", "trainer"),
    "run": (
        "observe.cli.run",
        "run your own training command unchanged, with per-step metrics on every rank",
        "training",
    ),
    "scaling": ("observe.cli.scaling", "throughput, step time and memory against the number of ranks", "scaling"),
    "job": ("observe.cli.job", "render a PyTorchJob; show, read and stop one on Kubernetes", "k8s"),
    "diagnose": (
        "observe.cli.diagnose",
        "which rank is stuck (hang, mismatch) or slow (straggler): rank, pod, node, GPU, collective, stack",
        "",
    ),
    "top": ("observe.cli.top", "the terminal UI: nodes, GPUs, processes, the training run and XID alerts", ""),
    "agent": (
        "observe.cli.agent",
        "the node agent: host, process, GPU and XID data as /metrics and /snapshot",
        "agent",
    ),
    "dashboards": (
        "observe.cli.dashboards",
        "write or --check the Grafana dashboards, Prometheus rules and Alertmanager configuration",
        "dashboards",
    ),
}


#: Commands that take SIGTERM/SIGINT through ``observe.stopping`` from their first moment (a
#: DaemonSet's agent is signalled whenever the kubelet likes, start-up included).
STOP_FIRST = frozenset({"agent"})

#: Extra → the top-level modules it installs (``pyproject.toml`` [project.optional-dependencies]).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "agent": ("pynvml",),
    "trainer": ("torch", "transformers", "numpy", "tqdm", "huggingface_hub"),
    "dashboards": ("grafanalib", "attr", "yaml"),
    "k8s": ("kubernetes", "urllib3", "yaml"),
    "scaling": ("matplotlib", "numpy"),
    "etcd": ("etcd",),
}


def missing_extra(command: str, module: str) -> str:
    """The extra to install for ``module`` missing under ``command``: the command's own extra
    when it provides the module, else the extra that does (``top --kube`` → ``k8s``, local
    ``scaling`` → ``trainer``), else the command's extra or ``all``."""
    own = COMMANDS[command][2]
    top = module.split(".")[0]
    if own == "all" or (own and top in EXTRA_MODULES.get(own, ())):
        return own
    return next((extra for extra, mods in EXTRA_MODULES.items() if top in mods), own or "all")


def require(*modules: str) -> None:
    """Raise ``ModuleNotFoundError`` (which ``main`` turns into one line naming the extra) for
    the first of ``modules`` that is not installed, before a command starts work that would
    reach it only later (a report's plot after the runs, the ranks' torch in a subprocess)."""
    for name in modules:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def command_list(width: int = 79) -> str:
    """The commands as an aligned list, one per entry (wrapped under its text), for ``--help``."""
    import textwrap

    indent = 2 + max(map(len, COMMANDS)) + 2
    lines = ["commands:"]
    for name, (_, text, _) in COMMANDS.items():
        wrapped = textwrap.wrap(text, width - indent) or [""]
        lines.append(f"  {name:<{indent - 4}}  {wrapped[0]}")
        lines += [" " * indent + rest for rest in wrapped[1:]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fsdp-observe`` console script; returns the exit status.

    0 on success; 2 (one ``error:`` line) for a user mistake; otherwise what the command returns.
    """
    argv = sys.argv[1:] if argv is None else argv
    ap = OneLineParser(
        prog="fsdp-observe",
        description="Observability for FSDP fine-tunes of Llama models.",
        epilog=f"{command_list()}\n\nRun 'fsdp-observe COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND", help="one of the commands below")
    if not argv or argv[0] not in COMMANDS:
        if argv and not argv[0].startswith("-"):
            return _report(
                UserError(
                    "fsdp-observe", f"unknown command {argv[0]!r}", f"choose one of {', '.join(sorted(COMMANDS))}"
                )
            )
        if argv and argv[0] not in ("-h", "--help"):
            return _report(
                UserError(
                    "fsdp-observe",
                    f"{argv[0]!r} is not a command",
                    "options follow the command: fsdp-observe COMMAND --help",
                )
            )
        try:
            ap.parse_args(argv[:1])  # --help (exit 0), or a usage mistake (one line, exit 2)
        except UserError as exc:
            return _report(exc)
        return 2
    name = argv[0]
    module_name = COMMANDS[name][0]
    if name in STOP_FIRST:
        from observe import stopping  # standard library only

        stopping.install()  # before the command's imports: a stop signal while they run is kept, not fatal
    try:
        module = importlib.import_module(module_name)
        return int(module.main(argv[1:]))
    except UserError as exc:
        return _report(exc)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] in ("observe", "trainer"):
            raise
        return _report(
            UserError(
                f"fsdp-observe {name}",
                f"needs the Python module {exc.name.split('.')[0]!r}, which is not installed",
                f"pip install 'fsdp-observe[{missing_extra(name, exc.name)}]'",
            )
        )
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
