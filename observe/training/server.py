"""The per-rank ``/metrics`` endpoint of the training-metrics core, its port rule, and the linger.

A rank serves on ``port_base + LOCAL_RANK`` (``observe.catalog.TRAINER_PORT_BASE`` by default),
so every rank of a node has its own port and a PodMonitor can name them ``metrics-<local_rank>``.

**The linger.** When a run ends, its exporter keeps serving so that whoever watches it sees the
``finished`` phase and the final figures (the last window's loss, the last step). By default
until every scraper seen in the 20 s before the end has scraped once more, and at most 20 s
(``Served.linger``): a scraper is told apart by its address and ``User-Agent`` (Prometheus,
``fsdp-observe top``, the demo's own poller, each replica of an HA Prometheus pair), and a run
nobody scraped ends at once. So a Prometheus scraping every 15 s (the trainer PodMonitor's
interval) gets its final scrape, and a local run watched by ``top`` (1 s) ends about a second
after its last step. An explicit linger (``--metrics-linger 35``, ``FSDP_OBSERVE_LINGER_SECONDS``)
waits its whole time, for scrapers that come only after the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.registry import Collector

from observe.catalog import TRAINER_PORT_BASE
from observe.errors import bind_error
from observe.training import debug as debug_pages
from observe.training.forensics import RankForensics

#: How often a linger looks whether every scraper has been back (seconds).
LINGER_POLL_SECONDS = 0.05


def rank_port(local_rank: int, port_base: int = TRAINER_PORT_BASE) -> int:
    """The port of the rank with ``local_rank`` on its node: ``port_base + local_rank``."""
    return port_base + local_rank


@dataclass
class ScrapeLog:
    """When each scraper last asked: ``(address, User-Agent)`` -> ``time.monotonic()`` of the start
    of its latest request. Written by the server's request threads, read by the linger."""

    last: dict[tuple[str, str], float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, address: str, agent: str, at: float | None = None) -> None:
        """A request from ``address`` with ``User-Agent`` ``agent`` started at ``at`` (default now)."""
        with self._lock:
            self.last[(address, agent)] = time.monotonic() if at is None else at

    def since(self, start: float) -> dict[tuple[str, str], float]:
        """The scrapers whose latest request started at ``start`` or later, with its time."""
        with self._lock:
            return {k: t for k, t in self.last.items() if t >= start}

    def wrap(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """The WSGI ``app`` recording each request before it is answered."""

        def recorded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            self.record(str(environ.get("REMOTE_ADDR", "")), str(environ.get("HTTP_USER_AGENT", "")))
            return app(environ, start_response)

        return recorded


@dataclass
class Served:
    """A running endpoint: the registry it serves, where, and who scraped it when."""

    registry: CollectorRegistry
    address: str
    port: int
    _httpd: Any
    scrapes: ScrapeLog = field(default_factory=ScrapeLog)

    def linger(
        self,
        ended: float,
        seconds: float,
        until_scraped: bool = True,
        sleep: Callable[[float], Any] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        on_wait: Callable[[int], None] | None = None,
    ) -> str:
        """Keep serving after the run ended at ``ended`` (``time.monotonic()``).

        Args:
            seconds: the longest wait.
            until_scraped: end early once every scraper seen in the ``seconds`` before ``ended``
                has asked once more, and at once when there was none (the default linger);
                ``False`` waits the whole ``seconds`` (an explicit ``--metrics-linger``).
            sleep: waits between looks; a true result (``threading.Event.wait``'s on a stop signal,
                as the trainer's ``StopRequest.sleep`` gives) ends the linger at once.
            clock: the monotonic clock (injectable for tests).
            on_wait: called once with the number of scrapers waited for (0 for a fixed wait)
                before a wait.

        Returns:
            ``"unwatched"`` (nobody scraped in those seconds: no wait), ``"scraped"`` (every
            scraper came back), ``"stopped"`` (``sleep`` said so) or ``"timeout"`` (the whole
            ``seconds`` passed).
        """
        if seconds <= 0:
            return "unwatched"
        watching = set(self.scrapes.since(ended - seconds)) if until_scraped else set()
        if until_scraped and not watching:
            return "unwatched"
        deadline = ended + seconds
        if on_wait is not None and not (until_scraped and watching <= set(self.scrapes.since(ended))):
            on_wait(len(watching))
        while True:
            if until_scraped and watching <= set(self.scrapes.since(ended)):
                return "scraped"
            left = deadline - clock()
            if left <= 0:
                return "timeout"
            if sleep(min(LINGER_POLL_SECONDS if until_scraped else left, left)):
                return "stopped"

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()


def serve(
    metrics: Collector,
    address: str,
    port: int,
    field: str = "--metrics-port",
    address_field: str | None = None,
    debug: Callable[[], RankForensics | None] | None = None,
) -> Served:
    """Serve ``metrics`` (and this process's CPU/RSS) as Prometheus text on ``address:port``.

    Uses a fresh ``CollectorRegistry`` (never the global one) and prometheus_client's threaded
    HTTP server on a daemon thread; every request is recorded (``Served.scrapes``) for the linger.
    Port 0 lets the kernel choose (``Served.port`` says which). With ``debug`` (returning the rank's
    evidence), the ``/debug/`` pages are served too (``observe.training.debug``).

    Raises:
        UserError: the port is taken (``PortInUseError``) or cannot be bound (naming ``field``), or
            the address is not one of this machine's (naming ``address_field`` when given).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    ProcessCollector(registry=registry)
    try:
        httpd, _ = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise bind_error(
            field, address, port, exc, f"stop what holds it or pass {field} with a free base port", address_field
        ) from None
    scrapes = ScrapeLog()
    app = httpd.get_app()
    assert app is not None  # start_http_server made its server with prometheus_client's WSGI app
    if debug is not None:
        app = debug_pages.wrap(app, debug)
    httpd.set_app(scrapes.wrap(app))
    return Served(registry, address, int(httpd.server_port), httpd, scrapes)
