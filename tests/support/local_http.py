"""A local HTTP server on its own thread, for the tests' stand-in servers (the recorded API server,
the webhook receiver): 127.0.0.1, a free port, quiet, stopped with ``close``."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that keeps the test output free of access-log lines."""

    def log_message(self, *args: object) -> None:  # http.server's access log
        pass


class BackgroundServer:
    """Serves ``handler`` on 127.0.0.1 (a free port) on a daemon thread; over TLS with ``tls``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> None:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.scheme = "http"
        if tls is not None:  # the handshake happens in the request's thread, on its first read
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True, do_handshake_on_connect=False)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (``https`` over TLS)."""
        return f"{self.scheme}://127.0.0.1:{self._httpd.server_address[1]}"

    def close(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()
