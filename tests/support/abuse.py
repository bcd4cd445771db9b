"""Hostile HTTP clients over real sockets, and a well-behaved scraper that measures what it gets.

- ``Scraper``: one GET on a new connection every ``interval`` (a Prometheus scrape), recording each
  answer's status and latency (a refused or failed connection is status 0);
- ``hold_keepalive``: connections that each send a few kept-alive requests, read the answers and
  then say nothing (a client that never closes);
- ``Slowloris``: connections that send their request one byte per ``period`` and open a new one
  whenever the server cuts one, counting the cuts.

The server's threads and open descriptors come from ``/proc/<pid>`` (``usage``).
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit


def usage(pid: int) -> tuple[int, int]:
    """(threads, open file descriptors) of process ``pid``."""
    with open(f"/proc/{pid}/status") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return threads, len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


@dataclass
class Scraper:
    """GETs ``url`` on a new connection every ``interval`` seconds on a thread, until stopped
    (``http.client``: the client's own cost stays small beside the server's answer)."""

    url: str
    interval: float = 0.1
    statuses: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        url = urlsplit(self.url)
        while not self._stop.is_set():
            started = time.monotonic()
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)  # a new connection each time
            try:
                conn.request("GET", url.path)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0
            finally:
                conn.close()
            self.seconds.append(time.monotonic() - started)
            self.statuses.append(status)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def refused(self) -> int:
        """Answers other than 200 (503s and failed connections)."""
        return sum(1 for s in self.statuses if s != 200)

    def p99(self) -> float:
        """99th percentile latency, seconds."""
        return percentile(self.seconds, 0.99)


def hold_keepalive(port: int, connections: int, requests: int, path: str = "/healthz") -> list[socket.socket]:
    """Open ``connections`` sockets, send ``requests`` kept-alive GETs on each and read what comes
    back within a second; return the sockets, still open (the caller closes them)."""
    held = []
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode() * requests
    for _ in range(connections):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(request)
        except OSError:
            continue
        held.append(s)
    deadline = time.monotonic() + 1.0
    for s in held:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
    return held


class Slowloris:
    """``connections`` clients that send a request header one byte every ``period`` seconds, and
    open a new connection whenever the server closes one (``cuts`` counts them)."""

    REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000

    def __init__(self, port: int, connections: int, period: float = 1.0) -> None:
        self.port, self.connections, self.period = port, connections, period
        self.cuts = 0
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._socks: list[tuple[socket.socket, int]] = []

    def __enter__(self) -> Slowloris:
        for _ in range(self.connections):
            self._socks.append(self._open())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for s, _ in self._socks:
            s.close()

    def _open(self) -> tuple[socket.socket, int]:
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            pass
        self.opened += 1
        return s, 0

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            for i, (s, sent) in enumerate(self._socks):
                try:
                    s.setblocking(False)
                    try:
                        if s.recv(4096) == b"":
                            raise ConnectionResetError("closed by the server")
                    except BlockingIOError:
                        pass
                    s.send(self.REQUEST[sent : sent + 1])
                    self._socks[i] = (s, sent + 1)
                except OSError:
                    s.close()
                    self.cuts += 1
                    self._socks[i] = self._open()
