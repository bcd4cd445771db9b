"""A training rank's metrics endpoint under slow clients, over real sockets: no thread per attacker,
the scraper still answered, everything back afterwards.

Before: 80 clients dripping a byte a second were never cut, and the rank's threads grew from 10
to 81 while training ran. The endpoint here is the one every rank serves (``serve``) over a small
collector; the attackers and the scraper are real HTTP clients on real sockets, in this process
(its thread count is the endpoint's: the attack itself runs on one thread).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client.core import GaugeMetricFamily

from observe.httpguard import Limits
from observe.training.server import LIMITS, Served, serve
from tests.support.abuse import Scraper, Slowloris
from tests.support.processes import wait_for


class _Steps:
    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("fsdp_train_step", "Optimizer steps completed.", value=42)


@pytest.fixture
def served() -> Iterator[Served]:
    s = serve(_Steps(), "127.0.0.1", 0)
    yield s
    s.shutdown()


def test_dripping_clients_cost_a_bounded_number_of_threads_and_the_scraper_is_answered(served: Served) -> None:
    served._httpd.limits.header_seconds = 2.0  # cut drippers sooner than the 5 s default, to see several rounds
    before = threading.active_count()
    with Slowloris(served.port, 80, period=0.5) as loris:
        time.sleep(1.0)
        with Scraper(f"http://127.0.0.1:{served.port}/metrics", interval=0.1) as scraper:
            peak = 0
            for _ in range(40):
                peak = max(peak, threading.active_count())
                time.sleep(0.1)
    after = wait_for(lambda: (n := threading.active_count()) <= before + 1 and n, timeout=15, what="threads back")
    print(
        {
            "load": os.getloadavg()[0],
            "threads": (before, peak, after),
            "scrapes": len(scraper.statuses),
            "refused": scraper.refused(),
            "p99_ms": round(scraper.p99() * 1000, 1),
            "cuts": loris.cuts,
            "errors": served.errors.counts(),
        }
    )
    # a thread per place, plus the attack's and the scraper's, plus evicted ones still ending (their
    # socket is shut; they return within microseconds, but 80 drippers replace each other ~150 times a second)
    assert peak <= before + LIMITS.max_connections + 8 < before + 80
    assert scraper.refused() == 0 and len(scraper.statuses) >= 10
    assert loris.cuts >= 80  # each dripper cut at least once
    assert served.errors.counts().get("http_slow_client", 0) + served.errors.counts().get("http_timeout", 0) >= 80


def test_a_silent_client_is_cut_at_the_header_deadline(served: Served) -> None:
    served._httpd.limits.header_seconds = 0.5
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as s:
        started = time.monotonic()
        assert s.recv(1024) == b""  # closed by the server, nothing sent
        assert time.monotonic() - started < 5
    wait_for(lambda: served.errors.counts().get("http_timeout") == 1, what="the timeout counted")
    assert served.open_connections() == 0


def test_the_limits_are_a_ranks() -> None:
    assert (LIMITS.max_connections, LIMITS.header_seconds, LIMITS.overflow) == (16, 5.0, 0)
    assert Limits().max_connections == 64  # the agent's default, larger: every TUI and Prometheus of a cluster
