"""``fsdp-observe diagnose``: one verdict on a training run: which rank is stuck or slow, where, and why.

The same sources as ``top``: ``--trainer URL ...`` (the ranks' own ``/debug/state`` pages, each asked
once, in parallel), ``--kube`` (the trainer pods found through the Kubernetes API, then asked the same
way) or ``--prometheus URL`` (the forensics series; no stacks). Prints one line per run (and a few
detail lines), or with ``--json`` one JSON object per run (a list when there are several).

Exit status: 0 healthy, 1 a problem was found (hang, mismatch, stopped, straggler), 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from observe.errors import UserError
from observe.flags import OneLineParser

DESCRIPTION = (
    "One verdict on a training run: healthy, or which rank is stuck (hang, mismatch, stopped) or slow "
    "(straggler), with its pod, node, GPU, collective and stack. Give exactly one kind of source."
)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``fsdp-observe diagnose``."""
    ap = OneLineParser(prog="fsdp-observe diagnose", description=DESCRIPTION)
    ap.add_argument(
        "--trainer",
        action="extend",
        nargs="+",
        default=[],
        metavar="URL",
        help="a trainer rank's base or /metrics URL (host:port works); give every rank's",
    )
    ap.add_argument("--kube", action="store_true", help="find the trainer pods through the Kubernetes API")
    ap.add_argument("--namespace", "-n", metavar="NS", help="namespace of the training job's pods (with --kube)")
    ap.add_argument("--selector", "-l", metavar="SELECTOR", help="label selector of the trainer pods (with --kube)")
    ap.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to use (with --kube)")
    ap.add_argument("--context", metavar="NAME", help="kubeconfig context (with --kube)")
    ap.add_argument("--prometheus", metavar="URL", help="read the ranks' forensics series from this Prometheus")
    ap.add_argument("--run-id", metavar="ID", help="only this run (default: every run found)")
    ap.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="per-rank timeout (default 5)")
    ap.add_argument("--json", action="store_true", help="print JSON: verdict, culprit_ranks, culprits, summary ...")
    return ap


def _sources(ns: argparse.Namespace) -> str:
    from observe.cli.sources import one_source

    kind = one_source(
        (("--trainer", ns.trainer), ("--kube", ns.kube), ("--prometheus", ns.prometheus)),
        "pass --trainer URL ..., --kube or --prometheus URL",
        ns.kube,
        (
            ("--namespace", ns.namespace),
            ("--selector", ns.selector),
            ("--kubeconfig", ns.kubeconfig),
            ("--context", ns.context),
        ),
    )
    if not 0.1 <= ns.timeout <= 600:
        raise UserError("--timeout", f"{ns.timeout:g} is out of range", "give a value from 0.1 to 600")
    return kind


def gather(ns: argparse.Namespace, kind: str) -> tuple[list, list]:
    """The ranks' evidence from the chosen source: ``(answered, unreached)``.

    Raises:
        UserError: an address that is not one, or a source that cannot be read.
    """
    from observe.sources.forensics import gather_direct, gather_prometheus

    if kind == "--prometheus":
        from observe.promapi import PrometheusAPI, PrometheusError
        from observe.sources.direct import check_url

        check_url(ns.prometheus, "--prometheus")

        api = PrometheusAPI(ns.prometheus, timeout=max(ns.timeout, 5.0))
        try:
            return gather_prometheus(api, ns.run_id)
        except PrometheusError as exc:
            raise UserError("--prometheus", str(exc), "check the URL and that Prometheus runs") from None
        finally:
            api.close()
    if kind == "--kube":
        from observe.sources.kube import KubeSource

        source = KubeSource(
            namespace=ns.namespace,
            selector=ns.selector,
            kubeconfig=ns.kubeconfig,
            context=ns.context,
            timeout=ns.timeout,
        )
        try:
            _, trainers, errors = source.discover()
        finally:
            source.close()
        if not trainers:
            raise UserError(
                "--kube", "; ".join(errors) or "no running trainer pods found", "check --namespace and --selector"
            )
        urls = [t.url for t in trainers]
    else:
        from observe.sources.direct import check_url

        for url in ns.trainer:
            check_url(url, "--trainer")
        urls = list(ns.trainer)
    return asyncio.run(gather_direct(urls, ns.timeout))


def main(argv: list[str]) -> int:
    """Run ``fsdp-observe diagnose``; 0 healthy, 1 a problem found."""
    ns = build_parser().parse_args(argv)
    kind = _sources(ns)
    from observe.diagnosis import judge
    from observe.sources.forensics import by_run

    ranks, unreached = gather(ns, kind)
    runs = by_run(ranks)
    if ns.run_id:
        runs = {k: v for k, v in runs.items() if k == ns.run_id}
    if not runs:
        runs = {"": []}
    verdicts = [judge(rs, unreached) for rs in runs.values()]
    if ns.json:
        out = [v.to_json() for v in verdicts]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
    else:
        for v in verdicts:
            prefix = f"run {v.run_id}: " if len(verdicts) > 1 and v.run_id else ""
            print(prefix + v.summary)
            for c in v.culprits[:8]:
                if c.stack:
                    print(f"  rank {c.rank} stack (innermost last):")
                    for line in c.stack[-12:]:
                        print(f"    {line}")
            for line in v.details:
                print(f"  {line}")
    sys.stdout.flush()
    return 0 if all(v.verdict == "healthy" for v in verdicts) else 1
