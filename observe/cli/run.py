"""``fsdp-observe run -- COMMAND ...``: run an unchanged training command with metrics on.

    fsdp-observe run -- torchrun --nproc-per-node 8 train.py --lr 1e-4
    fsdp-observe run --port-base 9600 -- accelerate launch train.py
    fsdp-observe run -- python -m my_pkg.finetune

A ``torchrun`` command runs as ``fsdp-observe-torchrun`` (``trainer.launcher``: torchrun itself,
the same flags) when that is installed beside it: a stop then ends quietly with the ranks' status
(143 after SIGTERM, 130 after SIGINT) and a failed rank with its own status and one line naming
it, instead of torchrun's tracebacks and status 1. Another launcher runs as given.

It puts the injector's ``sitecustomize`` first on ``PYTHONPATH`` (``observe/training/inject/site``,
which then runs any ``sitecustomize`` it shadows), sets ``FSDP_OBSERVE_INSTRUMENT=1`` and the
settings given, and replaces itself with the command (``exec``), so signals, the exit status and
the terminal are the command's own. Every Python process the command starts inherits both, and
each rank serves ``/metrics`` on ``port base + LOCAL_RANK`` from its first optimizer step
(``observe.training.inject``). A Python started with ``-S`` (no ``site``) cannot be instrumented,
and one with ``-I`` or ``-E`` ignores ``PYTHONPATH`` (only the installed ``.pth`` still works
there): both are said in one line before the command starts.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

from observe.catalog import INSTRUMENT_ENV
from observe.errors import UserError
from observe.flags import OneLineParser
from observe.training.rankenv import ADDRESS_ENV, LINGER_ENV, LOG_EVERY_ENV, PORT_BASE_ENV, RUN_ID_ENV

#: The project's torchrun with a quiet stop (``pyproject.toml`` [project.scripts]).
QUIET_TORCHRUN = "fsdp-observe-torchrun"

#: The folder that holds only the injector's ``sitecustomize.py``.
SITE_DIR = Path(__file__).resolve().parents[1] / "training" / "inject" / "site"
#: The ``.pth`` the wheel installs into site-packages (``setup.py``).
PTH_NAME = "fsdp_observe_instrument.pth"
_PYTHON = re.compile(r"python[0-9.]*$")


class _RunParser(OneLineParser):
    """``run``'s parser: a flag it does not know is most often the training command's own, given
    before the ``--`` that starts it."""

    def fallback(self, message: str) -> str:
        """For a flag ``run`` does not know, and no ``run`` flag is close: write the training
        command after ``--``."""
        if not message.startswith("unrecognized arguments"):
            return super().fallback(message)
        return (
            "write the training command after --, e.g. fsdp-observe run -- torchrun --nproc-per-node 2 "
            f"train.py (run '{self.prog} --help' for run's own flags)"
        )


def build_parser() -> argparse.ArgumentParser:
    """The ``fsdp-observe run`` command line."""
    ap = _RunParser(
        prog="fsdp-observe run",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a training command unchanged, with fsdp-observe's per-step metrics on "
        "every rank (see docs/own-training.md).",
        epilog="examples:\n  fsdp-observe run -- torchrun --nproc-per-node 8 train.py\n"
        "  fsdp-observe run --port-base 9600 --linger 30 -- python train.py",
    )
    ap.add_argument(
        "--port-base",
        type=int,
        metavar="PORT",
        help=f"rank r serves on PORT + LOCAL_RANK (default ${PORT_BASE_ENV}, else 9500)",
    )
    ap.add_argument("--address", help=f"bind address (default ${ADDRESS_ENV}, else 0.0.0.0)")
    ap.add_argument(
        "--linger",
        type=float,
        metavar="SECONDS",
        help=f"keep serving after the last step for a final scrape (default ${LINGER_ENV}, else 20)",
    )
    ap.add_argument(
        "--log-every",
        type=int,
        metavar="STEPS",
        help=f"steps per log window, when loss and norms are read (default ${LOG_EVERY_ENV}, else 10)",
    )
    ap.add_argument("--run-id", help=f"the run_id label (default ${RUN_ID_ENV}, else torchrun's run id)")
    ap.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the training command, after --"
    )
    return ap


def instrumented_env(ns: argparse.Namespace, environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with the injector switched on, its ``sitecustomize`` first on ``PYTHONPATH``
    and the settings of ``ns``."""
    env = dict(environ)
    env[INSTRUMENT_ENV] = "1"
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([str(SITE_DIR), *paths])
    for value, name in (
        (ns.port_base, PORT_BASE_ENV),
        (ns.address, ADDRESS_ENV),
        (ns.linger, LINGER_ENV),
        (ns.log_every, LOG_EVERY_ENV),
        (ns.run_id, RUN_ID_ENV),
    ):
        if value is not None:
            env[name] = str(value)
    return env


def python_flag_warnings(command: list[str]) -> list[str]:
    """One line per interpreter flag of ``command`` that defeats the injector (``-S``, ``-I``, ``-E``)."""
    if not command or not _PYTHON.search(Path(command[0]).name):
        return []
    flags: set[str] = set()
    for arg in command[1:]:
        if arg in ("-m", "-c") or not arg.startswith("-") or arg.startswith("--"):
            break
        flags.update(arg[1:])
    out = []
    if "S" in flags:
        out.append("python -S skips site: nothing can be instrumented in that process; drop -S")
    if flags & {"I", "E"}:
        flag = "-I" if "I" in flags else "-E"
        pth = Path(sys.prefix).glob(f"lib/python*/site-packages/{PTH_NAME}")
        how = (
            "the installed .pth still instruments it"
            if any(pth)
            else "and fsdp-observe's .pth is not installed here, so nothing is instrumented; drop " + flag
        )
        out.append(f"python {flag} ignores PYTHONPATH: {how}")
    return out


def quiet_launcher(executable: str) -> str:
    """``fsdp-observe-torchrun`` when ``executable`` is a ``torchrun`` with it installed in the same
    folder (the same environment, so the same torch), else ``executable``."""
    if Path(executable).name != "torchrun":
        return executable
    beside = Path(executable).parent / QUIET_TORCHRUN
    return str(beside) if os.access(beside, os.X_OK) else executable


def main(argv: list[str]) -> int:
    """Validate, then ``exec`` the command with instrumentation on (returns only on error).

    Raises:
        UserError: no command, a command that is not found, or a bad setting.
    """
    ns = build_parser().parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        raise UserError(
            "fsdp-observe run",
            "no command given",
            "write the command after --, e.g. fsdp-observe run -- torchrun --nproc-per-node 2 train.py",
        )
    if ns.port_base is not None and not 0 < ns.port_base < 65536:
        raise UserError("--port-base", f"{ns.port_base} is not a TCP port", "pass a port such as 9500")
    if ns.linger is not None and ns.linger < 0:
        raise UserError("--linger", f"must be 0 or more, got {ns.linger:g}", "pass e.g. --linger 20")
    if ns.log_every is not None and ns.log_every < 1:
        raise UserError("--log-every", f"must be 1 or more, got {ns.log_every}", "pass e.g. --log-every 10")
    executable = shutil.which(command[0])
    if executable is None:
        raise UserError("fsdp-observe run", f"command {command[0]!r} not found", "check the spelling and PATH")
    for line in python_flag_warnings(command):
        print(f"fsdp-observe run: {line}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    launcher = quiet_launcher(executable)
    argv_out = command if launcher == executable else [launcher, *command[1:]]
    os.execve(launcher, argv_out, instrumented_env(ns, dict(os.environ)))
    return 0  # not reached
