"""The hang and straggler alerts on real runs: a real Prometheus with the generated rules scrapes the
ranks of an unchanged user script (``tests/e2e/scripts/faulty_fsdp2.py``: torchrun, gloo, FSDP2)
under ``fsdp-observe run``.

- Rank 1 of three stops before its forward at step 5: FsdpCollectiveHang fires for rank 1 alone,
  with its node, pod and process group, naming the collective ranks 0 and 2 wait in; and
  ``fsdp-observe diagnose --prometheus URL --json`` against the same Prometheus names rank 1.
- The same hang with the shipped intervals (the watchdog's 30 s floor, the PodMonitor's 15 s
  scrape, kube-prometheus-stack's 30 s global evaluation, the hang group's own 10 s): the alert
  fires within a minute of the fault, as the script printed its time.
- Rank 1 of three sleeps 0.3 s before every forward: FsdpStragglerRank fires for rank 1 and no
  other, and no hang alert fires.
- Rank 1 of three issues an all_reduce the others do not: FsdpCollectiveMismatch for it alone.
- Rank 1 of two runs a regex that holds the GIL: its scrapes time out, and FsdpRankGone names it.

Prometheus gives the targets the ``namespace`` and ``pod`` labels the trainer PodMonitor's targets
carry; the rules are the generated ones with shorter intervals (the test's ``Settings`` alone).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from observe import catalog as c
from observe import prometheus_local
from observe.monitoring import hangs, rules
from observe.monitoring.settings import Settings
from observe.ports import free_port
from tests.support.hangs import FaultyRun, start_faulty
from tests.support.instrumented import scrape
from tests.support.processes import wait_for

pytestmark = pytest.mark.skipif(
    prometheus_local.binary() is None,
    reason="the prometheus binary is missing: apt-get install prometheus (CI installs it)",
)
NAMESPACE, POD = "fsdp-e2e", "e2e-worker-0"
HANG_ALERTS = ("FsdpCollectiveHang", "FsdpCollectiveMismatch", "FsdpRankGone")
#: Short intervals for the test: everything evaluated every second, the straggler after 10 s.
FAST = Settings(hang_interval="1s", straggler_for="10s")


class Watched:
    """A faulty run and the Prometheus scraping its ranks."""

    def __init__(self, run: FaultyRun, prom: prometheus_local.LocalPrometheus) -> None:
        self.run, self.prom = run, prom

    def query(self, expr: str) -> list[dict]:
        body = httpx.get(f"{self.prom.url}/api/v1/query", params={"query": expr}, timeout=10).raise_for_status()
        return body.json()["data"]["result"]

    def alerts(self, name: str, state: str = "firing") -> list[dict]:
        """Prometheus' active alerts named ``name`` in ``state`` (labels, annotations, activeAt)."""
        body = httpx.get(f"{self.prom.url}/api/v1/alerts", timeout=10).raise_for_status().json()
        return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == name and a["state"] == state]

    def wait_alert(self, name: str, timeout: float) -> list[dict]:
        """Poll until ``name`` fires; fail early if the run exits."""

        def firing() -> list[dict]:
            if self.run.run.proc.poll() is not None:
                raise AssertionError(
                    f"the run exited with {self.run.run.proc.returncode}:\n{self.run.output()[-3000:]}"
                )
            return self.alerts(name)

        try:
            return wait_for(firing, timeout=timeout, interval=0.5, what=f"{name} firing")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.run.output()[-3000:]}") from None


@pytest.fixture
def watched(tmp_path: Path, subprocess_env) -> Iterator[Callable[..., Watched]]:
    started: list = []

    def start(
        fault: str,
        nproc: int,
        *script_args: str,
        settings: Settings = FAST,
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        **kwargs,
    ) -> Watched:
        go = tmp_path / "go"
        run = start_faulty(tmp_path, subprocess_env, fault, nproc, *script_args, "--go-file", str(go), **kwargs)
        started.append(run)
        (tmp_path / "rules.yaml").write_text(rules.render(settings))
        cfg = prometheus_local.config(
            {"fsdp-observe-trainer": [f"127.0.0.1:{p}" for p in run.ports]},
            [tmp_path / "rules.yaml"],
            scrape_interval=scrape_interval,
            evaluation_interval=evaluation_interval,
        )
        cfg["scrape_configs"][0]["static_configs"][0]["labels"] = {"namespace": NAMESPACE, "pod": POD}
        prom = prometheus_local.start(tmp_path / "prometheus", cfg, free_port())
        started.append(prom)
        watched = Watched(run, prom)
        # The ranks wait before their first step until Prometheus has every rank's series: an alert
        # about a rank needs Prometheus to have seen it (before: on a loaded machine the GIL-holding
        # rank reached its fault before its first scrape, and FsdpRankGone had no rank to name).
        wait_for(
            lambda: (
                len({r["metric"]["rank"] for r in watched.query(f"{c.TRAIN_INFO.name}{{namespace={NAMESPACE!r}}}")})
                == nproc
            ),
            timeout=120,
            interval=0.5,
            what=f"Prometheus to scrape all {nproc} ranks",
        )
        go.touch()
        return watched

    yield start
    for thing in reversed(started):
        thing.stop()


def active_at(alert: dict) -> float:
    """Unix time of an alert's ``activeAt`` (RFC 3339 in UTC, nanoseconds)."""
    stamp = alert["activeAt"].rstrip("Z")
    whole, _, fraction = stamp.partition(".")
    return datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp() + float(
        f"0.{fraction or 0}"
    )


def rank_labels(port: int) -> dict[str, str]:
    """The identity labels a rank exports (``fsdp_train_info``'s), read from its own ``/metrics``."""
    info = scrape(port).labels(c.TRAIN_INFO.name)
    return {k: info[k] for k in ("run_id", "rank", "local_rank", "node")}


def test_the_hang_alert_names_the_rank_that_stopped_and_diagnose_agrees(watched) -> None:
    w = watched("hang", 3, "--culprit", "1", "--at", "5")
    (alert,) = w.wait_alert("FsdpCollectiveHang", timeout=300)
    fault = w.run.fault_started("hang")
    assert fault is not None, w.run.output()[-2000:]
    assert alert["labels"] == {
        "alertname": "FsdpCollectiveHang",
        "severity": "critical",
        **rank_labels(w.run.ports[1]),
        "namespace": NAMESPACE,
        "pod": POD,
        "instance": f"127.0.0.1:{w.run.ports[1]}",
        "pg": "0",
    }
    assert alert["labels"]["rank"] == "1"
    description = alert["annotations"]["description"]
    assert "has not entered all_gather_single #" in description, description
    assert "on process group 0, which 2 rank(s) of the run wait in" in description, description
    assert f"pod {POD}, node {alert['labels']['node']}" in description
    assert "It is in phase training" in description
    # exactly one culprit, and nothing else of the hang alerts
    assert len(w.alerts("FsdpCollectiveHang", "pending")) == 0
    assert w.alerts("FsdpCollectiveMismatch") == [] and w.alerts("FsdpRankGone") == []
    active = active_at(alert)
    print(f"FsdpCollectiveHang active {active - fault:.1f} s after the fault (watchdog floor 4 s, 1 s intervals)")

    done = subprocess.run(
        [sys.executable, "-m", "observe.cli", "diagnose", "--prometheus", w.prom.url, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    verdict = json.loads(done.stdout)
    assert (verdict["verdict"], verdict["culprit_ranks"]) == ("hang", [1]), verdict
    (culprit,) = verdict["culprits"]
    assert (culprit["kind"], culprit["pg"], culprit["op"]) == ("behind", "0", "all_gather_single"), culprit
    assert (culprit["node"], culprit["pod"]) == (alert["labels"]["node"], POD), culprit
    assert culprit["waiting_ranks"] == [0, 2], culprit


def test_a_hang_fires_within_a_minute_with_the_shipped_intervals(watched) -> None:
    # The defaults: the watchdog's 30 s floor (a step here is far under 10 s), the trainer
    # PodMonitor's 15 s scrape, kube-prometheus-stack's 30 s global evaluation interval, and the
    # generated rules as committed (the hang group evaluated every 10 s).
    w = watched(
        "hang",
        2,
        "--culprit",
        "1",
        "--at",
        "5",
        settings=Settings(),
        scrape_interval="15s",
        evaluation_interval="30s",
        stall_seconds=30,
    )
    (alert,) = w.wait_alert("FsdpCollectiveHang", timeout=400)
    seen = time.time()
    fault = w.run.fault_started("hang")
    assert fault is not None
    assert alert["labels"]["rank"] == "1" and alert["labels"]["pg"] == "0"
    active = active_at(alert)
    print(f"FsdpCollectiveHang active {active - fault:.1f} s after the fault, seen by the test {seen - fault:.1f} s")
    assert active - fault < 60, (active, fault)


def test_the_straggler_alert_names_the_sleeping_rank_only(watched) -> None:
    w = watched("straggle", 3, "--culprit", "1", "--sleep", "0.3", "--steps", "600")
    (alert,) = w.wait_alert("FsdpStragglerRank", timeout=300)
    assert alert["labels"]["rank"] == "1" and alert["labels"]["pod"] == POD
    description = alert["annotations"]["description"]
    assert description.startswith(f"Rank 1 of run {alert['labels']['run_id']} (pod {POD}, node "), description
    per_step = float(alert["value"])
    assert 0.25 < per_step < 1.0, alert  # the 0.3 s sleep, less what the others' waits take back
    # For 15 s more, no other rank is ever pending or firing, and no hang alert.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        ranks = {r["metric"]["rank"] for r in w.query('ALERTS{alertname="FsdpStragglerRank"}')}
        assert ranks == {"1"}, ranks
        assert w.query(f'ALERTS{{alertname=~"{"|".join(HANG_ALERTS)}"}}') == []
        time.sleep(1.0)
    medians = w.query(f"{hangs.COMPUTE_MEDIAN}")
    assert len(medians) == 1 and float(medians[0]["value"][1]) < 0.1, medians


def test_an_extra_collective_on_one_rank_is_the_mismatch_alert_for_it_alone(watched) -> None:
    w = watched("extra", 3, "--culprit", "1", "--at", "5")
    alerts = w.wait_alert("FsdpCollectiveMismatch", timeout=300)
    assert [(a["labels"]["rank"], a["labels"]["op"], a["labels"]["pg"]) for a in alerts] == [("1", "all_reduce", "0")]
    description = alerts[0]["annotations"]["description"]
    assert "while the ranks blocked there wait in all_gather_single (2), all_reduce (1) at that sequence" in description
    assert w.alerts("FsdpCollectiveHang") == [] and w.alerts("FsdpRankGone") == []


def test_a_rank_holding_the_gil_is_gone_to_prometheus_while_the_other_waits(watched) -> None:
    # Its training thread runs a regex that never ends (C code holding the GIL): its exporter thread
    # cannot answer, so Prometheus' scrapes of it time out (up 0) and its series go stale.
    w = watched("gil", 2, "--culprit", "1", "--at", "5")
    (alert,) = w.wait_alert("FsdpRankGone", timeout=300)
    assert alert["labels"]["rank"] == "1" and alert["labels"]["instance"] == f"127.0.0.1:{w.run.ports[1]}"
    description = alert["annotations"]["description"]
    assert "its target is still discovered but its scrapes fail (up is 0)" in description, description
    assert "1 rank(s) of the run wait in a collective" in description, description
    assert w.alerts("FsdpCollectiveHang") == []
