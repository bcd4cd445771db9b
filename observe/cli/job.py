"""``fsdp-observe job``: render a PyTorchJob from settings; show, read and stop a running one.

    fsdp-observe job render --config job.env [--set NUM_NODES=4] | kubectl apply -f -
    fsdp-observe job access -n ml-jobs --user alice | kubectl apply -f -
    fsdp-observe job status NAME        leader (master_addr=) and every worker's state
    fsdp-observe job logs NAME [--all]  the leader's log, or every worker's
    fsdp-observe job stop NAME          delete the job; with etcd, restart the etcd pod

``render`` (the PyTorchJob and its NetworkPolicy) and ``access`` (a read-only Role for one
namespace, ``observe.k8s.access``) need no cluster. The others talk to the API server of the
current kubeconfig context (``--kubeconfig``, ``--context``, ``-n`` as with kubectl).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from observe.errors import UserError
from observe.flags import OneLineParser

_EXAMPLES = "examples:\n" + "\n".join(line for line in __doc__.splitlines() if line.startswith("    fsdp-observe"))
_RUN_ID = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def build_parser() -> argparse.ArgumentParser:
    """The ``fsdp-observe job`` command line."""
    ap = OneLineParser(
        prog="fsdp-observe job",
        description="Render a PyTorchJob from settings; show, read and stop a running one.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXAMPLES + "\nSettings keys and the manifests: docs/kubernetes.md",
    )
    sub = ap.add_subparsers(dest="action", required=True, metavar="ACTION")
    render = sub.add_parser("render", help="print a PyTorchJob for a settings file (.env or YAML)")
    render.add_argument("--config", required=True, metavar="FILE", help="settings, e.g. examples/llama2-7b.env")
    render.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable), e.g. --set NUM_NODES=4",
    )
    render.add_argument("--run-id", help="rendezvous id and run_id label (default: <JOB_NAME>-<random>)")
    render.add_argument("-o", "--output", metavar="FILE", help="write the manifest here instead of stdout")
    render.add_argument(
        "--network-policy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also render the job's NetworkPolicy: its ranks' metrics ports open to Prometheus and "
        "the viewer only (default: on)",
    )
    access = sub.add_parser(
        "access",
        help="print a read-only Role (pods, logs, PyTorchJobs) for one namespace, "
        "bound to the viewer service account and the people named",
    )
    access.add_argument("-n", "--namespace", required=True, help="the jobs' namespace")
    access.add_argument("--user", action="append", default=[], help="also bind this user (repeatable)")
    access.add_argument("--group", action="append", default=[], help="also bind this group (repeatable)")
    access.add_argument(
        "--etcd-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="also print the etcd rendezvous' NetworkPolicy admitting the ranks of exactly these namespaces "
        "(repeatable: name every namespace whose jobs use RDZV_BACKEND=etcd or etcd-v2)",
    )
    access.add_argument("-o", "--output", metavar="FILE", help="write the manifests here instead of stdout")
    for action, text in (
        ("status", "the job's state, its leader and every worker pod"),
        ("logs", "the leader's log (or every worker's with --all)"),
        ("stop", "delete the job; with an etcd rendezvous, restart the etcd pod"),
    ):
        p = sub.add_parser(action, help=text)
        p.add_argument("name", metavar="NAME", help="PyTorchJob name (JOB_NAME)")
        p.add_argument("-n", "--namespace", help="default: the kubeconfig context's, else default")
        p.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, else ~/.kube/config")
        p.add_argument("--context", help="kubeconfig context (default: the current one)")
        if action == "logs":
            p.add_argument("--all", action="store_true", help="every worker, each line prefixed [pod]")
            p.add_argument("-f", "--follow", action="store_true", help="keep streaming")
            p.add_argument("--tail", type=int, metavar="N", help="only the last N lines of each log")
    return ap


def main(argv: list[str]) -> int:
    """Run one ``job`` action; 0 on success, 130 on Ctrl-C.

    Raises:
        UserError: bad flags or settings, no cluster, an unknown job.
    """
    ns = build_parser().parse_args(argv)
    try:
        if ns.action == "render":
            return _render(ns)
        if ns.action == "access":
            from observe import yamlio
            from observe.k8s.access import etcd_network_policy, viewer_access

            objects = viewer_access(ns.namespace, ns.user, ns.group)
            if ns.etcd_namespace:
                objects.append(etcd_network_policy(ns.etcd_namespace))
            return _write(yamlio.dump_all(objects), ns.output)
        from observe.k8s import jobs
        from observe.k8s.client import connect

        kube = connect(ns.kubeconfig, ns.context, ns.namespace)
        if ns.action == "status":
            print(jobs.format_status(jobs.job_status(kube, ns.name)))
        elif ns.action == "logs":
            if ns.tail is not None and ns.tail < 0:
                raise UserError("--tail", f"must be 0 or more, got {ns.tail}", "pass e.g. --tail 100")
            jobs.write_logs(kube, ns.name, ns.all, ns.follow, ns.tail)
        else:
            jobs.stop_job(kube, ns.name)
        return 0
    except KeyboardInterrupt:
        return 130


def _render(ns: argparse.Namespace) -> int:
    from observe import yamlio
    from observe.k8s import storage
    from observe.k8s.access import trainer_network_policy
    from observe.k8s.job_settings import load_settings
    from observe.k8s.pytorchjob import render

    if ns.run_id is not None and not (_RUN_ID.fullmatch(ns.run_id) and len(ns.run_id) <= 63):
        raise UserError(
            "--run-id", f"{ns.run_id!r} is not a valid label value", "use up to 63 lower-case letters, digits and '-'"
        )
    settings = load_settings(ns.config, ns.set)
    job = render(settings, ns.run_id)
    for warning in storage.warnings(settings):
        print(f"fsdp-observe job render: warning: {warning}", file=sys.stderr, flush=True)
    documents = [*storage.claims(settings), job]
    if ns.network_policy:
        documents.append(trainer_network_policy(settings))
    return _write(yamlio.dump_all(documents) if len(documents) > 1 else yamlio.dump(job), ns.output)


def _write(text: str, output: str | None) -> int:
    """``text`` to ``output`` (or stdout); 0.

    Raises:
        UserError: the file cannot be written.
    """
    if output:
        try:
            Path(output).write_text(text)
        except OSError as exc:
            raise UserError("--output", f"cannot write {output} ({exc.strerror})", "pass a writable path") from None
    else:
        sys.stdout.write(text)
    return 0
