"""``fsdp-observe demo``: a bounded two-rank CPU fine-tune on this machine, watched end to end.

Starts a local node agent and ``torchrun`` with the ``tiny`` preset on the default corpus (the
Python standard library's sources), prints the agent's and each rank's metrics URL, scrapes the
ranks over HTTP while the run goes, and ends with a summary table that includes what the agent
saw (CPU, memory, GPUs or "no GPUs", XID errors). On a terminal it opens ``fsdp-observe top``
over the agent and the ranks while the run goes (quitting it stops the run); with no terminal
attached (or ``--no-tui``) it runs headless to the end. With ``--prometheus`` (and a
``prometheus`` binary on PATH) it also starts a local Prometheus with the generated rules
scraping the agent and the ranks, and prints its URL. The pieces live in ``observe.demo``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from observe import prometheus_local, stopping
from observe.catalog import AGENT_PORT
from observe.cli import require
from observe.errors import UserError, writable_dir
from observe.flags import OneLineParser
from observe.ports import free_port_block
from trainer.runspec.config import MetricsConfig, ModelConfig, TrainConfig
from trainer.runspec.launch import LaunchConfig

#: ``--help``'s description: plain text (the module docstring is reStructuredText for developers).
DESCRIPTION = (
    "A bounded CPU fine-tune on this machine (two ranks, the tiny preset, the Python standard library's "
    "sources as text), watched end to end: a local node agent, the ranks' metrics, the terminal UI when "
    "run on a terminal (q quits and stops the run), and a summary at the end."
)


def build_parser() -> argparse.ArgumentParser:
    """The demo's command line."""
    ap = OneLineParser(prog="fsdp-observe demo", description=DESCRIPTION)
    ap.add_argument("--steps", type=int, default=200, help="training steps (default %(default)s, about a minute)")
    ap.add_argument(
        "--nproc-per-node", type=int, default=LaunchConfig.nproc_per_node, help="CPU ranks (default %(default)s)"
    )
    ap.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="base port of the ranks' /metrics: rank r serves on PORT + r (default: a free block)",
    )
    ap.add_argument(
        "--log-every",
        type=int,
        default=20,
        metavar="N",
        help="steps per log window: loss, tokens/s and step time are logged and served per window "
        "(default %(default)s)",
    )
    ap.add_argument(
        "--metrics-linger",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after the last step, keep serving /metrics this long (default: until its scraper has "
        "scraped the end once more, at most 20 s; 0 skips this), as fsdp-observe train takes it",
    )
    ap.add_argument(
        "--agent-port",
        type=int,
        default=None,
        help=f"port of the local node agent (default {AGENT_PORT}, or a free one when that is taken; "
        "0 picks a free one)",
    )
    ap.add_argument("--out", metavar="DIR", help="keep the run's JSON log here (default: a temporary folder)")
    ap.add_argument(
        "--no-tui",
        action="store_true",
        help="never open the terminal UI (it opens only when stdin and stdout are a terminal)",
    )
    ap.add_argument(
        "--prometheus",
        action="store_true",
        help="also start Prometheus (binary on PATH) with the generated rules, scraping the agent and the ranks",
    )
    ap.add_argument(
        "--prometheus-port",
        type=int,
        default=None,
        help=f"its port (default {prometheus_local.DEFAULT_PORT}, or a free one when that is taken)",
    )
    return ap


def wants_tui(ns: argparse.Namespace) -> bool:
    """Open the TUI: stdin and stdout are a terminal and ``--no-tui`` was not given."""
    return not ns.no_tui and sys.stdin.isatty() and sys.stdout.isatty()


#: Seconds a rank may outlive torchrun before the demo SIGKILLs it.
ORPHAN_GRACE_SECONDS = 5.0


def main(argv: list[str]) -> int:
    """Run the demo; return the run's exit status, the one its summary and JSON ``end`` record show:
    0 finished, 130 stopped by SIGINT (Ctrl-C, or the terminal UI closed with q), 143 stopped by
    SIGTERM, anything else failed.

    Raises:
        UserError: a bad flag, a taken ``--agent-port``, no ``prometheus`` binary for ``--prometheus``.
    """
    stop = stopping.install()  # first: SIGTERM/SIGINT are passed on to the run (observe.supervise), never lost
    from observe import demo
    from observe.supervise import Supervised
    from trainer.runspec.launch import oversubscription, prepare, torchrun_command, torchrun_env

    ns = build_parser().parse_args(argv)
    require("torch", "transformers", "pynvml", *(("yaml",) if ns.prometheus else ()))
    out = _out_dir(ns.out)
    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    log_json = out / f"{run_id}.jsonl"
    LaunchConfig(nproc_per_node=ns.nproc_per_node).validate()
    port_base = ns.metrics_port if ns.metrics_port is not None else free_port_block(ns.nproc_per_node)
    cfg = prepare(
        TrainConfig(
            model=ModelConfig(preset="tiny"),
            steps=ns.steps,
            metrics=MetricsConfig(
                port_base=port_base,
                address="127.0.0.1",
                log_every=ns.log_every,
                log_json=str(log_json),
                run_id=run_id,
                linger_seconds=ns.metrics_linger,
            ),
        ),
        ns.nproc_per_node,
    )
    if (warning := oversubscription(ns.nproc_per_node)) is not None:
        print(f"fsdp-observe demo: {warning}", file=sys.stderr, flush=True)
    if ns.prometheus and prometheus_local.binary() is None:
        raise UserError(
            "--prometheus",
            "no prometheus binary on PATH",
            "install it (apt-get install prometheus) or leave out --prometheus",
        )
    if ns.prometheus_port is not None and not ns.prometheus:
        raise UserError("--prometheus-port", "only applies with --prometheus", "add --prometheus")

    try:
        agent, agent_url = demo.start_local_agent(ns.agent_port, out / "agent.log")
    except RuntimeError as exc:
        raise UserError(
            "--agent-port",
            f"the node agent did not start: {exc}",
            f"read {out / 'agent.log'}, or pass another --agent-port",
        ) from None
    urls = [f"http://127.0.0.1:{port_base + r}/metrics" for r in range(ns.nproc_per_node)]
    prometheus = None
    if ns.prometheus:
        try:
            prometheus = demo.start_prometheus(out, ns.prometheus_port, agent_url, urls)
        except RuntimeError as exc:
            agent.terminate()
            agent.wait()
            raise UserError("--prometheus", str(exc), f"read {out / 'prometheus'}, or pass --prometheus-port") from None
    print(f"fsdp-observe demo: run {run_id}, {ns.nproc_per_node} CPU ranks, {ns.steps} steps")
    print(f"  node agent: {agent_url}/metrics  {agent_url}/snapshot  (log: {out / 'agent.log'})")
    for rank, url in enumerate(urls):
        print(f"  rank {rank} metrics: {url}")
    if prometheus is not None:
        print(
            f"  prometheus: {prometheus.url}  (alerts: {prometheus.url}/alerts; config, rules and data: "
            f"{prometheus.folder}; stops with the demo)",
            flush=True,
        )
    scraper = demo.Scraper(urls, run_id=run_id)
    tui = wants_tui(ns)
    train_log_path = out / "train.log" if tui else None
    train_log = open(train_log_path, "wb") if train_log_path is not None else None  # the TUI owns the terminal
    if train_log is not None:
        print(f"  training output: {train_log_path}; opening fsdp-observe top (q quits and stops the run)")
    run = Supervised(stop, orphan_grace=ORPHAN_GRACE_SECONDS)
    scraper.start()
    closed_ui = False
    try:
        if stop.signum is None:
            run.start(
                torchrun_command(cfg, ns.nproc_per_node, quiet=True),
                env=torchrun_env(ns.nproc_per_node),
                stdout=train_log,
                stderr=subprocess.STDOUT if train_log else None,
            )
            if tui:
                assert train_log_path is not None  # made with the TUI
                closed_ui = demo.watch(agent_url, urls, run, run_id, train_log_path)
            status = run.wait()
        else:  # stopped before training started
            status = stopping.exit_status(stop.signum)
    finally:
        if stop.signum is not None:
            stop.ignore_further()  # a late signal must not kill the demo before its summary
        if train_log is not None:
            train_log.close()
        scraper.stop()
        snapshot = demo.agent_snapshot(agent_url)
        agent.terminate()
        agent.wait()
        if prometheus is not None:
            prometheus.stop()
    windows, end = demo.read_log(log_json)
    rows = demo.summary_rows(windows, end, scraper.records, status)
    demo.print_table(
        f"fsdp-observe demo: run {run_id} {demo.outcome(status, closed_ui)}",
        rows[:-1]
        + demo.agent_rows(snapshot, agent_url)
        + rows[-1:]
        + demo.outputs_rows(log_json, train_log_path, status),
    )
    return status


def _out_dir(given: str | None) -> Path:
    """``--out`` (created), or a new temporary folder.

    Raises:
        UserError: ``--out`` cannot be created or written.
    """
    if given is None:
        return Path(tempfile.mkdtemp(prefix="fsdp-observe-demo-"))
    return writable_dir(Path(given), "--out", "pass a directory you can write, or leave --out out for a temporary one")
