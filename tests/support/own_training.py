"""Shared by the e2e tests of third-party trainers: one real run per trainer, watched three ways.

``watched_run`` starts a real Prometheus (the generated rules, scraping the run's two ports every
0.5 s), then the user's unchanged script under torchrun with instrumentation on (the environment
variable alone, or ``fsdp-observe run``), and waits until both ranks are ``finished`` (the long
linger keeps their final figures up) and Prometheus has scraped that. The tests then check the
figures against the framework's own log, drive the TUI's Run screen with Pilot
(``observe.sources.direct``), and evaluate the training-run dashboard's queries in Prometheus.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from observe import catalog as c
from observe import prometheus_local
from observe.monitoring import rules
from observe.monitoring.settings import Settings
from observe.ports import free_port, free_port_block
from tests.support.dcgm_exposition import NODE as DCGM_NODE
from tests.support.instrumented import Scrape, instrument_env, start
from tests.support.processes import REPO, wait_for

SCRIPTS = Path(__file__).resolve().parents[1] / "e2e" / "scripts"
SCRAPE_SECONDS = 0.5
NAMESPACE = "fsdp-e2e"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
FSDP_OBSERVE_RUN = [sys.executable, "-m", "observe.cli", "run", "--"]


@dataclass
class WatchedRun:
    """A finished run whose ranks still serve, and the Prometheus that scraped it."""

    name: str
    ranks: dict[int, Scrape]
    ports: list[int]
    prometheus: str
    started: float
    folder: Path
    output: str

    @property
    def run_id(self) -> str:
        """The ``run_id`` label both ranks carry."""
        (run_id,) = {s.labels(c.TRAIN_STEP.name)["run_id"] for s in self.ranks.values()}
        return run_id

    def record(self, name: str, rank: int) -> dict:
        """What the script logged itself, for ``rank`` (``tiny_llama.write_json``)."""
        return json.loads((self.folder / f"{name}.rank{rank}").read_text())


def instant(url: str, expr: str) -> list[dict]:
    """An instant query's result vector."""
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=30).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def watched_run(
    name: str, script: list[str], tmp: Path, env: dict[str, str], via_run_command: bool, log_every: int = 5
) -> Iterator[WatchedRun]:
    """Run ``script`` (its path and flags) under torchrun, instrumented; yield once it finished.

    Args:
        via_run_command: start it as ``fsdp-observe run -- torchrun ...``; else set only the
            environment variable (the installed ``.pth`` does the rest).
    """
    base = free_port_block(2)
    ports = [base, base + 1]
    (tmp / rules.RULES_FILE).write_text(rules.render(Settings()))
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_SECONDS * 1000:.0f}ms",
            "scrape_timeout": "400ms",
            "evaluation_interval": "1s",
        },
        "rule_files": [str(tmp / rules.RULES_FILE)],
        "scrape_configs": [
            {
                "job_name": "trainer",
                "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports], "labels": {"namespace": NAMESPACE}}],
            }
        ],
    }
    prometheus = prometheus_local.start(tmp / "prometheus", config, free_port())
    run = None
    try:

        def targets_known() -> bool:  # discovery hands targets over after ~5 s: poll, never sleep
            body = httpx.get(f"{prometheus.url}/api/v1/targets", timeout=5).json()
            return len(body["data"]["activeTargets"]) == 2 and all(
                t["lastScrape"] != "0001-01-01T00:00:00Z" for t in body["data"]["activeTargets"]
            )

        wait_for(targets_known, timeout=30, interval=0.25, what="Prometheus to try the rank ports")
        environ = instrument_env(env, base, linger=600, log_every=log_every)
        if via_run_command:
            environ.pop(c.INSTRUMENT_ENV)  # fsdp-observe run sets it
        command = [*(FSDP_OBSERVE_RUN if via_run_command else []), *TORCHRUN, *script]
        started = time.time()
        run = start(command, environ, tmp / f"{name}.log", cwd=tmp)
        ranks = run.wait_finished(ports, timeout=300)

        def scraped_finished() -> bool:
            done = instant(prometheus.url, f'{c.TRAIN_PHASE.name}{{phase="finished"}} == 1')
            return len(done) == 2

        wait_for(scraped_finished, timeout=30, interval=0.25, what="Prometheus to scrape both finished ranks")
        time.sleep(2 * SCRAPE_SECONDS)
        yield WatchedRun(
            name, {p - base: s for p, s in ranks.items()}, ports, prometheus.url, started, tmp, run.output()
        )
    finally:
        if run is not None:
            run.stop()
        prometheus.stop()


def dashboard_panels_showing(run: WatchedRun) -> set[str]:
    """Titles of the training-run dashboard's panels whose queries (as Grafana sends them, with
    every variable at "All") return a finite value for this run."""
    from tests.support.grafana_queries import panel_queries, substitute, variable_values

    board = json.loads((REPO / "dashboards" / "training-run.json").read_text())
    end = time.time()
    values = variable_values(board, end - run.started, node=DCGM_NODE, step=1.0, scrape=0.5)  # as the dashboards e2e
    shown = set()
    for where, target in panel_queries(board):
        expr = substitute(target["expr"], values)
        params = (
            {"query": expr, "time": f"{end:.3f}"}
            if target.get("instant")
            else {"query": expr, "start": f"{run.started:.3f}", "end": f"{end:.3f}", "step": "1"}
        )
        body = httpx.get(
            f"{run.prometheus}/api/v1/query{'' if target.get('instant') else '_range'}", params=params, timeout=30
        ).json()
        assert body["status"] == "success", (where, body)
        for series in body["data"]["result"]:
            points = series.get("values") or [series.get("value")]
            if series["metric"].get("run_id") == run.run_id and any(math.isfinite(float(v)) for _, v in points):
                shown.add(where.split(" / ")[1])
    return shown


async def run_screen_lines(run: WatchedRun) -> list[str]:
    """The TUI's Run screen over the two ranks (``DirectSource``), once both are shown: its header
    lines, then the rank table's rows."""
    from observe.sources.direct import DirectSource, Endpoint
    from observe.tui.app import make_app
    from observe.tui.screens.run import RunScreen
    from observe.tui.widgets.lines import Lines
    from observe.tui.widgets.table import VirtualTable
    from tests.support.tui import lines_text, table_text, until

    app = make_app(DirectSource([], [Endpoint(f"http://127.0.0.1:{p}/metrics") for p in run.ports]), interval=0.5)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(pilot, lambda: app.snapshot.runs and len(app.snapshot.runs[0].ranks) == 2, 30, "two ranks")
        await pilot.press("2")
        screen = await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen, 10, "the Run screen")
        await pilot.pause(1.0)
        return lines_text(screen.query_one("#run", Lines)) + table_text(screen.query_one(VirtualTable))
