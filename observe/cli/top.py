"""``fsdp-observe top``: the terminal UI over agents and trainers, Kubernetes, or Prometheus.

Exactly one kind of source: ``--agent``/``--agents-file``/``--trainer`` (pulled directly), or
``--kube`` (agent and trainer pods found through the Kubernetes API, then pulled directly), or
``--prometheus URL``. A mistake is one line naming the flag and the fix, exit status 2; so is
starting it without a terminal (it would write escape codes into a file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from observe import stopping
from observe.catalog import AGENT_PORT
from observe.errors import UserError
from observe.flags import OneLineParser

if TYPE_CHECKING:
    from observe.tui.poller import Source

#: ``--help``'s description: plain text (the module docstring is reStructuredText for developers).
DESCRIPTION = (
    "The terminal UI over node agents and trainer ranks (pulled directly), over pods found "
    "through the Kubernetes API, or over Prometheus. Give exactly one kind of source."
)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``fsdp-observe top``."""
    ap = OneLineParser(prog="fsdp-observe top", description=DESCRIPTION)
    direct = ap.add_argument_group("direct (local runs, small clusters)")
    direct.add_argument(
        "--agent",
        action="extend",
        nargs="+",
        default=[],
        metavar="URL",
        help=f"a node agent's base URL (host:port or http://host:{AGENT_PORT}); repeatable",
    )
    direct.add_argument(
        "--agents-file", metavar="FILE", help="a file with one agent URL per line ('#' starts a comment)"
    )
    direct.add_argument(
        "--trainer",
        action="extend",
        nargs="+",
        default=[],
        metavar="URL",
        help="a trainer rank's /metrics URL (host:port works); repeatable",
    )
    kube = ap.add_argument_group("Kubernetes discovery")
    kube.add_argument(
        "--kube",
        action="store_true",
        help="find the agent DaemonSet's pods and the trainer pods through the Kubernetes API",
    )
    kube.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        help="namespace of the training job's pods (default: the kubeconfig context's)",
    )
    kube.add_argument("--agent-namespace", metavar="NS", help="namespace of the agent DaemonSet (default fsdp-observe)")
    kube.add_argument(
        "--selector",
        "-l",
        metavar="SELECTOR",
        help="label selector of the trainer pods (default: the trainer labels fsdp-observe job sets)",
    )
    kube.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig to use (default $KUBECONFIG or ~/.kube/config)")
    kube.add_argument("--context", metavar="NAME", help="kubeconfig context")
    prom = ap.add_argument_group("Prometheus (large clusters)")
    prom.add_argument("--prometheus", metavar="URL", help="read everything from this Prometheus server's HTTP API")
    tune = ap.add_argument_group("refresh")
    tune.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="seconds between refreshes (default: 1 s up to 64 nodes, 2 s up to 4,096, then more)",
    )
    tune.add_argument("--timeout", type=float, default=1.5, metavar="SECONDS", help="per-request timeout (default 1.5)")
    tune.add_argument(
        "--concurrency", type=int, default=64, metavar="N", help="requests in flight at most (default 64)"
    )
    return ap


def read_agents_file(path: str) -> list[str]:
    """Agent URLs from ``path``: one per line, blank lines and ``#`` comments skipped.

    Raises:
        UserError: the file cannot be read, lists no URL, or has a line that is not an address
            (the error names the line).
    """
    from observe.sources.direct import check_url

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UserError("--agents-file", f"cannot read {path} ({reason})", "give a readable text file") from None
    urls = []
    for number, line in enumerate(text.splitlines(), start=1):
        url = line.split("#", 1)[0].strip()
        if url:
            check_url(url, "--agents-file", where=f"{path} line {number}: ")
            urls.append(url)
    if not urls:
        raise UserError("--agents-file", f"{path} lists no agent URL", "write one URL (host:port) per line")
    return urls


def _check_positive(value: float | None, flag: str, low: float, high: float) -> None:
    if value is not None and not low <= value <= high:
        raise UserError(flag, f"{value:g} is out of range", f"give a value from {low:g} to {high:g}")


def make_source(ns: argparse.Namespace) -> Source:
    """The source the flags describe.

    Raises:
        UserError: no source, several kinds at once, or a bad value.
    """
    _check_positive(ns.interval, "--interval", 0.2, 3600)
    _check_positive(ns.timeout, "--timeout", 0.05, 600)
    _check_positive(ns.concurrency, "--concurrency", 1, 10000)
    agents = list(ns.agent) + (read_agents_file(ns.agents_file) if ns.agents_file else [])
    direct = bool(agents or ns.trainer)
    from observe.cli.sources import one_source

    one_source(
        (("--agent/--agents-file/--trainer", direct), ("--kube", ns.kube), ("--prometheus", ns.prometheus)),
        "pass --agent URL, --agents-file FILE, --trainer URL, --kube or --prometheus URL (see fsdp-observe top --help)",
        ns.kube,
        (
            ("--namespace", ns.namespace),
            ("--agent-namespace", ns.agent_namespace),
            ("--selector", ns.selector),
            ("--kubeconfig", ns.kubeconfig),
            ("--context", ns.context),
        ),
    )
    if ns.prometheus:
        from observe.sources.direct import check_url
        from observe.sources.prometheus import PrometheusSource

        check_url(ns.prometheus, "--prometheus")

        return PrometheusSource(ns.prometheus, timeout=max(ns.timeout, 5.0))
    if ns.kube:
        from observe.sources.kube import KubeSource

        return KubeSource(
            namespace=ns.namespace,
            agent_namespace=ns.agent_namespace,
            selector=ns.selector,
            kubeconfig=ns.kubeconfig,
            context=ns.context,
            concurrency=ns.concurrency,
            timeout=ns.timeout,
        )
    from observe.sources.direct import DirectSource, Endpoint, check_url

    for flag, urls in (("--agent", ns.agent), ("--trainer", ns.trainer)):
        for url in urls:
            check_url(url, flag)
    return DirectSource(
        [Endpoint(u) for u in agents], [Endpoint(u) for u in ns.trainer], concurrency=ns.concurrency, timeout=ns.timeout
    )


def check_terminal() -> None:
    """Refuse to start without a terminal on stdin and stdout.

    Raises:
        UserError: either is not a terminal (a file, a pipe, ``/dev/null``, a CI job).
    """
    for name, stream in (("stdout", sys.stdout), ("stdin", sys.stdin)):
        if stream is None or not stream.isatty():
            raise UserError(
                "terminal",
                f"{name} is not a terminal",
                "run fsdp-observe top in a terminal (for scripts, read the agents' /snapshot or Prometheus instead)",
            )


def main(argv: list[str]) -> int:
    """Run the TUI until ``q``, Ctrl-C, SIGTERM or SIGINT (the terminal is restored either way); return 0.

    Raises:
        UserError: a bad flag, no usable source, or no terminal.
    """
    stop = stopping.install()  # recorded only; the app polls it (observe.tui.app.TopApp.should_stop)
    ns = build_parser().parse_args(argv)
    source = make_source(ns)
    try:
        check_terminal()
    except UserError:
        source.close()
        raise
    from observe.tui.app import make_app

    if stop.signum is None:
        make_app(source, interval=ns.interval, should_stop=stop.requested.is_set).run()
    if stop.signum is not None:
        stop.ignore_further()
    return 0
