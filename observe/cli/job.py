"""``fsdp-observe job``: render a TrainJob or PyTorchJob from settings; show, read and stop a running one.

    fsdp-observe job render --config job.env [--set NUM_NODES=4] | kubectl apply -f -
    fsdp-observe job access -n ml-jobs --user alice | kubectl apply -f -
    fsdp-observe job status NAME        state, progress, leader (master_addr=) and every pod's state
    fsdp-observe job logs NAME [--all]  the leader's log, or every pod's
    fsdp-observe job stop NAME          delete the job (--suspend: keep it); with etcd, restart the etcd pod

``render`` (the job of the kind ``JOB_KIND`` names, and its NetworkPolicy) and ``access`` (Roles
for one namespace, ``observe.k8s.access``) need no cluster. The others talk to the API server of
the current kubeconfig context (``--kubeconfig``, ``--context``, ``-n`` as with kubectl) and find
the job's kind by its name (``--kind`` to say it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from observe.errors import UserError
from observe.flags import OneLineParser
from observe.k8s.names import DNS1123_LABEL

_EXAMPLES = "examples:\n" + "\n".join(line for line in __doc__.splitlines() if line.startswith("    fsdp-observe"))


def build_parser() -> argparse.ArgumentParser:
    """The ``fsdp-observe job`` command line."""
    ap = OneLineParser(
        prog="fsdp-observe job",
        description="Render a TrainJob or PyTorchJob from settings; show, read and stop a running one.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_EXAMPLES + "\nSettings keys and the manifests: docs/kubernetes.md",
    )
    sub = ap.add_subparsers(dest="action", required=True, metavar="ACTION")
    render = sub.add_parser("render", help="print the job (JOB_KIND: PyTorchJob, TrainJob) for a settings file")
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
        help="print a read-only Role (pods, logs, PyTorchJobs, TrainJobs) for one namespace, "
        "bound to the viewer service account and the people named",
    )
    access.add_argument("-n", "--namespace", required=True, help="the jobs' namespace")
    access.add_argument("--user", action="append", default=[], help="also bind this user (repeatable)")
    access.add_argument("--group", action="append", default=[], help="also bind this group (repeatable)")
    access.add_argument(
        "--operator",
        action="store_true",
        help="also an operator Role for the users and groups named (not the viewer): job stop may "
        "delete or suspend the jobs (and, in fsdp-observe, restart the etcd pod)",
    )
    access.add_argument("-o", "--output", metavar="FILE", help="write the manifests here instead of stdout")
    for action, text in (
        ("status", "the job's state, its progress, its leader and every pod"),
        ("logs", "the leader's log (or every pod's with --all)"),
        ("stop", "delete the job (or suspend it); with an etcd rendezvous, restart the etcd pod"),
    ):
        p = sub.add_parser(action, help=text)
        p.add_argument("name", metavar="NAME", help="the job's name (JOB_NAME)")
        p.add_argument("-n", "--namespace", help="default: the kubeconfig context's, else default")
        p.add_argument("--kubeconfig", metavar="FILE", help="default: $KUBECONFIG, else ~/.kube/config")
        p.add_argument("--context", help="kubeconfig context (default: the current one)")
        p.add_argument(
            "--kind", metavar="KIND", help="PyTorchJob or TrainJob (default: the kind that has a job of this name)"
        )
        if action == "stop":
            p.add_argument(
                "--suspend",
                action="store_true",
                help="suspend instead of delete: the pods go, the job and its status stay "
                "(resume: kubectl patch with suspend false; docs/kubernetes.md)",
            )
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
            from observe.k8s.access import viewer_access

            roles = viewer_access(ns.namespace, ns.user, ns.group, operator=ns.operator)
            return _write(yamlio.dump_all(roles), ns.output)
        from observe.k8s import jobs
        from observe.k8s.client import connect
        from observe.k8s.kinds import KINDS, kind_named

        kinds = KINDS if ns.kind is None else (kind_named(ns.kind, "--kind"),)
        if ns.action == "logs" and ns.tail is not None and ns.tail < 0:
            raise UserError("--tail", f"must be 0 or more, got {ns.tail}", "pass e.g. --tail 100")
        kube = connect(ns.kubeconfig, ns.context, ns.namespace)
        if ns.action == "status":
            print(jobs.format_status(jobs.job_status(kube, ns.name, kinds)))
        elif ns.action == "logs":
            jobs.write_logs(kube, ns.name, ns.all, ns.follow, ns.tail, kinds=kinds)
        else:
            jobs.stop_job(kube, ns.name, kinds=kinds, suspend=ns.suspend)
        return 0
    except KeyboardInterrupt:
        return 130


def _render(ns: argparse.Namespace) -> int:
    from observe import yamlio
    from observe.k8s import storage
    from observe.k8s.access import trainer_network_policy
    from observe.k8s.job_settings import load_settings
    from observe.k8s.kinds import kind_of
    from observe.k8s.pod import new_run_id

    if ns.run_id is not None and not (DNS1123_LABEL.fullmatch(ns.run_id) and len(ns.run_id) <= 63):
        raise UserError(
            "--run-id", f"{ns.run_id!r} is not a valid label value", "use up to 63 lower-case letters, digits and '-'"
        )
    settings = load_settings(ns.config, ns.set)
    kind = kind_of(settings)
    objects = kind.render(settings, ns.run_id or new_run_id(settings.job_name))  # checks what the kind cannot do
    for warning in [*kind.warnings(settings), *storage.warnings(settings)]:
        print(f"fsdp-observe job render: warning: {warning}", file=sys.stderr, flush=True)
    documents = [*storage.claims(settings), *objects]
    if ns.network_policy:
        documents.append(trainer_network_policy(settings))
    return _write(yamlio.dump_all(documents) if len(documents) > 1 else yamlio.dump(documents[0]), ns.output)


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
