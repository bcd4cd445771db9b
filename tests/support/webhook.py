"""A local HTTP receiver for Alertmanager's webhook notifications: it keeps every POSTed payload."""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.support.local_http import BackgroundServer, QuietHandler


class WebhookReceiver:
    """Serves on 127.0.0.1 (a free port) and records ``(path, payload)`` of every POST.

    Alertmanager's webhook payload (version 4): ``receiver``, ``status``, ``groupLabels``,
    ``commonLabels``, ``commonAnnotations``, ``alerts`` (each with ``status``, ``labels``,
    ``annotations``, ``startsAt``, ``endsAt``, ``fingerprint``), ``groupKey``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[tuple[str, dict[str, Any]]] = []
        receiver = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's hook
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver._received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = BackgroundServer(Handler)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return self._server.url

    def received(self) -> list[tuple[str, dict[str, Any]]]:
        """Every notification so far, oldest first."""
        with self._lock:
            return list(self._received)

    def close(self) -> None:
        """Stop serving."""
        self._server.close()
