"""Switching on a rank's hang and straggler forensics: the collective tracker, the rank's evidence,
its registration with the node's other ranks, and the stall watchdog (with its GIL watch).

Every entry point calls ``start`` once per rank (``TrainingMetrics`` does it for all four). It is on
by default; ``FSDP_OBSERVE_COLLECTIVES=0`` switches it off (nothing is wrapped, the ``/debug/`` pages
answer 404, the forensics series are absent). It needs ``torch`` already imported (it is never
imported here): a process without torch gets ``None``.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from observe.training import collectives, peers
from observe.training.forensics import RankForensics, gpu_index
from observe.training.stacks import GilWatch
from observe.training.watchdog import StallWatchdog, floor_seconds

log = logging.getLogger(__name__)


@dataclass
class HangWatch:
    """A rank's running forensics: its evidence and its watchdog."""

    forensics: RankForensics
    watchdog: StallWatchdog | None

    def stop(self) -> None:
        """Stop the watchdog (at ``close``); the evidence stays readable."""
        if self.watchdog is not None:
            self.watchdog.stop()


def start(
    identity: dict[str, Any],
    phase: Callable[[], str],
    step: Callable[[], int],
    watchdog: bool = True,
    planned_steps: int | None = None,
) -> HangWatch | None:
    """Start the forensics of this rank; ``None`` when switched off or torch is not imported.

    Args:
        identity: ``run_id``, ``rank``, ``local_rank``, ``world_size``, ``node``, ``restarts``,
            ``port`` and, on CUDA, ``gpu_uuid``.
        phase, step: read the rank's phase and last step.
        watchdog: start the stall watchdog thread (off for a rank that does not serve).
        planned_steps: the run's last step, when known (the loop ends there).
    """
    torch = sys.modules.get("torch")
    if torch is None or not collectives.enabled():
        return None
    tracker = collectives.install(torch)
    ident = {k: v for k, v in identity.items() if v is not None}
    # faulthandler names threads by this id (``Thread 0x00007f...``): the GIL file's training thread
    ident["thread"] = f"0x{threading.main_thread().ident or 0:016x}"
    index = gpu_index()
    if index is not None:
        ident["gpu_index"] = index
    forensics = RankForensics(tracker, ident, phase, step)
    forensics.planned_steps = planned_steps
    directory = peers.dump_dir(str(identity.get("run_id", "")))
    dog = None
    try:
        peers.register(directory, forensics.identity)
        forensics.peers = lambda: peers.read_peers(directory, forensics.identity)
    except OSError as exc:
        log.warning("fsdp-observe: the node's ranks cannot vouch for each other (%s): %s", directory, exc)
    if watchdog:
        gil = GilWatch(peers.gil_file(directory, int(identity["rank"])), floor_seconds())
        dog = StallWatchdog(forensics, directory, floor=floor_seconds(), gil=gil)
        dog.start()
    return HangWatch(forensics, dog)
