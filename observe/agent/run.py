"""The running agent: a collection loop on its own timer publishing snapshots to the HTTP server.

Start-up order: bind the port (a taken port fails before anything else starts), then the
collection thread, which starts the collectors, takes the first snapshot at once and then
collects every ``interval`` seconds on a fixed schedule (a slow collection skips the ticks it
overran instead of piling up). The caller waits for the first snapshot (``wait_first``) before
it prints the URL, so ``/metrics`` answers as soon as the URL is out.

The main thread never calls NVML or reads ``/proc`` itself, so it stays free to act on a stop
signal however long a collection takes. ``stop`` is bounded: a collection stuck in the driver
is abandoned after ``STOP_JOIN_SECONDS`` (NVML is then not shut down: ``nvmlShutdown`` would
wait for the stuck call) and the process exits anyway; ``docs/agent.md`` gives the whole budget.
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

#: How long ``stop`` waits for a collection in progress (seconds) before abandoning it.
STOP_JOIN_SECONDS = 1.0
#: How often the HTTP server looks at its shutdown flag (seconds; ``stop`` waits up to this long).
SERVER_POLL_SECONDS = 0.1


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

    def __init__(
        self, settings: Settings, address: str, port: int, process_series: int = 20, command_label: bool = False
    ) -> None:
        self.settings = settings
        self.process_series = process_series
        self.command_label = command_label
        self.latest = Latest(settings.interval_seconds)
        self.http_errors = ServerErrors()
        self.server: ThreadingHTTPServer = make_server(address, port, self.latest, self.http_errors)
        self.sampler = Sampler(settings, extra_errors=self.http_errors.counts)
        self._stop = threading.Event()
        self._first = threading.Event()
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

    def start(self, wait: bool = True) -> None:
        """Serve, and start the collectors and collect (the first snapshot at once), on background threads.

        Args:
            wait: return only once the first snapshot is published; ``False`` returns at once
                (the command line then waits with ``wait_first``, watching for a stop signal).
        """
        self._loop = threading.Thread(target=self._collect_forever, name="collect", daemon=True)
        self._loop.start()
        self._serving = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": SERVER_POLL_SECONDS}, name="http", daemon=True
        )
        self._serving.start()
        if wait:
            self._first.wait()

    def wait_first(self, timeout: float | None = None) -> bool:
        """Block until the first snapshot is published (or ``timeout`` seconds); return whether it is."""
        return self._first.wait(timeout)

    def _collect_forever(self) -> None:
        if self._stop.is_set():
            return
        try:  # here, not on the caller's thread: opening NVML can hang in the driver too
            self.sampler.start()
        except Exception:  # noqa: BLE001 - serve what can be collected rather than nothing for good
            log.exception("starting the collectors failed; collecting what can be collected")
        interval = self.settings.interval_seconds
        next_tick = time.monotonic()
        while not self._stop.wait(max(0.0, next_tick - time.monotonic())):
            try:
                self.collect_once()
            except Exception:
                log.exception("collection failed; serving the previous snapshot")
            self._first.set()
            now = time.monotonic()
            next_tick += interval * max(1, int((now - next_tick) // interval) + 1)

    def stop(self) -> None:
        """Stop collecting and serving; release the kernel log, descriptors and (unless a collection
        is stuck in the driver) NVML. Returns within about ``SERVER_POLL_SECONDS`` +
        ``STOP_JOIN_SECONDS`` + the kernel-log watcher's poll period."""
        self._stop.set()
        if self._serving is not None:
            self.server.shutdown()
        self.server.server_close()
        stuck = False
        if self._loop is not None:
            self._loop.join(timeout=STOP_JOIN_SECONDS)
            stuck = self._loop.is_alive()
        if stuck:
            log.warning(
                "a collection is still inside a driver call after %g s; exiting without waiting "
                "for it (NVML is not shut down)",
                STOP_JOIN_SECONDS,
            )
        self.sampler.stop(release_nvml=not stuck)
