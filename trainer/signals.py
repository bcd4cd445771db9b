"""SIGTERM (pod eviction, preemption): agree on a step across ranks, save, exit in time.

Each rank may see SIGTERM at a slightly different moment, but all must save at the same step,
or their collectives stop matching and the group hangs. So ranks vote with one small
all-reduce on a separate gloo group, started without waiting at the end of step ``s`` and
read at the end of step ``s + 1``: every rank reads the same result, nobody blocks on it, and
the device is never synchronised for it. The decision therefore lands one step after the
signal.

A watchdog thread learns of the signal through ``signal.set_wakeup_fd`` (written at C level
even while the main thread is stuck inside a collective or a save) and ends the process with
status 143 when the grace period runs out, so the rank never outlives its grace period.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

#: Exit status after a SIGTERM-triggered save (128 + SIGTERM), which Kubeflow's ``ExitCode``
#: restart policy treats as retryable.
SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


class StopRequest:
    """Turns SIGTERM into a step at which every rank stops.

    Args:
        grace_seconds: time from the signal to a forced exit (status 143).
        rank: for log lines.
        group: a gloo process group for the vote (``None``: a new one; a collective, so every
            rank must construct ``StopRequest`` at the same point).
    """

    def __init__(self, grace_seconds: float, rank: int, group: dist.ProcessGroup | None = None) -> None:
        self.grace_seconds = grace_seconds
        self.rank = rank
        self.requested_at: float | None = None
        self._requested = threading.Event()
        self._group = group if group is not None else dist.new_group(backend="gloo")
        self._vote: torch.Tensor | None = None
        self._work = None
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)

    def install(self) -> None:
        """Handle SIGTERM in this process (main thread only) and start the watchdog."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        threading.Thread(target=self._watchdog, name="sigterm-watchdog", daemon=True).start()

    @property
    def requested(self) -> bool:
        """Whether this rank has received SIGTERM."""
        return self.requested_at is not None

    def seconds_since_request(self) -> float | None:
        """Seconds since this rank's SIGTERM, or ``None``."""
        return None if self.requested_at is None else time.monotonic() - self.requested_at

    def agree_now(self) -> bool:
        """Blocking vote: has any rank been asked to stop? (Before the loop; a collective.)"""
        vote = torch.tensor([int(self.requested)], dtype=torch.int32)
        dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self._group)
        return bool(vote.item())

    def poll(self) -> bool:
        """Call once per step on every rank: whether all ranks stop after this step.

        Returns the vote started by the previous call (so a signal before step ``s`` ends
        stops the group after step ``s + 1``), and starts this step's vote.
        """
        decided = False
        if self._work is not None:
            self._work.wait()
            decided = bool(self._vote.item())  # a CPU tensor: no device synchronisation
        self._vote = torch.tensor([int(self.requested)], dtype=torch.int32)
        self._work = dist.all_reduce(self._vote, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        return decided

    def sleep(self, seconds: float) -> None:
        """Sleep up to ``seconds``, ending early on SIGTERM (e.g. while lingering for a scrape)."""
        self._requested.wait(seconds)

    def close(self) -> None:
        """Wait for the vote in flight, so no collective is left pending at shutdown."""
        if self._work is not None:
            self._work.wait()
            self._work = None

    # -- signal side --------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:  # runs in the main thread, between bytecodes
        self._mark()

    def _mark(self) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()
        self._requested.set()

    def _watchdog(self) -> None:
        """Wait for SIGTERM's byte on the wakeup socket, then enforce the grace period."""
        while True:
            try:
                data = self._reader.recv(64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                self._mark()
                break
        assert self.requested_at is not None  # set by _mark() before the loop above ends
        deadline = self.requested_at + self.grace_seconds
        time.sleep(max(0.0, deadline - time.monotonic()))
        print(f"rank {self.rank}: SIGTERM grace period of {self.grace_seconds:g} s ran out before the "
              f"checkpoint finished; exiting without it", file=sys.stderr, flush=True)
        os._exit(SIGTERM_EXIT_STATUS)
