"""``fsdp-observe agent`` (also ``python -m observe.cli agent``): the node agent's command line.

A mistake in the flags (a taken port, an unreadable ``--kernel-log``, a bad interval) is one
line on stderr, ``error: FLAG: PROBLEM; FIX``, with exit status 2 and no traceback.

SIGTERM and SIGINT stop the agent with exit status 0 within ``STOP_GRACE_SECONDS`` of the first
one, whatever it is doing (starting, collecting, blocked in a slow NVML call, following the
kernel log, serving). The handlers are in place before anything slow: this module imports only
the standard library and leaves at its top (the HTTP client, NVML and the collectors are imported
after ``stopping.install``), so only the interpreter's own start-up, tens of milliseconds, comes
before them. The handlers only record the signal (``observe.stopping``), the main
thread waits for it and stops the threads with bounded waits, and past
``FORCED_EXIT_SECONDS`` the process exits regardless. The DaemonSet's
``terminationGracePeriodSeconds`` is ``STOP_GRACE_SECONDS``.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from importlib import metadata

from observe import stopping
from observe.catalog import AGENT_PORT
from observe.errors import UserError, bind_error
from observe.flags import OneLineParser

MIN_INTERVAL, MAX_INTERVAL = 0.1, 3600.0
#: The agent exits within this many seconds of the first SIGTERM/SIGINT (daemonsets/agent-daemonset.yaml's
#: terminationGracePeriodSeconds). A normal stop takes well under 2 s (``observe.agent.run.Agent.stop``).
STOP_GRACE_SECONDS = 5.0
#: Past this many seconds after the first stop signal the process ends with ``os._exit(0)`` whatever
#: its threads are doing (one second before the grace period, so the kubelet never needs SIGKILL).
FORCED_EXIT_SECONDS = STOP_GRACE_SECONDS - 1.0
#: How often start-up looks for a stop signal while it waits for the first snapshot (seconds).
STARTUP_POLL_SECONDS = 0.05


def build_parser() -> argparse.ArgumentParser:
    """The agent's flags."""
    from observe.agent.node_health import CONDITION_TYPE, TAINT_KEY  # here: its HTTP client is slow to import

    ap = OneLineParser(
        prog="fsdp-observe agent",
        description="Node agent: host, process, GPU (NVML) and XID data as /metrics and /snapshot.",
    )
    ap.add_argument(
        "--address",
        default="127.0.0.1",
        help="address to serve on (default 127.0.0.1: this host only; 0.0.0.0 or '::' for every "
        "interface, as the DaemonSet does behind its NetworkPolicy)",
    )
    ap.add_argument(
        "--port", type=int, default=AGENT_PORT, help=f"port to serve on (default {AGENT_PORT}; 0 picks a free one)"
    )
    ap.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help=f"collection period (default 1; {MIN_INTERVAL:g}..{MAX_INTERVAL:g})",
    )
    ap.add_argument(
        "--nvml-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a collection waits for each GPU's NVML reading before it shows the GPU "
        "stale (default 0.5, or half of --interval when that is shorter; less than --interval)",
    )
    ap.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="node name on every series (default $NODE_NAME, else the host name)",
    )
    ap.add_argument(
        "--proc-root",
        default="/proc",
        metavar="DIR",
        help="procfs to read (default /proc; the host's when mounted elsewhere, e.g. /host/proc)",
    )
    ap.add_argument(
        "--kernel-log",
        metavar="FILE",
        help="follow this file for XID errors instead of the kernel ring buffer (e.g. /var/log/kern.log)",
    )
    ap.add_argument(
        "--kernel-log-source",
        choices=("kmsg", "syslog"),
        default="kmsg",
        help="how to read the kernel ring buffer: kmsg (/dev/kmsg, the default) or syslog (the "
        "syslog(2) call: needs only CAP_SYSLOG, no device; the unprivileged DaemonSet's way)",
    )
    ap.add_argument(
        "--state-dir",
        metavar="DIR",
        default=os.environ.get("FSDP_OBSERVE_STATE_DIR") or None,
        help="keep the kernel-log position and XID counts here, so a restart counts no XID twice "
        "(default $FSDP_OBSERVE_STATE_DIR, else nothing is kept; the DaemonSet uses "
        "/var/lib/fsdp-observe)",
    )
    ap.add_argument(
        "--node-condition",
        action="store_true",
        default=_env_flag("FSDP_OBSERVE_NODE_CONDITION"),
        help=f"set the node condition {CONDITION_TYPE}=True on a critical XID (needs --state-dir and "
        "get/patch on nodes/status; default $FSDP_OBSERVE_NODE_CONDITION, else off)",
    )
    ap.add_argument(
        "--node-taint",
        action="store_true",
        default=_env_flag("FSDP_OBSERVE_NODE_TAINT"),
        help=f"taint the node {TAINT_KEY}=NodeReboot:NoSchedule on a reboot-class XID (needs --state-dir "
        "and get/patch on nodes; default $FSDP_OBSERVE_NODE_TAINT, else off)",
    )
    ap.add_argument(
        "--kube-api",
        metavar="URL",
        help="the Kubernetes API server for --node-condition/--node-taint (default: the pod's, "
        "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)",
    )
    ap.add_argument(
        "--kube-token-file",
        metavar="FILE",
        help="bearer token for it, read at every call (default: the pod's service-account token)",
    )
    ap.add_argument(
        "--kube-ca-file",
        metavar="FILE",
        help="CA bundle of its certificate (default: the pod's service-account ca.crt)",
    )
    ap.add_argument(
        "--max-processes",
        type=int,
        default=100,
        metavar="N",
        help="processes kept in /snapshot, busiest first (default 100; the full count is always reported)",
    )
    ap.add_argument(
        "--process-series",
        type=int,
        default=20,
        metavar="N",
        help="processes with per-process series in /metrics (default 20; GPU processes always)",
    )
    ap.add_argument(
        "--command-label",
        action="store_true",
        help="also put each process's redacted command line in the command label of "
        "fsdp_node_process_info in /metrics (default: off; /snapshot always has it)",
    )
    ap.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return ap


def _env_flag(name: str) -> bool:
    """An on/off switch from the environment (``1``, ``true``, ``yes``, ``on``), so kustomize
    components can switch flags on by merging ``env`` entries."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _check_kube_credentials(ns: argparse.Namespace) -> None:
    """Fail at start-up, not on the first XID, when the API server or its token cannot be found.

    Raises:
        UserError: outside a pod without ``--kube-api``, or an unreadable token file.
    """
    from observe.agent.node_health import KubeNodeApi, NoApiServer

    try:
        api = KubeNodeApi(ns.kube_api, ns.kube_token_file, ns.kube_ca_file)
    except NoApiServer as exc:
        raise UserError(
            "--kube-api",
            str(exc),
            "run the agent in a pod with its service-account token "
            "(daemonsets/components/node-condition), or pass --kube-api URL and --kube-token-file FILE",
        ) from None
    if not os.access(api.token_file, os.R_OK):
        raise UserError(
            "--kube-token-file",
            f"cannot read {api.token_file}",
            "mount the service-account token (automountServiceAccountToken: true, as the node-health "
            "components do) or pass a readable --kube-token-file",
        )


def validate(ns: argparse.Namespace) -> None:
    """Check flag values that argparse cannot.

    Raises:
        UserError: the first problem found.
    """
    if not 0 <= ns.port <= 65535:
        raise UserError("--port", f"{ns.port} is not a TCP port", "pass 1..65535 (or 0 for a free one)")
    if not MIN_INTERVAL <= ns.interval <= MAX_INTERVAL:
        raise UserError(
            "--interval",
            f"{ns.interval:g} s is out of range",
            f"pass {MIN_INTERVAL:g}..{MAX_INTERVAL:g} seconds, e.g. --interval 1",
        )
    if ns.nvml_timeout is None:
        ns.nvml_timeout = min(0.5, ns.interval / 2)
    if not 0.01 <= ns.nvml_timeout < ns.interval:
        raise UserError(
            "--nvml-timeout",
            f"{ns.nvml_timeout:g} s is out of range",
            f"pass at least 0.01 s and less than --interval ({ns.interval:g} s), e.g. --nvml-timeout 0.5",
        )
    for flag, value in (("--max-processes", ns.max_processes), ("--process-series", ns.process_series)):
        if value < 0:
            raise UserError(flag, f"{value} is negative", "pass 0 or more")
    if not os.path.isdir(ns.proc_root) or not os.access(ns.proc_root, os.R_OK | os.X_OK):
        raise UserError(
            "--proc-root",
            f"{ns.proc_root} is not a readable directory",
            "pass the procfs mount point, e.g. /proc or /host/proc",
        )
    if ns.kernel_log is not None:
        try:
            with open(ns.kernel_log, "rb"):
                pass
        except OSError as exc:
            raise UserError(
                "--kernel-log",
                f"cannot read {ns.kernel_log} ({exc.strerror})",
                "give a readable file, or leave the flag out to read /dev/kmsg",
            ) from None
    if not ns.node:
        raise UserError("--node", "the node name is empty", "pass --node NAME or set NODE_NAME")
    if (ns.node_condition or ns.node_taint) and ns.state_dir is None:
        raise UserError(
            "--node-condition" if ns.node_condition else "--node-taint",
            "needs --state-dir (without it a restarted agent re-reads old XIDs and sets again what a "
            "person cleared after the repair)",
            "pass --state-dir DIR",
        )
    if ns.node_condition or ns.node_taint:
        _check_kube_credentials(ns)
    if ns.state_dir is not None:
        try:
            os.makedirs(ns.state_dir, exist_ok=True)
        except OSError as exc:
            raise UserError(
                "--state-dir",
                f"cannot create {ns.state_dir} ({exc.strerror})",
                "pass a writable directory (on Kubernetes a hostPath, so it outlives the pod)",
            ) from None
        if not os.access(ns.state_dir, os.W_OK | os.X_OK):
            raise UserError(
                "--state-dir",
                f"{ns.state_dir} is not writable",
                "pass a directory this user can write, or leave the flag out",
            )


def _version() -> str:
    try:
        return metadata.version("fsdp-observe")
    except metadata.PackageNotFoundError:
        return "unknown"


def main(argv: list[str]) -> int:
    """Run the agent until SIGTERM/SIGINT; return the exit status (0 after a signal).

    Raises:
        UserError: a bad flag, an unreadable file or a taken port.
    """
    stop = stopping.install()  # before anything slow: a signal during start-up is kept, not lost
    stop.exit_after(
        FORCED_EXIT_SECONDS,
        status=lambda _: 0,
        message=lambda signum: (
            f"fsdp-observe agent: still stopping {FORCED_EXIT_SECONDS:g} s after {stopping.signal_name(signum)}; "
            "exiting now"
        ),
    )
    from observe.agent.run import Agent
    from observe.agent.sampler import Settings

    ns = build_parser().parse_args(argv)
    validate(ns)
    logging.basicConfig(level=ns.log_level.upper(), format="fsdp-observe agent: %(levelname)s %(message)s")
    # A request waiting for the GIL behind the collection thread gets it within 1 ms (default 5 ms).
    sys.setswitchinterval(0.001)
    settings = Settings(
        node=ns.node,
        proc_root=ns.proc_root,
        kernel_log=ns.kernel_log,
        kernel_log_source=ns.kernel_log_source,
        max_processes=ns.max_processes,
        interval_seconds=ns.interval,
        nvml_timeout_seconds=ns.nvml_timeout,
        version=_version(),
        state_dir=ns.state_dir,
        node_condition=ns.node_condition,
        node_taint=ns.node_taint,
        kube_api=ns.kube_api,
        kube_token_file=ns.kube_token_file,
        kube_ca_file=ns.kube_ca_file,
    )
    try:
        agent = Agent(settings, ns.address, ns.port, ns.process_series, ns.command_label)
    except OSError as exc:
        raise bind_error(
            "--port",
            ns.address,
            ns.port,
            exc,
            "stop what holds it or pass --port with a free port",
            address_field="--address",
        ) from None
    try:
        if stop.requested.is_set():
            return 0
        agent.start(wait=False)  # the first collection runs on the collection thread, never on this one
        while not agent.wait_first(STARTUP_POLL_SECONDS):
            if stop.requested.is_set():
                return 0
        host = ns.address if ns.address not in ("0.0.0.0", "::") else "127.0.0.1"
        host = f"[{host}]" if ":" in host else host
        print(
            f"fsdp-observe agent: node {ns.node}, every {ns.interval:g} s, "
            f"serving http://{host}:{agent.port}/metrics and /snapshot",
            flush=True,
        )
        stop.wait()
        return 0
    finally:
        if stop.requested.is_set():
            stop.ignore_further()
        agent.stop()
