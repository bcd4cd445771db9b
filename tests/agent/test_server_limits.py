"""The agent's HTTP server under abuse, over real sockets: a burst of connections, more connections
than places (idle, silent and dripping ones give way; the health probe is answered even at the
cap), a client dripping one byte at a time, clients that go away mid-answer, and
``Accept-Encoding`` with q-values. The full attacks against the agent process, with a scraper
measured throughout, are tests/e2e/test_agent_abuse.py."""

from __future__ import annotations

import gzip
import logging
import select
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from observe.agent.run import Agent
from observe.agent.sampler import Settings
from observe.agent.server import MAX_CONNECTIONS, Latest, accepts_gzip, make_server
from tests.support.processes import wait_for


@pytest.fixture
def agent(fake_nvml, tmp_path: Path) -> Iterator[Agent]:
    agent = Agent(Settings(node="srv", kmsg=str(tmp_path / "none"), interval_seconds=3600), "127.0.0.1", 0)
    agent.start()
    yield agent
    agent.stop()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_answer(s: socket.socket) -> bytes:
    """Everything the server sends until it closes or 5 s pass."""
    out, deadline = b"", time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        out += chunk
    return out


def closed_by_server(s: socket.socket) -> bool:
    """Whether the server closed ``s``: the rest of any answer is read, then the end (50 ms at most)."""
    s.settimeout(0.05)
    try:
        while chunk := s.recv(4096):  # an answer's body may still be there (headers and body are two writes)
            del chunk
    except (TimeoutError, BlockingIOError):
        return False
    except ConnectionError:
        return True
    return True


def test_a_burst_of_connections_is_queued_not_dropped() -> None:
    """200 connects while nothing accepts: all complete at once (listen backlog 5 made the 7th
    and later wait a second for a SYN retry)."""
    server = make_server("127.0.0.1", 0, Latest(1.0))
    port = server.server_address[1]
    socks = []
    try:
        for _ in range(200):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        deadline = time.monotonic() + 0.5
        pending = set(socks)
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(pending), [], 0.05)
            pending -= {s for s in writable if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0}
        assert not pending, f"{len(pending)} of 200 connects still waiting after 0.5 s"
    finally:
        for s in socks:
            s.close()
        server.server_close()


@pytest.mark.serial("the 503 must come within 2 s of the connection")
def test_when_no_place_can_be_freed_connections_beyond_the_cap_get_503_at_once(agent: Agent) -> None:
    """Every place held by a connection too young to give way and no spare thread: 503 at once."""
    agent.server.limits.evict_after_seconds = 600
    agent.server.limits.overflow = 0
    silent = [connect(agent.port) for _ in range(MAX_CONNECTIONS)]
    try:
        wait_for(lambda: agent.server.open_connections() == MAX_CONNECTIONS, what="every connection accepted")
        extra = connect(agent.port)
        started = time.monotonic()
        answer = read_answer(extra)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 1" in answer
        assert time.monotonic() - started < 2
        extra.close()
    finally:
        for s in silent:
            s.close()
    wait_for(lambda: agent.server.open_connections() == 0, what="the places freed")
    assert httpx.get(f"http://127.0.0.1:{agent.port}/healthz").status_code == 200
    agent.collect_once()
    assert agent.latest.current.snapshot.agent.errors.get("http_rejected", 0) >= 1


def test_at_the_cap_the_health_probe_is_answered_by_a_spare_thread(agent: Agent) -> None:
    agent.server.limits.evict_after_seconds = 600  # nothing gives way: only the spare threads are left
    silent = [connect(agent.port) for _ in range(MAX_CONNECTIONS)]
    try:
        wait_for(lambda: agent.server.open_connections() == MAX_CONNECTIONS, what="every connection accepted")
        assert httpx.get(f"http://127.0.0.1:{agent.port}/healthz").text == "ok\n"
        assert httpx.get(f"http://127.0.0.1:{agent.port}/metrics").status_code == 503
    finally:
        for s in silent:
            s.close()


def test_at_the_cap_an_idle_keepalive_connection_gives_its_place_first(agent: Agent) -> None:
    """Before: 64 kept-alive connections held every place and every other client got 503."""
    held = []
    for _ in range(MAX_CONNECTIONS):
        s = connect(agent.port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        held.append(s)
    try:
        for _ in range(20):
            assert httpx.get(f"http://127.0.0.1:{agent.port}/metrics").status_code == 200
        assert agent.server.open_connections() <= MAX_CONNECTIONS
        closed = sum(1 for s in held if closed_by_server(s))
        assert closed >= 1  # the longest idle gave its place (the scrapes then reuse the one it freed)
    finally:
        for s in held:
            s.close()
    agent.collect_once()
    assert "http_rejected" not in agent.latest.current.snapshot.agent.errors


def test_a_client_dripping_bytes_is_cut_off_at_the_header_deadline(agent: Agent) -> None:
    """One byte every 0.2 s never trips a per-read timeout; the header deadline closes it."""
    agent.server.limits.header_seconds = 1.0
    s = connect(agent.port)
    started, closed_after = time.monotonic(), None
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    for byte in request:
        try:
            s.sendall(bytes([byte]))
        except OSError:
            closed_after = time.monotonic() - started
            break
        ready, _, _ = select.select([s], [], [], 0.2)
        if ready and s.recv(1024) == b"":
            closed_after = time.monotonic() - started
            break
    s.close()
    assert closed_after is not None and closed_after < 3.0, "the server kept a dripping client past its deadline"
    agent.collect_once()
    assert agent.latest.current.snapshot.agent.errors.get("http_timeout", 0) == 1


def test_a_kept_alive_connection_is_still_served_within_its_deadline(agent: Agent) -> None:
    with httpx.Client() as client:
        for _ in range(5):
            assert client.get(f"http://127.0.0.1:{agent.port}/metrics").status_code == 200
            time.sleep(0.1)


def test_clients_that_go_away_are_counted_and_logged_once_without_tracebacks(
    agent: Agent, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="observe.agent.server")
    for _ in range(50):
        s = connect(agent.port)
        s.sendall(b"GET /snapshot HTTP/1.1\r\nHost: x\r\n\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        s.close()
    time.sleep(0.5)
    agent.collect_once()
    errors = agent.latest.current.snapshot.agent.errors
    assert errors.get("http_aborted", 0) >= 1, errors
    assert "http_error" not in errors
    lines = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(lines) == 1 and not lines[0].exc_info
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "header, gzip_ok",
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("GZIP;q=0.5", True),
        ("x-gzip", True),
        ("*", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0, identity", False),
        ("x-nogzip-please", False),
        ("identity", False),
        ("", False),
        (None, False),
        ("*;q=0", False),
        ("gzip;q=0, *", False),
        ("gzip;q=abc", False),
        ("deflate, *;q=0.1", True),
    ],
)
def test_accept_encoding_is_read_with_its_q_values(header: str | None, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


def test_metrics_honour_gzip_q0_and_say_vary(agent: Agent) -> None:
    with socket.create_connection(("127.0.0.1", agent.port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0\r\nConnection: close\r\n\r\n")
        answer = read_answer(s)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"Content-Encoding" not in head and b"Vary: Accept-Encoding" in head
    assert body == agent.latest.current.metrics
    with socket.create_connection(("127.0.0.1", agent.port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
        head, _, body = read_answer(s).partition(b"\r\n\r\n")
    assert b"Content-Encoding: gzip" in head and b"Vary: Accept-Encoding" in head
    assert gzip.decompress(body) == agent.latest.current.metrics
    assert b"Python/" not in head  # the Server header names the agent, not the interpreter
