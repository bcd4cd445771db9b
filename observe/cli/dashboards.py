"""``fsdp-observe dashboards``: write (or check) the generated dashboards, rules and their Kubernetes objects.

Writes ``dashboards/*.json`` (Grafana), ``dashboards/fsdp-observe.rules.yaml`` (Prometheus) and
``dashboards/alertmanager.yml`` (Alertmanager), then, under ``daemonsets/generated/``, a
``PrometheusRule``, an ``AlertmanagerConfig`` and one dashboard ConfigMap each, all from one
``observe.monitoring.settings.Settings`` (``observe.monitoring.generate``). Output is
deterministic, so ``--check`` (CI) regenerates in memory and fails on any difference::

    fsdp-observe dashboards                      # from the repository root
    fsdp-observe dashboards --check              # exit 1 naming the files that differ
    fsdp-observe dashboards --settings my.yaml --out /tmp/dash --no-k8s
    fsdp-observe dashboards --settings my.yaml --receivers my-receivers.yaml --out /etc/fsdp-observe --no-k8s

A settings file is YAML (or JSON) with fields of ``Settings``, e.g. ``dcgm_selector: 'job="dcgm-exporter"'``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from observe.errors import UserError
from observe.flags import OneLineParser


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    ap = OneLineParser(
        prog="fsdp-observe dashboards",
        description="Write (or check) the generated Grafana dashboards and Prometheus rules (docs/dashboards.md).",
    )
    ap.add_argument(
        "--out",
        default="dashboards",
        type=Path,
        metavar="DIR",
        help="where the dashboards and the rule file go (default dashboards)",
    )
    ap.add_argument(
        "--k8s-out",
        default="daemonsets/generated",
        type=Path,
        metavar="DIR",
        help="where the PrometheusRule and dashboard ConfigMaps go (default daemonsets/generated)",
    )
    ap.add_argument("--no-k8s", action="store_true", help="write no Kubernetes objects")
    ap.add_argument(
        "--settings",
        type=Path,
        metavar="FILE",
        help="YAML/JSON file overriding fields of observe.monitoring.settings.Settings (docs/dashboards.md)",
    )
    ap.add_argument(
        "--receivers",
        type=Path,
        metavar="FILE",
        help="YAML list of Alertmanager receivers (Slack, PagerDuty, webhook; secrets in *_file fields) "
        "merged by name into alertmanager.yml (docs/alerting.md)",
    )
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the files that differ")
    return ap


def main(argv: list[str]) -> int:
    """Write or check; 0 when done or up to date, 1 when ``--check`` finds differences.

    Raises:
        UserError: bad flags or settings, or an output folder that cannot be written.
    """
    from observe.monitoring import generate

    ns = build_parser().parse_args(argv)
    for flag, folder in (("--out", ns.out), ("--k8s-out", ns.k8s_out)):
        if folder.exists() and not folder.is_dir():
            raise UserError(flag, f"{folder} is a file", "pass a directory (it is created)")
    settings = generate.load_settings(ns.settings)
    receivers = generate.load_receivers(ns.receivers)
    outputs = [("--out", ns.out, generate.render_dashboards(settings, receivers), generate.OWNED["dashboards"])]
    if not ns.no_k8s:
        outputs.append(("--k8s-out", ns.k8s_out, generate.render_k8s(settings), generate.OWNED["k8s"]))
    if ns.check:
        stale = [
            f"{folder}/{name}"
            for _, folder, files, owned in outputs
            for name in generate.differences(files, folder, owned)
        ]
        if stale:
            print(f"error: out of date: {', '.join(stale)}; run fsdp-observe dashboards", file=sys.stderr)
            return 1
        return 0
    counts = []
    for flag, folder, files, owned in outputs:
        try:
            counts.append(f"{len(generate.write(files, folder, owned))} files to {folder}/")
        except OSError as exc:
            fix = "pass a directory you can write" + (", or --no-k8s" if flag == "--k8s-out" else "")
            raise UserError(flag, f"cannot write {folder} ({exc.strerror})", fix) from None
    print("wrote " + " and ".join(counts))
    return 0
