"""``fsdp-observe scaling``: throughput, step time and memory against the number of ranks.

Local mode runs the same short job at several world sizes on this machine; cluster mode
(``--prometheus URL --run-id A --run-id B ...``) reads finished runs from Prometheus. Both
write a table to the terminal and ``report.json`` and ``report.png`` into ``--out``.
A user mistake is one line naming the flag and the fix, exit status 2; a run that fails is
exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from observe.cli import require
from observe.errors import UserError, writable_dir
from observe.flags import OneLineParser, add_flags, apply_flags, iter_flags
from observe.scaling.local import BOTH_GROUP, LOCAL_GROUP, LocalPlan

if TYPE_CHECKING:
    from observe.scaling.figures import ScalingReport

#: ``{path: flag}`` of the plan's flags that only local mode uses.
LOCAL_ONLY = {path: spec.name for path, _, spec in iter_flags(LocalPlan) if spec.group != BOTH_GROUP}


class _Parser(OneLineParser):
    """The one-line parser, with this command's fixes for a missing value and trainer flags."""

    def hint(self, message: str) -> str:
        """A value example for a flag without one; ``--`` for what looks like a trainer flag."""
        if message.endswith("expected one argument"):
            flag = message.removeprefix("argument ").split(":")[0].split("/")[-1]
            return f"give it a value, e.g. {flag}=VALUE (see --help)"
        if message.startswith("unrecognized arguments"):
            return super().hint(message) + "; trainer flags go after --"
        return super().hint(message)


def _lookback(text: str) -> float:
    from observe.promql import duration_seconds

    try:
        seconds = duration_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} looks back no time; pass e.g. 12h or 7d")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``fsdp-observe scaling``."""
    ap = _Parser(
        prog="fsdp-observe scaling",
        description="Throughput, step time and memory against the number of ranks: local runs, or "
        "finished runs read from Prometheus.",
        usage="fsdp-observe scaling [options] [-- TRAINER_FLAGS ...]",
        epilog="Definitions, method and JSON fields: docs/scaling.md",
    )
    ap.add_argument_group(LOCAL_GROUP)
    cluster = ap.add_argument_group("cluster mode: read finished runs from Prometheus")
    both = ap.add_argument_group(BOTH_GROUP)
    add_flags(ap, LocalPlan)  # into the local and both-modes groups
    cluster.add_argument("--prometheus", metavar="URL", help="Prometheus base URL, e.g. http://prometheus:9090")
    cluster.add_argument(
        "--run-id", action="append", default=[], metavar="ID", help="a run to include (repeat: one run per world size)"
    )
    cluster.add_argument(
        "--lookback",
        type=_lookback,
        default=7 * 86400.0,
        metavar="DURATION",
        help="how far back to look for the runs (default 7d)",
    )
    both.add_argument(
        "--out",
        type=Path,
        default=Path("scaling-report"),
        metavar="DIR",
        help="where report.json and report.png go (default ./scaling-report/)",
    )
    return ap


def parse(argv: list[str]) -> tuple[argparse.Namespace, LocalPlan]:
    """Parse ``argv``; return the options and the local plan (with the trainer flags after ``--``).

    The plan's defaults are ``LocalPlan``'s; ``--threads-per-rank`` defaults to
    ``$OMP_NUM_THREADS``. In cluster mode only the plan's ``warmup_steps`` is used.

    Raises:
        UserError: the first mistake, naming the flag.
    """
    trainer_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, trainer_args = argv[:cut], argv[cut + 1 :]
    ns = build_parser().parse_args(join_world_sizes(argv))
    if ns.prometheus:
        if "://" not in ns.prometheus:  # host:port, as fsdp-observe top --prometheus takes it
            ns.prometheus = f"http://{ns.prometheus}"
        if not ns.prometheus.startswith(("http://", "https://")):
            raise UserError(
                "--prometheus", f"{ns.prometheus!r} is not an http(s) URL", "pass e.g. http://localhost:9090"
            )
        if not ns.run_id:
            raise UserError("--run-id", "cluster mode needs the runs to compare", "pass --run-id once per run")
        given = [name for path, name in LOCAL_ONLY.items() if hasattr(ns, path)]
        if given or trainer_args:
            flag = given[0] if given else "--"
            raise UserError(flag, "applies to local mode only", "with --prometheus name finished runs with --run-id")
        if len(set(ns.run_id)) < 2:
            raise UserError("--run-id", "a scaling report compares two or more runs", "pass --run-id for each")
    elif ns.run_id:
        raise UserError("--run-id", "reads runs from Prometheus", "pass --prometheus URL as well")
    plan_values = {path: getattr(ns, path) for path, _, _ in iter_flags(LocalPlan) if hasattr(ns, path)}
    plan = apply_flags(LocalPlan(trainer_args=tuple(trainer_args)), plan_values, environ=os.environ)
    if not ns.prometheus and len(plan.world_sizes) < 2:
        raise UserError("--world-sizes", "a scaling report compares two or more sizes", "pass e.g. --world-sizes 1,2")
    return ns, plan


def join_world_sizes(argv: list[str]) -> list[str]:
    """``--world-sizes 1 2 4`` (sizes as separate words, as this flag once took them) as
    ``--world-sizes 1,2,4``: the whole numbers that follow the flag's value are joined to it."""
    out: list[str] = []
    for word in argv:
        previous = out[-1] if out else ""
        joinable = word.replace(",", "").isdigit() and previous.replace(",", "").split("=")[-1].isdigit()
        before = out[-2] if len(out) > 1 else ""
        if joinable and (before == "--world-sizes" or previous.startswith("--world-sizes=")):
            out[-1] = f"{previous},{word}"
        else:
            out.append(word)
    return out


def _prepare_out(out: Path) -> None:
    writable_dir(out, "--out", "pass a writable directory")


def _local(ns: argparse.Namespace, plan: LocalPlan) -> ScalingReport:
    from observe.scaling.figures import build_report
    from observe.scaling.local import check, run_all

    threads = plan.threads_per_rank
    check(plan)
    notes = []
    cores = os.cpu_count() or 1
    if max(plan.world_sizes) * threads > cores:
        notes.append(
            f"{max(plan.world_sizes)} ranks x {threads} thread(s) exceed this machine's {cores} CPU "
            f"cores: past {max(1, cores // threads)} ranks, ranks share cores and the efficiency "
            "measures that oversubscription"
        )
    print(
        f"fsdp-observe scaling: {'strong' if plan.strong else 'weak'} scaling at "
        f"{', '.join(map(str, plan.world_sizes))} ranks, {threads} thread(s) per rank",
        flush=True,
    )
    sizes = run_all(plan, ns.out, say=lambda line: print(line, flush=True))
    return build_report("local", sizes, plan.warmup_steps, notes)


def _cluster(ns: argparse.Namespace, warmup_steps: int) -> ScalingReport:
    from observe.promapi import PrometheusAPI, PrometheusError
    from observe.scaling.cluster import RunNotFound, read_run
    from observe.scaling.figures import MeasureError, build_report

    api = PrometheusAPI(ns.prometheus)
    now = time.time()
    sizes = []
    try:
        for run_id in dict.fromkeys(ns.run_id):
            try:
                sizes.append(read_run(api, run_id, warmup_steps, ns.lookback, now))
            except RunNotFound:
                raise UserError(
                    "--run-id",
                    f"no trainer series with run_id {run_id!r} in {ns.prometheus} over the last --lookback",
                    "check the id (the run_id label) or widen --lookback",
                ) from None
            except MeasureError as exc:
                raise UserError(
                    "--run-id",
                    f"{run_id}: {exc}",
                    "check that the run reached past --warmup-steps and every rank was scraped",
                ) from None
    except PrometheusError as exc:
        raise UserError("--prometheus", str(exc), "check the URL and that Prometheus is up") from None
    finally:
        api.close()
    return build_report("cluster", sizes, warmup_steps)


def main(argv: list[str]) -> int:
    """Run ``fsdp-observe scaling``; 0 with a report, 1 when a run fails, 130 on Ctrl-C.

    Raises:
        UserError: a bad flag, runs that cannot be measured or compared, an unreachable Prometheus.
    """
    from observe.scaling.figures import MeasureError, ReportError
    from observe.scaling.local import RunFailed

    ns, plan = parse(argv)
    require("matplotlib", *(() if ns.prometheus else ("torch", "transformers")))  # report.png comes last
    _prepare_out(ns.out)
    try:
        report = _cluster(ns, plan.warmup_steps) if ns.prometheus else _local(ns, plan)
    except MeasureError as exc:
        raise UserError("--world-sizes", str(exc), f"read the runs' logs under {ns.out}/runs/") from None
    except ReportError as exc:
        raise UserError(
            "--run-id" if ns.prometheus else "--", str(exc), "compare runs of one model, strategy and settings"
        ) from None
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fsdp-observe scaling: interrupted", file=sys.stderr)
        return 130
    return _write(report, ns.out)


def _write(report: ScalingReport, out: Path) -> int:
    from observe.scaling.output import format_table, headline, write_json
    from observe.scaling.plot import render

    write_json(report, out / "report.json")
    render(report, out / "report.png")
    print(f"\nScaling report: {headline(report)}\n")
    print(format_table(report))
    print(f"\nwrote {out / 'report.json'} and {out / 'report.png'}")
    return 0
