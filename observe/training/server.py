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

**Slow clients.** A rank's time is the run's, so its exporter bounds what a client can hold
(``observe.httpguard``, as the node agent does, with ``LIMITS``): at most 16 connections at once,
a thread each; 5 s for a request's line and headers, 30 s to write the answer; at the cap, the
client that has been sending its request the longest gives its place to the new connection, so a
scraper is answered while anyone drips bytes; past the cap with no place to free, ``503`` at once. A listen
backlog of 1,024 queues a burst of connections instead of dropping them. Before, 80 clients
dripping a byte a second held 71 more threads of a training rank for as long as they liked. What
went wrong is counted in ``Served.errors`` and each kind logged once.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.registry import Collector

from observe.catalog import TRAINER_PORT_BASE
from observe.errors import bind_error
from observe.httpguard import Counts, GuardedHandler, GuardedServer, Limits
from observe.training import debug as debug_pages
from observe.training.forensics import RankForensics

#: How often a linger looks whether every scraper has been back (seconds).
LINGER_POLL_SECONDS = 0.05
#: A rank's connection bounds (``observe.httpguard``): a Prometheus pair, a TUI and a poller need a handful.
LIMITS = Limits(max_connections=16, idle_seconds=5.0, overflow=0)
#: Pending connections the kernel queues before ``accept`` (the standard library's 5 timed out a burst).
LISTEN_BACKLOG = 1024

log = logging.getLogger(__name__)


class _Handler(GuardedHandler, WSGIRequestHandler):
    """prometheus_client's WSGI app behind the connection bounds; no line per request."""

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(GuardedServer, ThreadingMixIn, WSGIServer):
    request_queue_size = LISTEN_BACKLOG


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

    @property
    def errors(self) -> Counts:
        """What went wrong serving (``http_timeout``, ``http_slow_client``, ``http_rejected``, ...), by kind."""
        return self._httpd.errors

    def open_connections(self) -> int:
        """Connections being served now (a thread each)."""
        return int(self._httpd.open_connections())

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

    Uses a fresh ``CollectorRegistry`` (never the global one) and prometheus_client's WSGI app on a
    threaded server with the connection bounds of the module docstring (its own copy of ``LIMITS``),
    served on a daemon thread; every request is recorded (``Served.scrapes``) for the linger.
    Port 0 lets the kernel choose (``Served.port`` says which). With ``debug`` (returning the rank's
    evidence), the ``/debug/`` pages are served too (``observe.training.debug``).

    Raises:
        UserError: the port is taken (``PortInUseError``) or cannot be bound (naming ``field``), or
            the address is not one of this machine's (naming ``address_field`` when given).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    ProcessCollector(registry=registry)
    scrapes = ScrapeLog()

    class Server(_Server):
        limits = replace(LIMITS)
        errors = Counts(log, " by the rank's metrics endpoint, kind {kind}")

    try:
        family, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][::4]
        Server.address_family = family
        app = make_wsgi_app(registry)
        if debug is not None:
            app = debug_pages.wrap(app, debug)
        httpd = make_server(str(sockaddr[0]), port, scrapes.wrap(app), Server, _Handler)
    except OSError as exc:
        raise bind_error(
            field, address, port, exc, f"stop what holds it or pass {field} with a free base port", address_field
        ) from None
    threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True).start()
    return Served(registry, address, int(httpd.server_port), httpd, scrapes)
