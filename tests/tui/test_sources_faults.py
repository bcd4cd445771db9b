"""The TUI's fan-in against answers that once broke it: an
HTTP/1.0 body without Content-Length sent in two writes, and JSON nested 200,000 deep. A real local
asyncio server sends the bytes."""

from __future__ import annotations

import asyncio
import json
import time

from observe.model import NodeSnapshot
from observe.sources.direct import DirectSource, Endpoint, decode_node
from observe.sources.http import HttpFetcher
from observe.sources.view import NodeStatus


def snapshot_json(node: str = "n1") -> bytes:
    return NodeSnapshot(node=node, time_unix=time.time()).to_json().encode()


async def serve(parts: list[bytes], pause: float = 0.05) -> tuple[asyncio.base_events.Server, int]:
    """A server answering every connection with ``parts``, ``pause`` seconds apart, then closing."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        for i, part in enumerate(parts):
            if i:
                await asyncio.sleep(pause)
            writer.write(part)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_an_http_1_0_body_without_content_length_is_read_to_the_end() -> None:
    body = snapshot_json()

    async def main() -> bytes:
        server, port = await serve(
            [b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body[:40], body[40:]]
        )
        fetcher = HttpFetcher(timeout=3)
        try:
            return await fetcher.get(f"http://127.0.0.1:{port}/snapshot")
        finally:
            fetcher.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(main()) == body


def test_the_direct_source_shows_such_a_node_ok() -> None:
    body = snapshot_json("n7")

    async def main() -> str:
        server, port = await serve([b"HTTP/1.0 200 OK\r\n\r\n" + body[:10], body[10:100], body[100:]])
        source = DirectSource([Endpoint(f"http://127.0.0.1:{port}")], [])
        try:
            snap = await source.cycle(None, deadline=3.0)
        finally:
            source.close()
            server.close()
            await server.wait_closed()
        return snap.nodes[0].state

    assert asyncio.run(main()) == "ok"


def test_json_nested_too_deeply_is_malformed_with_a_reason() -> None:
    previous = NodeStatus(name="n1", source="http://x")
    status = decode_node(previous, b"[" * 200_000 + b"]" * 200_000, now=5.0, keep=False)
    assert status.state == "malformed" and status.error == "not a snapshot: nested too deeply"
    assert status.checked_unix == 5.0
    deep_object = json.dumps({"node": "n1"})[:-1].encode() + b', "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert decode_node(previous, deep_object, now=6.0, keep=False).state == "malformed"


def test_a_failed_connect_says_the_errors_own_words() -> None:
    """asyncio raises ``OSError(errno, "Connect call failed (address)")`` for a connect the kernel
    refuses other than ECONNREFUSED (its selector loop's exact wording): the reason shown is the
    errno's words, not the call and the address the row already names."""
    from observe.sources.http import _describe

    assert _describe(OSError(113, "Connect call failed ('10.0.0.9', 9401)")) == "no route to host"
    assert _describe(OSError(101, "Connect call failed ('10.0.0.9', 9401)")) == "network is unreachable"
    assert _describe(ConnectionRefusedError(111, "Connect call failed")) == "connection refused"
    assert _describe(TimeoutError()) == "TimeoutError"
