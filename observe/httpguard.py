"""Connection bounds for the project's threaded HTTP servers (the node agent's, each training rank's):
a client that is slow or idle never costs a fast one its answer, and never holds a thread for long.

``socketserver``'s threading servers give every connection a thread until the client is done with
it. With a cap on threads, a few clients that connect and say nothing, drip their request a byte
at a time, or keep a connection open between requests fill the cap and lock every other client
out (64 such connections refused 98 of 98 scrapes and the kubelet's ``/healthz``); without a cap,
each costs a thread for as long as it likes (a training rank grew from 10 to 81 threads). Here a
connection is always in one phase, with its own deadline:

- ``new``: accepted, its request not complete: the request line and headers must arrive within
  ``Limits.header_seconds`` of the accept (a scraper sends them at once);
- ``idle``: kept alive after an answer, waiting for the next request: ``Limits.idle_seconds``;
  once the next request's first bytes arrive it is ``reading``, with ``header_seconds`` again;
- ``answering``: its request is read: ``Limits.request_seconds`` for the answer to be written.

A phase's deadline passing closes the connection (``http_timeout``; an idle one quietly). At
the cap (``Limits.max_connections``) a new connection takes the place of, in this order: the
connection idle the longest; else the one that has been reading its request the longest
(``http_slow_client``; ``Limits.evict_after_seconds`` can spare young ones): its socket is shut,
so its thread ends at once. A scraper sends its request with its first packet and is answering
within a millisecond, so it is never the oldest reader for long, while clients that drip or say
nothing push each other out however fast they reconnect (sparing readers younger than half a
second let 80 reconnecting drippers keep 16 places young and refuse 39 of 40 scrapes). Only when
every connection is busy answering is there no place: the new connection then gets one of
``Limits.overflow`` spare threads that answer ``/healthz`` only (others get ``503``), with
``overflow_seconds`` for the request, so a liveness probe is answered even then; past those,
``503`` with ``Retry-After`` at once (``http_rejected``).

``GuardedServer`` is a mixin for a ``socketserver.ThreadingMixIn`` server and ``GuardedHandler``
one for its ``http.server.BaseHTTPRequestHandler`` (``wsgiref``'s handler included). Standard
library only.
"""

from __future__ import annotations

import io
import logging
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class Limits:
    """One server's bounds (module docstring).

    Attributes:
        max_connections: connections served at once (a thread each).
        header_seconds: for a request's line and headers, from the accept or their first byte.
        idle_seconds: a kept-alive connection's wait for its next request.
        request_seconds: for writing an answer once the request is read.
        evict_after_seconds: only a connection reading its request for longer gives its place to a new
            one at the cap (0: the oldest reader, whatever its age).
        overflow: spare threads past the cap that answer ``/healthz`` only.
        overflow_seconds: what an overflow connection has for its request.
    """

    max_connections: int = 64
    header_seconds: float = 5.0
    idle_seconds: float = 30.0
    request_seconds: float = 30.0
    evict_after_seconds: float = 0.0
    overflow: int = 8
    overflow_seconds: float = 1.0


class Evicted(ConnectionAbortedError):
    """The server shut this connection to give its place to a new one."""


class Connection:
    """One accepted connection: its phase, since when, and its deadline."""

    def __init__(self, sock: socket.socket, address: Any, limits: Limits, overflow: bool = False) -> None:
        self.sock, self.address, self.limits, self.overflow = sock, address, limits, overflow
        self.requests = 0
        self.evicted = False
        self._enter("new", limits.overflow_seconds if overflow else limits.header_seconds)

    def _enter(self, phase: str, seconds: float) -> None:
        self.phase, self.since = phase, time.monotonic()
        self.deadline = self.since + seconds

    def next_request(self) -> None:
        """Before reading a request: ``new`` for the first, ``idle`` for later ones."""
        if self.requests:
            self._enter("idle", self.limits.idle_seconds)
        self.requests += 1

    def received(self) -> None:
        """Bytes arrived: an idle connection is now reading its next request."""
        if self.phase == "idle":
            self._enter("reading", self.limits.header_seconds)

    def answering(self) -> None:
        """The request is read: the answer has ``request_seconds``."""
        self._enter("answering", self.limits.request_seconds)

    def remaining(self) -> float:
        """Seconds left in this phase.

        Raises:
            TimeoutError: none left.
        """
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{self.phase} deadline passed")
        return left

    def evict(self) -> None:
        """Shut the socket (the connection's thread sees the end of its input at once)."""
        self.evicted = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Counts:
    """What went wrong serving, by kind, safe to update from every connection thread; each kind is
    logged once (with its traceback when asked)."""

    def __init__(self, logger: logging.Logger = log, where: str = "") -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self.logger, self.where = logger, where

    def add(self, kind: str, message: str, exc_info: bool = False) -> None:
        """Count one ``kind``; log ``message`` the first time."""
        with self._lock:
            self._counts[kind] += 1
            first = self._counts[kind] == 1
        if first:
            self.logger.warning("%s (reported once%s)", message, self.where.format(kind=kind), exc_info=exc_info)

    def counts(self) -> dict[str, int]:
        """A copy of the counts."""
        with self._lock:
            return dict(self._counts)


_REJECT = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: 37\r\n\r\ntoo many connections; try again later\n"
)


class GuardedServer:
    """Mixin for a ``socketserver.ThreadingMixIn`` server (put it first in the bases): the bounds of
    the module docstring. Set ``limits`` and ``errors`` (``Counts``) before serving."""

    limits: Limits
    errors: Counts
    daemon_threads = True

    def _guard_state(self) -> tuple[threading.Lock, list[Connection], list[Connection], threading.local]:
        state = self.__dict__.get("_guard")
        if state is None:
            state = self.__dict__.setdefault("_guard", (threading.Lock(), [], [], threading.local()))
        return state

    def connection(self) -> Connection | None:
        """The connection the calling thread serves (``None`` outside one)."""
        return getattr(self._guard_state()[3], "connection", None)

    def open_connections(self) -> int:
        """Connections being served now (overflow ones included)."""
        lock, active, overflow, _ = self._guard_state()
        with lock:
            return len(active) + len(overflow)

    def _place(self, request: socket.socket, client_address: Any) -> Connection | None:
        lock, active, overflow, _ = self._guard_state()
        limits, now = self.limits, time.monotonic()
        with lock:
            if len(active) >= limits.max_connections:
                idle = [c for c in active if c.phase == "idle"]
                slow = [
                    c for c in active if c.phase in ("new", "reading") and now - c.since > limits.evict_after_seconds
                ]
                victim = min(idle or slow, key=lambda c: c.since, default=None)
                if victim is not None:
                    active.remove(victim)
                    victim.evict()
                    if victim.phase != "idle":
                        self.errors.add(
                            "http_slow_client",
                            f"a client ({victim.address[0]}) still sending its request after "
                            f"{now - victim.since:.1f} s gave its place to a new connection at the cap of "
                            f"{limits.max_connections}",
                        )
            if len(active) < limits.max_connections:
                conn = Connection(request, client_address, limits)
                active.append(conn)
                return conn
            if len(overflow) < limits.overflow:
                conn = Connection(request, client_address, limits, overflow=True)
                overflow.append(conn)
                return conn
        return None

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve on a new thread, in a place of the module docstring's choosing; else 503 at once."""
        conn = self._place(request, client_address)
        if conn is None:
            self.errors.add(
                "http_rejected",
                f"more than {self.limits.max_connections} connections busy at once; answered 503 to "
                f"{client_address[0]}",
            )
            try:
                request.settimeout(1.0)
                request.sendall(_REJECT)
            except OSError:
                pass
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        thread = threading.Thread(target=self._serve_connection, args=(request, client_address, conn), daemon=True)
        try:
            thread.start()
        except BaseException:
            self._forget(conn)
            raise

    def _forget(self, conn: Connection) -> None:
        lock, active, overflow, _ = self._guard_state()
        with lock:
            for group in (active, overflow):
                if conn in group:
                    group.remove(conn)

    def _serve_connection(self, request: Any, client_address: Any, conn: Connection) -> None:
        local = self._guard_state()[3]
        local.connection = conn
        try:
            self.finish_request(request, client_address)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - counted by handle_error, as socketserver does
            self.handle_error(request, client_address)
        finally:
            local.connection = None
            self._forget(conn)
            self.shutdown_request(request)  # type: ignore[attr-defined]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One counted line for a client that went away or was cut; a counted traceback (logged once) otherwise."""
        exc = sys.exc_info()[1]
        if isinstance(exc, Evicted):
            return  # counted when it was evicted
        if isinstance(exc, TimeoutError):
            self.errors.add("http_timeout", f"a request from {client_address[0]} ran past its deadline ({exc})")
        elif isinstance(exc, ConnectionError):
            self.errors.add(
                "http_aborted", f"a client ({client_address[0]}) went away mid-request: {type(exc).__name__}: {exc}"
            )
        else:
            self.errors.add("http_error", f"serving {client_address[0]} failed", exc_info=True)


class _DeadlineReader(io.RawIOBase):
    """A socket's reading side bounded by its connection's phase deadline (``TimeoutError`` past it)."""

    def __init__(self, sock: socket.socket, conn: Connection) -> None:
        self.sock, self.conn = sock, conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.sock.settimeout(self.conn.remaining())
        n = self.sock.recv_into(buffer)
        if n == 0 and self.conn.evicted:
            raise Evicted("the server gave this connection's place to another")
        if n:
            self.conn.received()
        return n


class GuardedHandler:
    """Mixin for an ``http.server.BaseHTTPRequestHandler`` (put it first in the bases) served by a
    ``GuardedServer``: reads bounded by the phase deadlines; an overflow connection answers
    ``/healthz`` through ``do_GET`` and anything else ``503``."""

    server: Any
    connection: socket.socket
    client_address: Any
    conn: Connection
    rfile: Any

    def setup(self) -> None:
        super().setup()  # type: ignore[misc]
        self.conn = self.server.connection() or Connection(self.connection, self.client_address, self.server.limits)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, self.conn))

    def handle_one_request(self) -> None:
        self.conn.next_request()
        super().handle_one_request()  # type: ignore[misc]

    def handle(self) -> None:
        try:
            super().handle()  # type: ignore[misc]
        except TimeoutError as exc:  # wsgiref's handler reads without catching it
            self.log_error("Request timed out: %r", exc)

    def parse_request(self) -> bool:
        ok = super().parse_request()  # type: ignore[misc]
        if ok:
            self.conn.answering()
            self.connection.settimeout(self.conn.remaining())
            if self.conn.overflow and self.path.partition("?")[0] != "/healthz":  # type: ignore[attr-defined]
                self.close_connection = True
                self.send_error(503, "too many connections; try again later")  # type: ignore[attr-defined]
                return False
        return ok

    def log_error(self, format: str, *args: object) -> None:
        if format.startswith("Request timed out") and self.conn.phase != "idle":
            self.server.errors.add(
                "http_timeout",
                f"a request from {self.client_address[0]} was not complete within its "
                f"{self.conn.phase} deadline; its connection was closed",
            )
