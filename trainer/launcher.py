"""``python -m trainer.launcher``: torchrun (``torch.distributed.run``, the same flags) with a quiet stop
whose exit status is the run's. ``fsdp-observe train`` and ``demo`` start the ranks through it.

torchrun turns SIGTERM and SIGINT into a ``SignalException`` (its handler raises it), sends the
signal on to every rank (each in its own session), waits for them up to ``--shutdown-timeout``
(SIGKILL after) and then dies of that exception: a 25-line traceback and exit status 1, for a
stop the ranks handled well. Around it, this module

- exits with the ranks' own status: 143 after SIGTERM, 130 after SIGINT when every rank stopped
  so (``trainer.signals``), otherwise the first other status a rank had (e.g. 137 for a rank
  SIGKILLed at the shutdown timeout), with one line naming that rank;
- drops torchrun's own warnings while it handles the stop (rank 0 prints the line that says
  what happened): records of WARNING and below logged while a ``SignalException`` is being
  handled;
- ignores further stop signals once it is stopping the ranks: a second signal would interrupt
  torchrun's wait for them and leave them running on their own;
- keeps a stop signal that comes while torch is still importing (``observe.stopping``) and
  then starts nothing.

The ranks' statuses come from wrapping ``SubprocessContext._close`` of
``torch.distributed.elastic.multiprocessing.api`` (torch 2.13), the one place torchrun waits for
its workers; ``tests/e2e/test_stop_train.py`` would catch a torch that moved it. Every other
outcome (success, a failed rank) is torchrun's own.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

from observe import stopping

#: torchrun's loggers whose warnings a stop makes redundant.
ELASTIC_LOGGERS = ("torch.distributed.elastic.agent.server.api", "torch.distributed.elastic.multiprocessing.api")


def describe(status: int | None) -> str:
    """What a rank's ``Popen.returncode`` says, in words (``None``: still running when abandoned)."""
    if status is None:
        return "did not exit"
    if status < 0:
        return f"was killed by {stopping.signal_name(-status)}"
    return f"exited with status {status}"


def run_status(signum: int, statuses: dict[int, int | None]) -> tuple[int, str | None]:
    """The launcher's exit status after torchrun stopped its ranks for ``signum``, and a line to
    print when some rank did not stop cleanly.

    Args:
        signum: the signal torchrun received.
        statuses: local rank -> ``Popen.returncode`` after torchrun's shutdown (negative: the
            signal that killed it; ``None``: abandoned while running).

    Returns:
        ``128 + signal`` of the ranks when every rank stopped on a signal or had finished (0 when
        all had finished); otherwise the first other rank's status (``128 + N`` when killed by signal N) and a line.
    """
    clean = (0, stopping.exit_status(signal.SIGTERM), stopping.exit_status(signal.SIGINT))
    for local_rank, status in sorted(statuses.items()):
        if status not in clean:
            code = 1 if status is None else stopping.exit_status(-status) if status < 0 else status
            return code, f"torchrun: {stopping.signal_name(signum)}: local rank {local_rank} {describe(status)}"
    stopped = {s for s in statuses.values() if s}
    if statuses and not stopped:  # every rank had finished: the run is done
        return 0, None
    return (stopped.pop() if len(stopped) == 1 else stopping.exit_status(signum)), None


class _DropWhileStopping(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from torch.distributed.elastic.multiprocessing import SignalException

        return record.levelno > logging.WARNING or not isinstance(sys.exc_info()[1], SignalException)


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv``; return the run's exit status (see the module docstring)."""
    early = stopping.install()
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing import api as mp_api

    statuses: dict[int, int | None] = {}
    original_close = mp_api.SubprocessContext._close

    def close(self: Any, death_sig: signal.Signals, timeout: int = 30) -> None:
        if isinstance(sys.exc_info()[1], SignalException):
            for signum in stopping.STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)  # torchrun's main thread: the one that may
        try:
            original_close(self, death_sig, timeout)
        finally:
            statuses.update({r: h.proc.returncode for r, h in self.subprocess_handlers.items()})

    mp_api.SubprocessContext._close = close  # type: ignore[method-assign]
    for name in ELASTIC_LOGGERS:
        logging.getLogger(name).addFilter(_DropWhileStopping())
    for signum in stopping.STOP_SIGNALS:  # from here on torchrun's own handler, before its rendezvous
        signal.signal(signum, mp_api._terminate_process_handler)
    if early.signum is not None:  # it came while torch was importing: start nothing
        return stopping.exit_status(early.signum)
    try:
        torchrun.main(argv)
    except SignalException as exc:
        status, line = run_status(exc.sigval, statuses)
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
