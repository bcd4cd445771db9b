"""The pieces of ``fsdp-observe demo`` (``observe.cli.demo``): a local agent, a scraper, the summary.

The demo is a bounded two-rank CPU fine-tune on this machine, watched end to end.

Starts a local node agent (``python -m observe.cli agent``) and ``torchrun`` with the ``tiny`` preset
on the default corpus (the Python standard library's sources), prints the agent's and each rank's
metrics URL, scrapes the ranks over HTTP while the run goes, and ends with a summary table that
includes what the agent saw (CPU, memory, GPUs or "no GPUs", XID errors). On a terminal it opens
``fsdp-observe top`` over the agent and the ranks while the run goes (quitting it stops the run);
with no terminal attached (or ``--no-tui``) it runs headless to the end.
With ``--prometheus`` (and a ``prometheus`` binary on PATH) it also starts a local Prometheus
with the generated rules (``observe.monitoring.rules``) scraping the agent and the ranks, and prints its URL.
"""

from __future__ import annotations

import json
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from observe import prometheus_local, promtext, stopping, supervise
from observe.catalog import AGENT_PORT, TRAIN_PHASE, TRAIN_STEP
from observe.errors import PortInUseError
from observe.model import NodeSnapshot
from observe.ports import free_port, port_is_free
from observe.sources.view import ClusterSnapshot
from observe.supervise import Supervised

#: Seconds the demo waits, after the UI was closed on a finished run, for the ranks to end their
#: linger and exit on their own before it stops them (the default linger is at most 20 s).
FINISHED_EXIT_WAIT_SECONDS = 30.0


def watch(agent_url: str, metrics_urls: list[str], run: Supervised, run_id: str, train_log: Path) -> bool:
    """Run ``fsdp-observe top`` over the demo's agent and ranks until the user quits or the demo gets
    a stop signal (which ``run`` has passed on already); when the user quit a run still going, stop
    it as Ctrl-C would (SIGINT: the ranks agree on a step and exit 130). Returns whether the user did.

    A run whose ranks all said ``finished`` is not stopped: its training is over and it exits 0 once
    its ranks end their linger (a SIGINT then raced the launcher's own exit and made a finished run
    exit 130), unless that takes longer than ``FINISHED_EXIT_WAIT_SECONDS``.

    The TUI follows ``run_id`` only (another process on a rank's port is an error line, never the
    demo's run) and says when training exited early (``RunWatch``).
    """
    from observe.sources.direct import DirectSource, Endpoint
    from observe.tui.app import make_app

    source = DirectSource([Endpoint(agent_url)], [Endpoint(u) for u in metrics_urls], run_id=run_id)
    app = make_app(RunWatch(source, run, train_log), should_stop=run.stop.requested.is_set)
    app.run()
    if run.stop.requested.is_set() or run.proc is None or run.proc.poll() is not None:
        return False
    if any(r.run_id == run_id and r.finished for r in app.snapshot.runs):
        print("fsdp-observe demo: training finished; waiting for the ranks to exit", flush=True)
        deadline = time.monotonic() + FINISHED_EXIT_WAIT_SECONDS
        while run.proc.poll() is None and not run.stop.requested.is_set() and time.monotonic() < deadline:
            time.sleep(0.1)
        if run.proc.poll() is not None or run.stop.requested.is_set():
            return False
    print("fsdp-observe demo: the terminal UI was closed; stopping the run (SIGINT, as Ctrl-C)", flush=True)
    run.send(signal.SIGINT)
    return True


def first_error_line(log: Path, limit: int = 1 << 20) -> str | None:
    """The line of ``log`` (its first ``limit`` bytes) that says why a run failed: the first
    ``error:`` line (a user mistake, or a rank's one-line failure), else the last line that is not
    blank; ``None`` for a missing or empty file."""
    try:
        with open(log, "rb") as fh:
            text = fh.read(limit).decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("error:")), lines[-1] if lines else None)


class RunWatch:
    """The demo TUI's source: its ``DirectSource``, plus a line on every screen once training exited
    early (``training exited with status 2: error: ...``): a run that failed is never shown as a
    run still waiting for its ranks. Implements ``observe.tui.poller.Source``.
    """

    def __init__(self, inner: Any, run: Supervised, train_log: Path) -> None:
        self.inner, self.run, self.train_log = inner, run, train_log
        self._line: str | None = None

    @property
    def description(self) -> str:
        """The inner source's."""
        return str(self.inner.description)

    def exit_line(self) -> str | None:
        """What became of the training process, when it exited other than by finishing (``None``
        while it runs and once it finished: the ranks' ``finished`` phase says that)."""
        proc = self.run.proc
        status = None if proc is None else proc.poll()
        if status is None or status == 0:
            return None
        if self._line is None:
            first = first_error_line(self.train_log)
            self._line = (
                f"training exited with status {supervise.shell_status(status)}"
                + (f": {first}" if first else "")
                + f" (all its output: {self.train_log})"
            )
        return self._line

    async def cycle(self, focus: str | None, deadline: float) -> ClusterSnapshot:
        """The inner source's refresh, with the exit line first among the errors."""
        snapshot = await self.inner.cycle(focus, deadline)
        line = self.exit_line()
        return snapshot if line is None else replace(snapshot, errors=(line, *snapshot.errors))

    def close(self) -> None:
        """Close the inner source."""
        self.inner.close()


def outcome(status: int, closed_ui: bool) -> str:
    """How the demo's summary names the run's end, from its exit status (``trainer.signals``)."""
    if status == 0:
        return "finished"
    if status == stopping.exit_status(signal.SIGINT):
        return "stopped (the terminal UI was closed)" if closed_ui else "stopped by SIGINT (Ctrl-C)"
    if status == stopping.exit_status(signal.SIGTERM):
        return "stopped by SIGTERM"
    return "FAILED"


@dataclass
class ScrapeRecord:
    """What the demo saw on one rank's ``/metrics`` during the run."""

    url: str
    ok: int = 0
    failed: int = 0
    #: refused connections before the rank first answered (it was still starting: not failures)
    starting: int = 0
    series: int = 0
    last_step: float | None = None
    last_phase: str | None = None
    last_error: str | None = None


#: The ``User-Agent`` of the demo's poller: the ranks' linger tells its scrapes from the TUI's.
SCRAPER_USER_AGENT = "fsdp-observe-demo"


@dataclass
class Scraper:
    """Polls each rank's ``/metrics`` every ``interval`` seconds on a background thread; with
    ``run_id``, an answer for another run counts as a failure (another process on the port)."""

    urls: list[str]
    interval: float = 2.0
    run_id: str | None = None
    records: list[ScrapeRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.records = [ScrapeRecord(u) for u in self.urls]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-scraper", daemon=True)

    def start(self) -> None:
        """Start polling on the background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling; waits up to 5 s for the thread's current scrape."""
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        with httpx.Client(timeout=2.0, headers={"User-Agent": SCRAPER_USER_AGENT}) as client:
            while not self._stop.wait(self.interval):
                for record in self.records:
                    self._scrape(client, record)

    def _scrape(self, client: httpx.Client, record: ScrapeRecord) -> None:
        try:
            samples = promtext.parse(client.get(record.url).raise_for_status().text)
        except (httpx.HTTPError, ValueError) as exc:
            if record.ok == 0 and isinstance(exc, httpx.ConnectError):
                record.starting += 1  # the rank has not bound its port yet
                return
            record.failed += 1
            record.last_error = type(exc).__name__
            return
        steps = [s for s in samples if s.name == TRAIN_STEP.name]
        if self.run_id is not None and steps and all(s.labels.get("run_id") != self.run_id for s in steps):
            record.failed += 1
            record.last_error = f"another run ({steps[0].labels.get('run_id')}) on this port"
            return
        record.ok += 1
        record.series = len(samples)
        record.last_step = next((s.value for s in steps), record.last_step)
        phase = next((s.labels.get("phase") for s in samples if s.name == TRAIN_PHASE.name and s.value == 1), None)
        record.last_phase = phase or record.last_phase


def read_log(path: Path) -> tuple[list[dict], dict | None]:
    """The windows and end record of a trainer JSON log (``--log-json``)."""
    windows, end = [], None
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("event") == "window":
                windows.append(record)
            elif record.get("event") == "end":
                end = record
    return windows, end


def summary_rows(
    windows: list[dict], end: dict | None, scrapes: list[ScrapeRecord], status: int
) -> list[tuple[str, str]]:
    """The summary table as (label, value) rows; the last is the exit status."""
    steps = (
        f"{end['step']} ({end['steps']} run by this attempt)"
        if end and end.get("step") != end.get("steps")
        else str(end["steps"])
        if end
        else "n/a (no end record)"
    )
    scraped = [r.last_step for r in scrapes if r.ok and r.last_step is not None]
    if end and scraped and max(scraped) < end["step"]:  # a stop does not linger for a last scrape
        steps += f" (after the last scrape, at step {max(scraped):.0f})"
    rows: list[tuple[str, str]] = [("steps", steps)]
    if windows:
        first, last = windows[0], windows[-1]
        rows += [
            ("loss, first window", f"{first['loss']:.4f} (to step {first['step']})"),
            ("loss, last window", f"{last['loss']:.4f} (to step {last['step']})"),
            ("global tokens/s, last window", f"{last['global_tokens_per_second']:,.0f}"),
        ]
    if end and end.get("step_seconds_p50") is not None:
        rows.append(("step time p50 / p95", f"{end['step_seconds_p50']:.3f} s / {end['step_seconds_p95']:.3f} s"))
    for rank, rec in enumerate(scrapes):
        if rec.ok and rec.last_step is not None:
            seen = f"{rec.ok} scrapes, {rec.series} series, step {rec.last_step:.0f}"
            seen += f" ({rec.last_phase})" if rec.last_phase else ""
            seen += f"; {rec.failed} failed ({rec.last_error})" if rec.failed else ""
        elif rec.failed:
            seen = f"{rec.ok} ok, {rec.failed} failed" + (f" (last: {rec.last_error})" if rec.last_error else "")
        else:
            seen = "never answered (the rank had not bound its port)" if rec.starting else "not scraped"
        rows.append((f"rank {rank} /metrics", seen))
    rows.append(("exit status", str(status)))
    return rows


def outputs_rows(log_json: Path, train_log: Path | None, status: int) -> list[tuple[str, str]]:
    """Where the run's output is, naming only files that exist; with a failure, the line that says why."""
    rows: list[tuple[str, str]] = []
    if status not in (0, stopping.exit_status(signal.SIGINT), stopping.exit_status(signal.SIGTERM)):
        reason = first_error_line(train_log) if train_log is not None else None
        if reason:
            rows.append(("why", reason))
    if train_log is not None and train_log.is_file():
        rows.append(("training output", str(train_log)))
    rows.append(
        (
            "JSON log",
            str(log_json)
            if log_json.is_file()
            else "none (training ended before its first step)" + ("" if train_log else "; see its output above"),
        )
    )
    return rows


def start_agent(port: int, log_path: Path, timeout: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Start ``python -m observe.cli agent`` on 127.0.0.1:``port`` (0: a free one), its log in ``log_path``.

    Returns the process and its base URL (read from the line the agent prints once it serves).

    Raises:
        RuntimeError: the agent exited or printed no URL within ``timeout`` seconds; the message
            is the agent's own error line when it gave one.
    """
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "observe.cli",
                "agent",
                "--address",
                "127.0.0.1",
                "--port",
                str(port),
                "--interval",
                "1",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    assert proc.stdout is not None  # stdout=PIPE
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline().decode() if ready else ""
    proc.stdout.close()
    if match := re.search(r"(http://\S+)/metrics", line):
        return proc, match.group(1)
    if proc.poll() is None:
        proc.terminate()
    proc.wait()
    errors = [text for text in log_path.read_text(errors="replace").splitlines() if text.startswith("error:")]
    raise RuntimeError(errors[0] if errors else f"the node agent did not start within {timeout:g} s (log: {log_path})")


def start_local_agent(port: int | None, log_path: Path) -> tuple[subprocess.Popen, str]:
    """``start_agent`` on ``port``; with ``None``, on ``AGENT_PORT``, or on a free port when that is taken.

    Raises:
        PortInUseError: an explicit ``port`` is taken (flag ``--agent-port``).
        RuntimeError: as ``start_agent``.
    """
    if port is None:
        port = AGENT_PORT if port_is_free(AGENT_PORT) else 0
    elif port and not port_is_free(port):
        raise PortInUseError("--agent-port", "127.0.0.1", port, "pass another --agent-port, or 0 for a free one")
    return start_agent(port, log_path)


def agent_snapshot(url: str) -> NodeSnapshot | None:
    """The agent's ``/snapshot``, or ``None`` when it cannot be read."""
    try:
        return NodeSnapshot.from_json(httpx.get(f"{url}/snapshot", timeout=5.0).raise_for_status().content)
    except (httpx.HTTPError, ValueError):
        return None


def agent_rows(snapshot: NodeSnapshot | None, url: str) -> list[tuple[str, str]]:
    """What the node agent saw, as summary rows."""
    if snapshot is None:
        return [("node agent", f"{url} (no snapshot could be read)")]
    host, mem = snapshot.host, snapshot.host.memory
    cpu = "n/a" if host.cpu.busy_ratio is None else f"{host.cpu.busy_ratio:.0%} busy"
    rows = [
        ("node agent", f"{url}/metrics, {snapshot.agent.collections} collections"),
        ("agent: CPU", f"{cpu} of {host.cpu_count} CPUs, load {host.load1:.2f}, {host.processes} processes"),
    ]
    if mem.total_bytes and mem.used_bytes is not None:
        rows.append(("agent: memory", f"{mem.used_bytes / 2**30:.1f} of {mem.total_bytes / 2**30:.1f} GiB used"))
    if snapshot.gpus:
        names = sorted({g.name or "unknown" for g in snapshot.gpus})
        lost = sum(g.lost for g in snapshot.gpus)
        rows.append(("agent: GPUs", f"{len(snapshot.gpus)} x {', '.join(names)}" + (f", {lost} lost" if lost else "")))
    else:
        rows.append(("agent: GPUs", "no GPUs"))
    xids = sum(x.count for x in snapshot.xid_counts)
    readable = snapshot.agent.sources.get("kernel_log") == "ok"
    rows.append(("agent: XID errors", f"{xids}" + ("" if readable else " (kernel log not readable here)")))
    return rows


def start_prometheus(
    out: Path, port: int | None, agent_url: str, rank_urls: list[str]
) -> prometheus_local.LocalPrometheus:
    """Prometheus on 127.0.0.1 with the generated rules, scraping the agent and the ranks.

    Its config, log, rule file and TSDB go to ``out/prometheus``. ``port`` ``None``: the default
    port, or a free one when that is taken.

    Raises:
        RuntimeError: it did not start (the message says why).
    """
    from observe.monitoring import rules

    folder = out / "prometheus"
    folder.mkdir(parents=True, exist_ok=True)
    rule_path = folder / rules.RULES_FILE
    rule_path.write_text(rules.render())
    if port is None:
        port = prometheus_local.DEFAULT_PORT
        if not port_is_free(port):
            port = free_port()
    cfg = prometheus_local.config(
        {
            "fsdp-observe-agent": [urlsplit(agent_url).netloc],
            "fsdp-observe-trainer": [urlsplit(u).netloc for u in rank_urls],
        },
        [rule_path],
    )
    return prometheus_local.start(folder, cfg, port)


def print_table(title: str, rows: list[tuple[str, str]]) -> None:
    """Print rows as a two-column table."""
    width = max(len(label) for label, _ in rows)
    print(f"\n{title}")
    print("-" * min(width + 2 + max(len(v) for _, v in rows), shutil.get_terminal_size().columns - 1))
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
