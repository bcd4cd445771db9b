"""The stall watchdog: a daemon thread in each rank that notices when the rank stops making progress,
marks it, and writes the costly evidence once per stall.

Progress is a completed step, a completed collective or a fetched batch (``RankForensics.progress``):
a validation pass or a checkpoint that runs collectives is progress; a rank blocked in a collective,
or spinning in its own code, is not. The threshold is ``max(floor, K x median step time)``:

- ``K = 3``: a steady FSDP step varies far less than 3x (two gloo ranks here, at load average 14.6:
  the slowest of 200 steps was 1.55-1.64x the median); and with the shipped intervals (a 15 s
  scrape, a 10 s evaluation of the hang group) a median step under 10 s still gives an alert within
  60 s of a hang: 30 s + up to 2 s for this watchdog's next look + 15 s + 10 s = 57 s
  (tests/dashboards/test_hang_budget.py adds it up);
- ``floor = 30 s`` (``FSDP_OBSERVE_STALL_SECONDS``): two scrape intervals, so one slow scrape never
  decides it, and far below gloo's 30 min and NCCL's 10 min collective timeouts.

Before the first step (loading, compiling) and after the loop ended, nothing counts as a stall: the
watchdog cannot tell a slow start from a stuck one (docs/hangs.md).

On a stall it writes, once, into the run's dump folder: ``stall-rank<R>.json`` (the ``/debug/state``
document, every thread's stack, Flight Recorder's last entries) and, in training, Flight Recorder's
full dump with stacks ``flight/fr-rank<R>`` for ``torchfrtrace``. Each tick it also re-arms the GIL
watch (``observe.training.stacks.GilWatch``), which writes the stacks when this thread itself cannot
run. Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from observe.training import flight
from observe.training.forensics import RankForensics
from observe.training.stacks import GilWatch, all_stacks

log = logging.getLogger(__name__)

STALL_SECONDS_ENV = "FSDP_OBSERVE_STALL_SECONDS"
#: ``max(FLOOR_SECONDS, K * median step)`` (see the module docstring for both values).
FLOOR_SECONDS = 30.0
K = 3.0
#: How often the watchdog looks (and re-arms the GIL watch).
TICK_SECONDS = 1.0
#: Flight Recorder entries kept in the stall file (the pickle keeps all).
STALL_FILE_ENTRIES = 200
#: Phases in which no progress is not a stall.
NOT_JUDGED = ("loading_weights", "restarting", "finished")


def floor_seconds(environ: dict[str, str] | None = None) -> float:
    """``FSDP_OBSERVE_STALL_SECONDS`` when set to a positive number, else ``FLOOR_SECONDS``."""
    raw = (os.environ if environ is None else environ).get(STALL_SECONDS_ENV, "")
    try:
        value = float(raw)
    except ValueError:
        return FLOOR_SECONDS
    return value if value > 0 else FLOOR_SECONDS


class StallWatchdog:
    """Watches one rank's ``RankForensics`` from a daemon thread.

    Args:
        forensics: the rank's evidence.
        directory: the run's dump folder (``observe.training.peers.dump_dir``).
        floor: the threshold's floor in seconds (``floor_seconds()``).
        tick: seconds between looks.
        clock: ``time.monotonic`` (injectable for tests).
        gil: the GIL watch (default: one writing ``rank<R>.gil.txt`` in ``directory``).
    """

    def __init__(
        self,
        forensics: RankForensics,
        directory: Path,
        floor: float = FLOOR_SECONDS,
        tick: float = TICK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        gil: GilWatch | None = None,
    ) -> None:
        self.forensics = forensics
        self.directory = directory
        self.floor = floor
        self.tick = tick
        self.clock = clock
        self.rank = int(forensics.identity["rank"])
        self.gil = gil
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[Any, ...] | None = None
        self._since = clock()
        self.evidence_written = 0

    def threshold(self) -> float:
        """``max(floor, K x median step time)`` in seconds."""
        median = self.forensics.median_step_seconds()
        return max(self.floor, K * median) if median is not None else self.floor

    def start(self) -> None:
        """Arm the GIL watch (so a GIL taken before the first look is caught too), then start the
        daemon thread (``fsdp-observe-watchdog``)."""
        if self.gil is not None:
            self.gil.arm()
        self._thread = threading.Thread(target=self._run, name="fsdp-observe-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and disarm the GIL watch."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.tick + 1)
        if self.gil is not None:
            self.gil.disarm()

    def _run(self) -> None:
        while not self._stop.wait(self.tick):
            try:
                self.look()
            except Exception:  # noqa: BLE001 - the watchdog must never take training down
                log.debug("stall watchdog look failed", exc_info=True)

    def look(self) -> None:
        """One look: re-arm the GIL watch, note progress, and mark (and record) a stall."""
        threshold = self.threshold()
        self.forensics.stall_threshold = threshold
        if self.gil is not None:
            self.gil.seconds = threshold
            self.gil.arm()
        now = self.clock()
        progress = self.forensics.progress()
        if progress != self._last:
            self._last, self._since = progress, now
            if self.forensics.stall is not None and self.forensics.stall.get("stalled"):
                self.forensics.stall = {**self.forensics.stall, "stalled": False, "resumed_unix": time.time()}
            return
        phase = progress[3]
        judged = phase not in NOT_JUDGED and self.forensics.loop_ended is None and progress[0] > 0
        if not judged or now - self._since <= threshold:
            return
        if self.forensics.stall is not None and self.forensics.stall.get("stalled"):
            return
        since_unix = time.time() - (now - self._since)
        self.forensics.stall = {"stalled": True, "since_unix": since_unix, "threshold_seconds": threshold}
        self.forensics.stall.update(self.record(phase))

    def record(self, phase: str) -> dict[str, str]:
        """Write the stall's evidence files; return their paths (``evidence``, ``flight_recorder``)."""
        paths: dict[str, str] = {}
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            doc = self.forensics.state_json()
            doc["threads"] = {name: [f.to_json() for f in frames] for name, frames in all_stacks().items()}
            entries = flight.entries()
            if entries:
                doc["flight_recorder_entries"] = entries[-STALL_FILE_ENTRIES:]
            path = self.directory / f"stall-rank{self.rank}.json"
            path.write_text(json.dumps(doc, default=str), encoding="utf-8")
            paths["evidence"] = str(path)
            if phase == "training":
                (self.directory / "flight").mkdir(exist_ok=True)
                fr = flight.write_dump(self.directory / "flight", self.rank)
                if fr is not None:
                    paths["flight_recorder"] = str(fr)
            self.evidence_written += 1
        except OSError as exc:
            log.warning("fsdp-observe: rank %s: stall evidence not written to %s: %s", self.rank, self.directory, exc)
        return paths
