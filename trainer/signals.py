"""SIGTERM and SIGINT (pod eviction, preemption, Ctrl-C): agree on a step across ranks, save, exit in time.

Each rank may see the signal at a slightly different moment, but all must save at the same step,
or their collectives stop matching and the group hangs. So ranks vote with one small all-reduce
on a separate gloo group, started without waiting at the end of step ``s`` and read at the end
of step ``s + 1``: every rank reads the same result, nobody blocks on it, and the device is never
synchronised for it. The decision therefore lands one step after the signal. Each rank votes
the number of the signal it received (0 for none) and the vote is the maximum, so the ranks also
agree on *how* they stop (SIGTERM, 15, wins over SIGINT, 2, when they saw different ones) and all
exit with the same status: ``128 + signal``, 143 after SIGTERM and 130 after SIGINT.

The signal is learned of through ``observe.stopping``, installed by ``python -m trainer`` before
anything slow: the handler only records the number (it takes no lock), and a deadline
thread ends the process with that status when the grace period runs out, even while the main
thread is stuck inside a collective or a save.
"""

from __future__ import annotations

import signal

import torch
import torch.distributed as dist

from observe import stopping

#: Exit status after a SIGTERM-triggered stop (128 + SIGTERM), which Kubeflow's ``ExitCode``
#: restart policy treats as retryable.
SIGTERM_EXIT_STATUS = stopping.exit_status(signal.SIGTERM)
#: Exit status after a SIGINT-triggered stop (Ctrl-C; 128 + SIGINT).
SIGINT_EXIT_STATUS = stopping.exit_status(signal.SIGINT)
#: The statuses of a stop on request, one per signal.
STOP_EXIT_STATUSES = (SIGTERM_EXIT_STATUS, SIGINT_EXIT_STATUS)


class StopRequest:
    """Turns SIGTERM or SIGINT into a step at which every rank stops, and a status all ranks exit with.

    Args:
        grace_seconds: time from the signal to a forced exit (status ``128 + signal``).
        rank: for log lines.
        group: a gloo process group for the vote (``None``: a new one; a collective, so every
            rank must construct ``StopRequest`` at the same point).
        checkpointing: a checkpoint directory is set (only for the forced-exit message).
    """

    def __init__(
        self, grace_seconds: float, rank: int, group: dist.ProcessGroup | None = None, checkpointing: bool = True
    ) -> None:
        self.grace_seconds = grace_seconds
        self.rank = rank
        self.checkpointing = checkpointing
        self.signals = stopping.install()
        self._group = group if group is not None else dist.new_group(backend="gloo")
        self._vote: torch.Tensor | None = None
        self._work: dist.Work | None = None

    def install(self) -> None:
        """Start the grace-period deadline (the handlers are in place since ``stopping.install``)."""
        self.signals.exit_after(self.grace_seconds, message=self._overrun)

    @property
    def requested(self) -> bool:
        """Whether this rank has received SIGTERM or SIGINT."""
        return self.signals.signum is not None

    def seconds_since_request(self) -> float | None:
        """Seconds since this rank's first stop signal, or ``None``."""
        return self.signals.seconds_since()

    def _ballot(self) -> torch.Tensor:
        return torch.tensor([self.signals.signum or 0], dtype=torch.int32)

    def agree_now(self) -> int:
        """Blocking vote (before the loop; a collective): the signal any rank got (0: none)."""
        vote = self._ballot()
        dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self._group)
        return int(vote.item())

    def poll(self) -> int:
        """Call once per step on every rank: the signal all ranks stop for after this step (0: go on).

        Returns the vote started by the previous call (so a signal before step ``s`` ends stops
        the group after step ``s + 1``), and starts this step's vote.
        """
        decided = 0
        if self._work is not None and self._vote is not None:
            self._work.wait()
            decided = int(self._vote.item())  # a CPU tensor: no device synchronisation
        self._vote = self._ballot()
        self._work = dist.all_reduce(self._vote, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        return decided

    def sleep(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, ending early on a stop signal (e.g. while lingering for a scrape);
        whether a stop signal came."""
        return bool(self.signals.wait(seconds))

    def close(self) -> None:
        """Wait for the vote in flight, so no collective is left pending at shutdown."""
        if self._work is not None:
            self._work.wait()
            self._work = None

    def _overrun(self, signum: int) -> str:
        what = "the checkpoint finished; exiting without it" if self.checkpointing else "the rank stopped; exiting now"
        return (
            f"rank {self.rank}: {stopping.signal_name(signum)} grace period of {self.grace_seconds:g} s "
            f"ran out before {what}"
        )
