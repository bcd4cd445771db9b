"""The agent's HTTP side: the latest snapshot, served as ``/metrics``, ``/snapshot`` and ``/healthz``.

Requests never collect: the collection loop publishes a ``Published`` snapshot each interval (its
Prometheus text rendered once, on the collection thread), and a request copies the bytes of the
latest one. The JSON and the gzip form of the exposition are made on the first request that
wants them and kept with that snapshot. The server is the standard library's threaded HTTP/1.1
server (a thread per connection, keep-alive), which answers a cached body in well under a
millisecond of CPU, with a listen backlog of ``LISTEN_BACKLOG`` (the standard library's 5 made
17 % of a 200-connection burst wait a second for a SYN retry) and the connection bounds of
``observe.httpguard`` (``LIMITS``): at most ``MAX_CONNECTIONS`` connections served at once; 5 s
for a request's line and headers, 30 s for a kept-alive connection's next request and 30 s for
an answer; at the cap, the longest-idle kept-alive connection, else the client that has been
sending its request the longest, gives its place to the new connection, so idle and slow clients
never lock out a scraper or the kubelet's probe; when no place can be freed, a spare thread answers
``/healthz`` (and ``503`` to the rest), and past those, ``503`` with ``Retry-After`` at once. A
client that goes away mid-answer is one counted ``http_aborted`` (logged once), never a
traceback; any other error while serving is counted as ``http_error`` and logged once with its
traceback.

``Accept-Encoding`` is read with its q-values (``gzip;q=0`` means no gzip) and every ``/metrics``
answer says ``Vary: Accept-Encoding``. Counts go to ``ServerErrors``, which the agent merges into
``fsdp_node_agent_errors_total``.

Endpoints:
    GET /metrics   Prometheus text format 0.0.4 (gzip when the scraper accepts it)
    GET /snapshot  the snapshot as JSON (``observe.model.NodeSnapshot``, ``docs/agent.md``)
    GET /snapshot?view=summary  the same without the process lists and per-core CPU (about 5 %
                   of the size: what a cluster-wide view polls from every node)
    GET /healthz   200 ``ok`` while snapshots are fresh (younger than 3 intervals + 5 s), else 503
"""

from __future__ import annotations

import gzip
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from observe.httpguard import Counts, GuardedHandler, GuardedServer, Limits
from observe.model import NodeSnapshot

#: The text format every Prometheus 2.x reads (our names need none of format 1.0.0's UTF-8 escaping).
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"
#: Pending connections the kernel queues before ``accept`` (Linux caps it at ``net.core.somaxconn``).
LISTEN_BACKLOG = 1024
#: Connections served at once (a thread each): Prometheus replicas, a few TUIs and probes need far fewer.
MAX_CONNECTIONS = 64
#: Seconds a kept-alive connection may wait for its next request, and an answer may take to write.
#: Prometheus' default scrape interval (15 s, or 60 s) then costs one reconnect per scrape at worst.
REQUEST_SECONDS = 30.0
#: The agent's connection bounds (``observe.httpguard``).
LIMITS = Limits(max_connections=MAX_CONNECTIONS, idle_seconds=REQUEST_SECONDS, request_seconds=REQUEST_SECONDS)

log = logging.getLogger(__name__)


class Published:
    """One snapshot and its renderings, each made at most once.

    Args:
        snapshot: the snapshot.
        metrics: its Prometheus exposition (``observe.agent.exposition.render``).
        published_at: monotonic time of publication (for ``/healthz``).
    """

    def __init__(self, snapshot: NodeSnapshot, metrics: bytes, published_at: float) -> None:
        self.snapshot = snapshot
        self.metrics = metrics
        self.published_at = published_at
        self._lock = threading.Lock()
        self._cache: dict[str, bytes] = {}

    def _once(self, key: str, make: Callable[[], bytes]) -> bytes:
        with self._lock:
            if key not in self._cache:
                self._cache[key] = make()
            return self._cache[key]

    def metrics_gzip(self) -> bytes:
        """The exposition, gzip-compressed (level 1: fast, about 10x smaller)."""
        return self._once("gzip", lambda: gzip.compress(self.metrics, compresslevel=1, mtime=0))

    def json(self) -> bytes:
        """The snapshot as UTF-8 JSON."""
        return self._once("json", lambda: self.snapshot.to_json().encode("utf-8"))

    def summary_json(self) -> bytes:
        """The summary view as UTF-8 JSON: ``summary(snapshot)``."""
        return self._once("summary", lambda: summary(self.snapshot).to_json().encode("utf-8"))


#: ``/snapshot?view=...`` values.
VIEWS = ("full", "summary")


def summary(snapshot: NodeSnapshot) -> NodeSnapshot:
    """``snapshot`` without ``processes``, ``gpu_processes`` and ``host.cpu.core_busy_ratios``, marked
    ``view="summary"``: every node-level and GPU figure, XID events and counts, the agent's health.

    A node with 8 GPUs and 100 processes is about 7 kB instead of 50-150 kB, and decodes 10x faster:
    a TUI watching a thousand nodes polls this and fetches the full snapshot of one node at a time.
    """
    host = replace(snapshot.host, cpu=replace(snapshot.host.cpu, core_busy_ratios=()))
    return replace(snapshot, host=host, processes=(), gpu_processes=(), view="summary")


class Latest:
    """The most recent ``Published`` snapshot (swapped atomically by the collection loop).

    Args:
        interval_seconds: the collection period, for the freshness rule of ``/healthz``.
    """

    def __init__(self, interval_seconds: float) -> None:
        self.interval_seconds = interval_seconds
        self.current: Published | None = None

    def publish(self, published: Published) -> None:
        """Make ``published`` the one requests see."""
        self.current = published

    def fresh(self) -> bool:
        """Whether the current snapshot is younger than 3 intervals + 5 s."""
        current = self.current
        return current is not None and time.monotonic() - current.published_at < 3 * self.interval_seconds + 5


class ServerErrors(Counts):
    """Counts of what went wrong serving (``http_rejected``, ``http_timeout``, ``http_slow_client``,
    ``http_aborted``, ``http_error``), safe to update from every connection thread; each kind is
    logged once."""

    def __init__(self) -> None:
        super().__init__(log, '; counted in fsdp_node_agent_errors_total{{kind="{kind}"}}')


def accepts_gzip(header: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value accepts gzip (RFC 9110 section 12.5.3).

    ``gzip`` or ``x-gzip`` with a q-value above 0, or ``*`` above 0 when gzip is not named;
    ``gzip;q=0`` refuses it. A q-value that is not a number counts as 0.
    """
    named: float | None = None
    star: float | None = None
    for item in (header or "").split(","):
        coding, _, params = item.partition(";")
        coding = coding.strip().lower()
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding in ("gzip", "x-gzip"):
            named = max(named or 0.0, q)
        elif coding == "*":
            star = q
    return named > 0 if named is not None else (star or 0.0) > 0


class _Handler(GuardedHandler, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fsdp-observe-agent"
    sys_version = ""  # no Python version in the Server header
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    latest: Latest
    errors: ServerErrors

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        current = self.latest.current
        if path == "/healthz":
            ok = self.latest.fresh()
            self._send(200 if ok else 503, TEXT_TYPE, b"ok\n" if ok else b"stale: no recent collection\n")
        elif current is None:
            self._send(503, TEXT_TYPE, b"no snapshot yet\n")
        elif path == "/metrics":
            if accepts_gzip(self.headers.get("Accept-Encoding")):
                self._send(200, METRICS_TYPE, current.metrics_gzip(), encoding="gzip", vary=True)
            else:
                self._send(200, METRICS_TYPE, current.metrics, vary=True)
        elif path == "/snapshot":
            view = parse_qs(query).get("view", ["full"])[-1]
            if view not in VIEWS:
                self._send(400, TEXT_TYPE, f"unknown view {view!r}: use view=full or view=summary\n".encode())
            else:
                self._send(200, JSON_TYPE, current.summary_json() if view == "summary" else current.json())
        elif path == "/":
            self._send(
                200,
                "text/html; charset=utf-8",
                b'<a href="/metrics">/metrics</a> <a href="/snapshot">/snapshot</a> <a href="/healthz">/healthz</a>\n',
            )
        else:
            self._send(404, TEXT_TYPE, b"not found: try /metrics, /snapshot or /healthz\n")

    def _send(
        self, status: int, content_type: str, body: bytes, encoding: str | None = None, vary: bool = False
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Content-Type-Options", "nosniff")
        if vary:
            self.send_header("Vary", "Accept-Encoding")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet: no line per scrape
        pass


class _Server(GuardedServer, ThreadingHTTPServer):
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], handler: type[_Handler], limits: Limits) -> None:
        self.errors = handler.errors
        self.limits = limits
        super().__init__(address, handler)


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(address: str, port: int, latest: Latest, errors: ServerErrors | None = None) -> _Server:
    """A threaded HTTP/1.1 server bound to ``address:port`` (``port`` 0 picks a free one), not yet
    serving, with the bounds of the module docstring (its own copy of ``LIMITS`` as its ``limits``);
    what goes wrong is counted in ``errors`` (the server's ``errors`` attribute; a new one when ``None``).

    Raises:
        OSError: the address cannot be bound (``errno.EADDRINUSE`` when the port is taken).
    """
    handler = type("Handler", (_Handler,), {"latest": latest, "errors": errors or ServerErrors()})
    cls = _Server6 if ":" in address else _Server
    return cls((address, port), handler, replace(LIMITS))
