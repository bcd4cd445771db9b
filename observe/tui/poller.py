"""The fan-in worker: a thread with its own asyncio event loop that refreshes a source on a timer.

The UI's event loop never waits on the network or parses a byte: each refresh runs here, and the
finished ``ClusterSnapshot`` is handed over with one thread-safe call. Refreshes that finish
while the UI is still busy are coalesced (the UI takes the latest). The refresh interval adapts
to the number of nodes (``adaptive_interval``) unless one is given.

With ``pace_collector`` the poller also paces Python's garbage collector (``CollectorPacing``).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import threading
import time
from array import array
from collections.abc import Callable
from typing import Protocol

from observe.sources.view import ClusterSnapshot

log = logging.getLogger(__name__)

#: Points of GPU history kept per GPU (one per refresh).
HISTORY_POINTS = 120


class Source(Protocol):
    """What the poller refreshes: ``observe.sources.direct.DirectSource`` and its kin."""

    @property
    def description(self) -> str:
        """What the status bar names as the source."""

    async def cycle(self, focus: str | None, deadline: float) -> ClusterSnapshot:
        """One refresh within ``deadline`` seconds, fetching ``focus``'s full snapshot."""

    def close(self) -> None:
        """Release connections."""


def adaptive_interval(nodes: int) -> float:
    """Seconds between refreshes for ``nodes`` nodes: 1 s up to 64 nodes, 2 s up to 4,096 (the TUI's
    target: 4,096 nodes of 8 GPUs refreshed every 2 s, each refresh within 1 s), then 2 s more per
    further 2,048 (at most 10 s). ``benchmarks/tui_fanin.py`` measures the refresh at these sizes;
    the rest of the interval is left to the terminal and the agents."""
    if nodes <= 64:
        return 1.0
    if nodes <= 4096:
        return 2.0
    return min(10.0, 2.0 + 2.0 * math.ceil((nodes - 4096) / 2048))


def deadline_for(interval: float) -> float:
    """A refresh's deadline: three quarters of the interval, at least one second."""
    return max(1.0, 0.75 * interval)


class GpuHistory:
    """Recent utilisation and memory shares per GPU, for the Node screen's sparklines.

    Kept in ``array('d')`` rings (NaN for unreadable): arrays hold no Python objects, so the
    garbage collector never walks them (8,192 GPUs at 1,024 nodes). Written by the poller thread,
    read by the UI thread under a lock (a read copies one GPU's history).
    """

    def __init__(self, points: int = HISTORY_POINTS) -> None:
        self._lock = threading.Lock()
        self._points = points
        self._util: dict[tuple[str, int], array] = {}
        self._memory: dict[tuple[str, int], array] = {}
        self._seen: dict[str, float] = {}

    def update(self, snapshot: ClusterSnapshot) -> None:
        """Append the GPUs of every node whose data is new since the last update."""
        nan = math.nan
        with self._lock:
            for node in snapshot.nodes:
                f = node.figures
                if f is None or node.time_unix is None or self._seen.get(node.name) == node.time_unix:
                    continue
                self._seen[node.name] = node.time_unix
                for index, util, memory in zip(f.gpu_indexes, f.gpu_util_ratios, f.gpu_memory_ratios, strict=False):
                    key = (node.name, index)
                    for series, value in ((self._util, util), (self._memory, memory)):
                        ring = series.get(key)
                        if ring is None:
                            ring = series[key] = array("d")
                        ring.append(nan if value is None else value)
                        if len(ring) > self._points:
                            del ring[0]

    def get(self, node: str, gpu: int) -> tuple[tuple[float | None, ...], tuple[float | None, ...]]:
        """``(utilisation, memory share)`` history of one GPU, oldest first (``None`` where unreadable)."""
        with self._lock:
            util, memory = self._util.get((node, gpu), ()), self._memory.get((node, gpu), ())
            return (
                tuple(None if math.isnan(v) else v for v in util),
                tuple(None if math.isnan(v) else v for v in memory),
            )


#: Seconds after handing a snapshot over that the paced full collection runs: the UI has drawn
#: the snapshot by then (some 50 ms at 4,096 nodes) and let go of the one before.
COLLECT_AFTER_SECONDS = 0.3
#: While paced, the number of young collections after which CPython would start a full one by
#: itself (its third threshold, 10 by default): never, in practice.
NEVER = 1 << 30


class CollectorPacing:
    """Full garbage collections only once per refresh, at a quiet moment; young ones as usual.

    CPython starts a full collection when allocations cross its thresholds, in whichever thread
    made them, and holds the GIL throughout: at 4,096 nodes one walks some 50,000 objects (10-30
    ms here), and one started by the allocations of a redraw added its time to the redraw's on
    the UI's event loop (stalls of 60-100 ms on the GPU grid, ``benchmarks/tui_fanin.py``). Paced,
    CPython still runs its young collections (a few milliseconds each, and they untrack the
    figures' tuples of numbers), but never a full one by itself: the poller thread runs one
    ``COLLECT_AFTER_SECONDS`` after handing each snapshot over, when the UI has drawn it and let
    go of the previous one, so that no redraw waits for a full collection and each walks one
    generation of nodes, not two. Old garbage lives at most one refresh interval (at most 10 s,
    ``adaptive_interval``); only cyclic garbage waits for it, the rest is freed by reference
    counting as before.

    ``start`` stops CPython's own full collections (remembering its thresholds), ``collect``
    runs one, ``stop`` puts the thresholds back.
    """

    def __init__(self) -> None:
        self._thresholds: tuple[int, int, int] | None = None

    def start(self) -> None:
        """No full collection but ``collect``'s until ``stop``."""
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            gc.set_threshold(self._thresholds[0], self._thresholds[1], NEVER)

    def collect(self) -> None:
        """One full collection now (on the poller thread, after a refresh was drawn)."""
        gc.collect()

    def stop(self) -> None:
        """CPython's own thresholds again."""
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None


class Poller:
    """Refreshes ``source`` on its own thread and hands each snapshot to ``deliver``.

    Args:
        source: what to refresh.
        deliver: called on the poller thread with each new snapshot (must be thread-safe, e.g.
            post a message to the app).
        interval: seconds between refresh starts; ``None`` adapts it to the node count.
        pace_collector: while the poller runs, Python's garbage collector runs only after each
            refresh (``CollectorPacing``); the app's own poller does, a poller in a test need not.
    """

    def __init__(
        self,
        source: Source,
        deliver: Callable[[ClusterSnapshot], None],
        interval: float | None = None,
        pace_collector: bool = False,
    ) -> None:
        self.pacing = CollectorPacing() if pace_collector else None
        self.source = source
        self.deliver = deliver
        self.fixed_interval = interval
        self.interval = interval or 1.0
        self.history = GpuHistory()
        self.focus: str | None = None
        self.cycles = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop = False
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="fsdp-observe-fanin", daemon=True)

    def start(self) -> None:
        """Start refreshing (the first refresh begins at once)."""
        if self.pacing is not None:
            self.pacing.start()
        self._thread.start()
        self._ready.wait(5)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after the refresh in progress and release the source's connections (and give the
        garbage collector back its own schedule)."""
        self._stop = True
        self.refresh_now()
        self._thread.join(timeout)
        if self.pacing is not None:
            self.pacing.stop()

    def refresh_now(self) -> None:
        """Start the next refresh now (thread-safe)."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def set_focus(self, node: str | None) -> None:
        """Fetch ``node``'s full snapshot from the next refresh on, and refresh now (thread-safe)."""
        self.focus = node
        self.refresh_now()

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._run(loop))
        finally:
            self.source.close()
            loop.close()

    async def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._wake = loop, asyncio.Event()
        self._ready.set()
        previous: ClusterSnapshot | None = None
        while not self._stop:
            started = time.monotonic()
            self._wake.clear()
            try:
                snapshot = await self.source.cycle(self.focus, deadline_for(self.interval))
            except Exception as exc:
                log.exception("refresh failed")
                snapshot = ClusterSnapshot(
                    time_unix=time.time(),
                    source=getattr(self.source, "description", ""),
                    nodes=previous.nodes if previous else (),
                    runs=previous.runs if previous else (),
                    errors=(f"refresh failed: {type(exc).__name__}: {exc}",),
                )
            previous = snapshot
            self.cycles += 1
            if self.fixed_interval is None:
                self.interval = adaptive_interval(len(snapshot.nodes))
            self.history.update(snapshot)
            if self._stop:
                break
            self.deliver(snapshot)
            if self.pacing is not None:
                await self._wait(min(COLLECT_AFTER_SECONDS, self.interval / 4))
                self.pacing.collect()
            await self._wait(self.interval - (time.monotonic() - started))

    async def _wait(self, seconds: float) -> None:
        """Until ``seconds`` have passed or ``refresh_now`` was called (it stays called)."""
        if seconds > 0 and self._wake is not None:
            try:
                await asyncio.wait_for(self._wake.wait(), seconds)
            except asyncio.TimeoutError:
                pass
