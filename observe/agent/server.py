"""The agent's HTTP side: the latest snapshot, served as ``/metrics``, ``/snapshot`` and ``/healthz``.

Requests never collect: the collection loop publishes a ``Published`` snapshot each interval (its
Prometheus text rendered once, on the collection thread), and a request copies the bytes of the
latest one. The JSON and the gzip form of the exposition are made on the first request that
wants them and kept with that snapshot. The server is the standard library's threaded HTTP/1.1
server (a thread per connection, keep-alive), which answers a cached body in well under a
millisecond of CPU.

Endpoints:
    GET /metrics   Prometheus text format 0.0.4 (gzip when the scraper accepts it)
    GET /snapshot  the snapshot as JSON (``observe.model.NodeSnapshot``, ``docs/agent.md``)
    GET /snapshot?view=summary  the same without the process lists and per-core CPU (about 5 %
                   of the size: what a cluster-wide view polls from every node)
    GET /healthz   200 ``ok`` while snapshots are fresh (younger than 3 intervals + 5 s), else 503
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from observe.model import NodeSnapshot

#: The text format every Prometheus 2.x reads (our names need none of format 1.0.0's UTF-8 escaping).
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
JSON_TYPE = "application/json; charset=utf-8"
TEXT_TYPE = "text/plain; charset=utf-8"


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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fsdp-observe-agent"
    timeout = 60  # an idle keep-alive connection is closed after this many seconds
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    latest: Latest

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        current = self.latest.current
        if path == "/healthz":
            ok = self.latest.fresh()
            self._send(200 if ok else 503, TEXT_TYPE, b"ok\n" if ok else b"stale: no recent collection\n")
        elif current is None:
            self._send(503, TEXT_TYPE, b"no snapshot yet\n")
        elif path == "/metrics":
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                self._send(200, METRICS_TYPE, current.metrics_gzip(), encoding="gzip")
            else:
                self._send(200, METRICS_TYPE, current.metrics)
        elif path == "/snapshot":
            view = parse_qs(query).get("view", ["full"])[-1]
            if view not in VIEWS:
                self._send(400, TEXT_TYPE, f"unknown view {view!r}: use view=full or view=summary\n".encode())
            else:
                self._send(200, JSON_TYPE, current.summary_json() if view == "summary" else current.json())
        elif path == "/":
            self._send(200, "text/html; charset=utf-8", b'<a href="/metrics">/metrics</a> '
                       b'<a href="/snapshot">/snapshot</a> <a href="/healthz">/healthz</a>\n')
        else:
            self._send(404, TEXT_TYPE, b"not found: try /metrics, /snapshot or /healthz\n")

    def _send(self, status: int, content_type: str, body: bytes, encoding: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # quiet: no line per scrape
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def make_server(address: str, port: int, latest: Latest) -> ThreadingHTTPServer:
    """A threaded HTTP/1.1 server bound to ``address:port`` (``port`` 0 picks a free one), not yet serving.

    Raises:
        OSError: the address cannot be bound (``errno.EADDRINUSE`` when the port is taken).
    """
    handler = type("Handler", (_Handler,), {"latest": latest})
    cls = _Server6 if ":" in address else _Server
    return cls((address, port), handler)
