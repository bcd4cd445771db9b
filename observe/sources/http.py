"""A small asyncio HTTP/1.1 GET client for the TUI's fan-in: keep-alive per origin, bounded.

Why not httpx here: pulling a thousand agents every two seconds is the TUI's hot path, and
``httpx.AsyncClient`` spends many times the CPU per request this client does
(``benchmarks/tui_fanin.py`` measures both side by side; the figures are in docs/tui.md and
``benchmarks/results/tui_fanin.json``). It speaks only what
the agent and the trainers' exporters serve: ``GET`` over plain HTTP (or TLS), bodies framed by
``Content-Length``, ``chunked`` or connection close, optionally gzip. Everything else the project
does over HTTP (Prometheus' API, Kubernetes) uses the well-kept clients.

Bounds: at most ``concurrency`` requests in flight; one kept-alive connection per origin (an
agent or a rank answers one request at a time); each request has its own timeout.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlsplit

#: Largest body accepted (a full agent snapshot with 1,000 processes is about 0.5 MB).
MAX_BODY_BYTES = 64 * 1024 * 1024
_HEAD_LIMIT = 64 * 1024


class FetchError(Exception):
    """A GET failed. ``kind`` is ``slow`` (timeout), ``unreachable`` or ``malformed``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class _Origin:
    host: str
    port: int
    tls: bool
    idle: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None


@dataclass
class HttpFetcher:
    """GETs URLs with bounded concurrency, reusing one connection per origin.

    Args:
        concurrency: requests in flight at most.
        timeout: seconds per request (connect + answer).

    Use from one asyncio event loop only; ``close()`` when done.
    """

    concurrency: int = 64
    timeout: float = 1.5
    _origins: dict[str, _Origin] = field(default_factory=dict, repr=False)
    _requests: dict[str, tuple[_Origin, bytes]] = field(default_factory=dict, repr=False)
    _semaphore: asyncio.Semaphore | None = field(default=None, repr=False)

    async def get(self, url: str, timeout: float | None = None) -> bytes:
        """The body of ``GET url`` (status 200 only).

        Raises:
            FetchError: ``slow`` when no full answer came within the timeout; ``unreachable``
                when the connection failed; ``malformed`` for another status or a broken answer.
        """
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.concurrency)
        limit = self.timeout if timeout is None else timeout
        if limit <= 0:
            raise FetchError("slow", "no time left in this refresh")
        async with self._semaphore:
            try:
                return await asyncio.wait_for(self._get(url), limit)
            except asyncio.TimeoutError:
                raise FetchError("slow", f"no answer within {limit:.1f} s") from None

    def _request(self, url: str) -> tuple[_Origin, bytes]:
        """The origin (kept-alive connection) and the request bytes of ``url``, made once per URL:
        every refresh asks every endpoint the same (``urlsplit`` alone was 5 % of a refresh's CPU)."""
        known = self._requests.get(url)
        if known is not None:
            return known
        parts = urlsplit(url)
        origin_key = f"{parts.scheme}://{parts.netloc}"
        origin = self._origins.get(origin_key)
        if origin is None:
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise FetchError("malformed", f"not an http(s) URL: {url}")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            origin = self._origins[origin_key] = _Origin(parts.hostname, port, parts.scheme == "https")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = parts.netloc.rsplit("@", 1)[-1]
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: fsdp-observe-top\r\nAccept-Encoding: gzip\r\n\r\n"
        ).encode("ascii")
        self._requests[url] = (origin, request)
        return origin, request

    async def _get(self, url: str) -> bytes:
        origin, request = self._request(url)
        reused, conn = origin.idle is not None, origin.idle
        origin.idle = None
        for attempt in (0, 1):
            if conn is None:
                conn = await self._connect(origin)
            reader, writer = conn
            try:
                writer.write(request)
                body, keep = await _read_response(reader)
            except (ConnectionError, asyncio.IncompleteReadError) as exc:
                writer.close()
                conn = None
                if reused and attempt == 0:  # the server closed an idle keep-alive connection: retry once
                    reused = False
                    continue
                raise FetchError("unreachable", _describe(exc)) from None
            except BaseException:
                writer.close()  # a half-read answer (timeout, bad framing): never reuse it
                raise
            if keep:
                origin.idle = conn
            else:
                writer.close()
            return body
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    @staticmethod
    async def _connect(origin: _Origin) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            return await asyncio.open_connection(
                origin.host, origin.port, limit=_HEAD_LIMIT, ssl=ssl.create_default_context() if origin.tls else None
            )
        except OSError as exc:
            raise FetchError("unreachable", _describe(exc)) from None

    def close(self) -> None:
        """Close every kept-alive connection."""
        for origin in self._origins.values():
            if origin.idle is not None:
                try:
                    origin.idle[1].close()
                except RuntimeError:  # its event loop is already closed: so is the socket
                    pass
                origin.idle = None


async def _read_response(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Read one response: ``(body, keep_alive)``. Raises ``FetchError`` for a non-200 answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise FetchError("malformed", "response headers too long") from None
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
        raise FetchError("malformed", f"not an HTTP answer: {lines[0][:60]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    keep = status_line[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise FetchError("malformed", "bad Content-Length") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            raise FetchError("malformed", f"body of {length} bytes")
        body = await reader.readexactly(length)
    else:  # HTTP/1.0 style: the body ends where the server closes the connection
        body, keep = await _read_to_close(reader), False
    status = int(status_line[1])
    if status != 200:
        first = body[:80].decode("utf-8", "replace").splitlines()
        raise FetchError("malformed", f"HTTP {status}" + (f": {first[0]}" if first else ""))
    if headers.get("content-encoding", "").lower() == "gzip":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError) as exc:
            raise FetchError("malformed", f"bad gzip body ({exc})") from None
    return body, keep


async def _read_to_close(reader: asyncio.StreamReader) -> bytes:
    """Everything until the server closes the connection (at most ``MAX_BODY_BYTES``)."""
    parts: list[bytes] = []
    total = 0
    while chunk := await reader.read(65536):
        total += len(chunk)
        if total > MAX_BODY_BYTES:
            raise FetchError("malformed", f"body over {MAX_BODY_BYTES} bytes")
        parts.append(chunk)
    return b"".join(parts)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0], 16)
        except ValueError:
            raise FetchError("malformed", "bad chunk size") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise FetchError("malformed", f"body over {MAX_BODY_BYTES} bytes")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


def _describe(exc: BaseException) -> str:
    """A short reason for a connection failure (``connection refused``, ``name not found``)."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    if isinstance(exc, asyncio.IncompleteReadError):
        return "connection closed mid-answer"
    text = str(exc)
    if "Name or service not known" in text or "nodename nor servname" in text or "No address" in text:
        return "host name not found"
    if isinstance(exc, OSError) and exc.errno:
        # asyncio words a failed connect "[Errno 113] Connect call failed ('10.0.0.9', 9401)": the
        # address is on screen already, the errno's own words (no route to host) are the reason
        return os.strerror(exc.errno).lower()
    return text.splitlines()[0][:120] if text else type(exc).__name__
