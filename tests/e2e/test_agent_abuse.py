"""The real agent process under the reliability probe's attacks, with a normal scraper throughout.

The probe's two attacks, shortened: 500 connections each sending three kept-alive ``GET /healthz``
and then holding the connection, and 80 connections dripping a request header one byte a second
(each re-opened as soon as the agent cuts it). Meanwhile a scraper GETs ``/metrics`` on a new
connection every 100 ms, and the kubelet's ``/healthz`` is asked too. Before: 98 of 98 scrapes got
503 during the hold and 295 of 299 during the drip; the probe could restart the pod through its
liveness probe. Now every scrape and probe is answered 200, the scraper's p99 stays under 100 ms
(or, on a machine too loaded for that, within 3x its p99 measured just before, with no attack, in
the same run), and the agent's threads stay bounded and come back afterwards. GPUs: the stand-in
NVML library (tests/support/fake_nvml.c); run one at a time (it measures latency).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx

from observe.agent.server import MAX_CONNECTIONS
from tests.support.abuse import Scraper, Slowloris, hold_keepalive, usage
from tests.support.processes import AgentProcess, wait_for

#: Spare threads the agent keeps past the cap for /healthz (observe.httpguard.Limits.overflow).
OVERFLOW = 8


def scrape_for(agent: AgentProcess, seconds: float) -> Scraper:
    with Scraper(f"{agent.base}/metrics") as scraper:
        time.sleep(seconds)
    return scraper


def test_idle_and_slow_clients_never_starve_a_scraper_or_the_health_probe(fake_nvml, tmp_path: Path) -> None:
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    agent = AgentProcess(["--kernel-log", str(kernel_log), "--interval", "0.5"], fake_nvml.env(), tmp_path)
    port = int(agent.base.rsplit(":", 1)[1])
    figures: dict[str, object] = {"load": os.getloadavg()[0]}
    try:
        wait_for(lambda: agent.get("/healthz").status_code == 200, what="a fresh agent")
        before = usage(agent.proc.pid)
        baseline = scrape_for(agent, 5)
        held = hold_keepalive(port, 500, 3)
        try:
            during_hold = scrape_for(agent, 5)
            health_hold = httpx.get(f"{agent.base}/healthz", timeout=10).status_code
            peak_hold = usage(agent.proc.pid)
        finally:
            for s in held:
                s.close()
        with Slowloris(port, 80) as loris:
            time.sleep(1.5)  # every dripper connected and dripping
            during_drip = scrape_for(agent, 12)
            health_drip = httpx.get(f"{agent.base}/healthz", timeout=10).status_code
            peak_drip = usage(agent.proc.pid)
        after = wait_for(
            lambda: (u := usage(agent.proc.pid)) and u[0] <= before[0] + 2 and u, timeout=30, what="threads back"
        )
        errors = agent.snapshot()["agent"]["errors"]
    finally:
        status = agent.stop()
    figures.update(
        p99_ms={
            k: round(s.p99() * 1000, 1) for k, s in (("base", baseline), ("hold", during_hold), ("drip", during_drip))
        },
        scrapes={"hold": len(during_hold.statuses), "drip": len(during_drip.statuses)},
        refused={"hold": during_hold.refused(), "drip": during_drip.refused()},
        health={"hold": health_hold, "drip": health_drip},
        threads_fds={"before": before, "hold": peak_hold, "drip": peak_drip, "after": after},
        drip_cuts=loris.cuts,
        errors=errors,
    )
    print(figures)
    assert status == 0
    for name, attacked in (("hold", during_hold), ("drip", during_drip)):
        assert len(attacked.statuses) >= 10, (name, figures)
        assert attacked.refused() == 0, (name, attacked.statuses, figures)
        assert attacked.p99() < max(0.1, 3 * baseline.p99()), (name, figures)
    assert health_hold == 200 and health_drip == 200, figures
    for peak in (peak_hold, peak_drip):
        assert peak[0] <= before[0] + MAX_CONNECTIONS + OVERFLOW + 4, figures  # a thread per place, no more
    assert loris.cuts >= 80, figures  # every dripper was cut at least once (5 s for its header)
    assert after[1] <= before[1] + 8, figures
