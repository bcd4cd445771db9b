"""The running agent: a collection loop on its own timer publishing snapshots to the HTTP server.

Start-up order: bind the port (a taken port fails before anything else starts), start the
collectors, take and publish the first snapshot (so ``/metrics`` answers as soon as the URL is
printed), then collect every ``interval`` seconds on a fixed schedule (a slow collection skips
the ticks it overran instead of piling up).
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import ThreadingHTTPServer

from observe.agent.exposition import render
from observe.agent.sampler import Sampler, Settings
from observe.agent.server import Latest, Published, ServerErrors, make_server

log = logging.getLogger(__name__)


class Agent:
    """One node agent.

    Args:
        settings: what to collect (``observe.agent.sampler.Settings``).
        address, port: where to serve (``port`` 0 picks a free port; see ``port``).
        process_series: processes with per-process series in ``/metrics``.
        command_label: put redacted command lines in ``/metrics`` labels (``exposition.render``).

    Raises:
        OSError: from the constructor, when ``address:port`` cannot be bound.
    """

    def __init__(self, settings: Settings, address: str, port: int, process_series: int = 20,
                 command_label: bool = False) -> None:
        self.settings = settings
        self.process_series = process_series
        self.command_label = command_label
        self.latest = Latest(settings.interval_seconds)
        self.http_errors = ServerErrors()
        self.server: ThreadingHTTPServer = make_server(address, port, self.latest, self.http_errors)
        self.sampler = Sampler(settings, extra_errors=self.http_errors.counts)
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._serving: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port actually bound."""
        return self.server.server_address[1]

    def collect_once(self) -> Published:
        """Collect, render and publish one snapshot; return it."""
        snapshot = self.sampler.sample()
        published = Published(snapshot, render(snapshot, self.process_series, self.command_label), time.monotonic())
        self.latest.publish(published)
        return published

    def start(self) -> None:
        """Start the collectors, publish a first snapshot, then collect and serve on background threads."""
        self.sampler.start()
        self.collect_once()
        self._loop = threading.Thread(target=self._collect_forever, name="collect", daemon=True)
        self._loop.start()
        self._serving = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.5},
                                         name="http", daemon=True)
        self._serving.start()

    def _collect_forever(self) -> None:
        interval = self.settings.interval_seconds
        next_tick = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_tick - time.monotonic())):
            try:
                self.collect_once()
            except Exception:
                log.exception("collection failed; serving the previous snapshot")
            now = time.monotonic()
            next_tick += interval * max(1, int((now - next_tick) // interval) + 1)

    def request_stop(self) -> None:
        """Make ``wait`` return (safe from a signal handler)."""
        self._stop.set()

    def wait(self) -> None:
        """Block until ``request_stop`` or ``stop`` is called."""
        self._stop.wait()

    def stop(self) -> None:
        """Stop collecting and serving; release NVML, the kernel log and descriptors."""
        self._stop.set()
        if self._serving is not None:
            self.server.shutdown()
        self.server.server_close()
        if self._loop is not None:
            self._loop.join(timeout=10)
        self.sampler.stop()
