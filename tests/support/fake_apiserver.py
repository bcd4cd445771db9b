"""A stand-in for a Kubernetes API server: replays recorded responses over real HTTP.

Test double, and the only one in these tests: no API server can run here. The ``kubernetes``
client under test talks to it through a kubeconfig, over a real socket, exactly as it would talk
to a cluster; the server answers each (method, path) with a recorded body and remembers every
request so tests can check what the client asked for (label selectors, container, propagation
policy, bearer token).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.support.local_http import BackgroundServer, QuietHandler

RECORDED = Path(__file__).resolve().parents[1] / "k8s" / "recorded"
TOKEN = "recorded-token"


@dataclass
class Reply:
    """One canned answer: status, body bytes, content type."""

    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def recorded(cls, name: str, status: int = 200) -> Reply:
        """A file under ``recorded/`` (``.json`` as JSON, anything else as plain text)."""
        path = RECORDED / name
        kind = "application/json" if path.suffix == ".json" else "text/plain"
        return cls(status, path.read_bytes(), kind)


@dataclass
class Request:
    """What the client sent."""

    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None
    body: bytes
    content_type: str | None = None


@dataclass
class RecordedAPIServer:
    """Serves ``routes`` on 127.0.0.1; unknown paths get the API server's bare 404."""

    routes: dict[tuple[str, str], Reply]
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                url = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                server.requests.append(
                    Request(
                        self.command,
                        url.path,
                        parse_qs(url.query),
                        self.headers.get("Authorization"),
                        self.rfile.read(length),
                        self.headers.get("Content-Type"),
                    )
                )
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    reply = Reply(
                        401,
                        json.dumps(
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "metadata": {},
                                "status": "Failure",
                                "message": "Unauthorized",
                                "reason": "Unauthorized",
                                "code": 401,
                            }
                        ).encode(),
                    )
                else:
                    reply = server.routes.get(
                        (self.command, url.path), Reply(404, b"404 page not found\n", "text/plain; charset=utf-8")
                    )
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

            do_GET = do_DELETE = do_POST = do_PATCH = _answer

        self._server = BackgroundServer(Handler)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return self._server.url

    def calls(self, method: str | None = None) -> list[Request]:
        """Requests received, optionally only those with ``method``."""
        return [r for r in self.requests if method is None or r.method == method]

    def close(self) -> None:
        """Stop serving."""
        self._server.close()


def write_kubeconfig(path: Path, server: str, namespace: str = "default", token: str = TOKEN) -> Path:
    """A kubeconfig with one context, ``recorded``, pointing at ``server`` with a bearer token."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "recorded",
                "clusters": [{"name": "recorded", "cluster": {"server": server}}],
                "users": [{"name": "tester", "user": {"token": token}}],
                "contexts": [
                    {"name": "recorded", "context": {"cluster": "recorded", "user": "tester", "namespace": namespace}}
                ],
            }
        )
    )
    return path
