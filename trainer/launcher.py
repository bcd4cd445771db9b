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
- raises torchrun's ``SignalException`` for the *first* stop signal only: torchrun's own handler
  raises one per signal, and a second one (a burst: ``timeout``'s and then a user's) interrupts
  its wait for the ranks and leaves them running on their own. The handler takes no lock; it
  raises because that is the one way into torchrun's monitor loop, and torchrun is written for
  it (``PET_SIGNALS_TO_HANDLE``, the default of torchrun's ``--signals-to-handle``, keeps
  torchrun from putting its own back, and the handler is put back as the ranks are stopped);
- keeps a stop signal that comes while torch is still importing (``observe.stopping``) and
  then starts nothing; and passes it on to a rank only once that rank handles it (up to
  ``HANDLER_WAIT_SECONDS``): a rank signalled during Python's start-up would die of it.

A rank that fails (an exception, a signal, the OOM killer) ends torchrun with a
``ChildFailedError`` whose 28-line traceback names as "root cause" the rank that *reported* first,
often a healthy rank whose peer vanished (``Connection reset by peer``). This module prints one
line instead and exits with the failing rank's status (``failed_rank``): a rank killed by a signal
other than the stop signals torchrun itself sends (its peers fail because of it), else the first
to fail; with its first error line when it left one (``@record``'s error file), else the signal.

The ranks' statuses come from wrapping ``SubprocessContext._close`` of
``torch.distributed.elastic.multiprocessing.api`` (torch 2.13), the one place torchrun waits for
its workers; ``tests/e2e/test_stop_train.py`` would catch a torch that moved it. Success is
torchrun's own.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

from observe import stopping, supervise

#: The signals torchrun's agent handles itself here (its default adds SIGTERM and SIGINT).
TORCHRUN_OWN_SIGNALS = "SIGHUP,SIGQUIT"
#: How long a stop waits for ranks that are still starting to install their handlers (seconds).
HANDLER_WAIT_SECONDS = 2.0
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
    statuses = {
        r: stopping.exit_status(-s) if s is not None and -s in stopping.STOP_SIGNALS else s for r, s in statuses.items()
    }  # died of the stop signal itself: stopped all the same
    for local_rank, status in sorted(statuses.items()):
        if status not in clean:
            code = 1 if status is None else stopping.exit_status(-status) if status < 0 else status
            return code, f"torchrun: {stopping.signal_name(signum)}: local rank {local_rank} {describe(status)}"
    stopped = {s for s in statuses.values() if s}
    if statuses and not stopped:  # every rank had finished: the run is done
        return 0, None
    return (stopped.pop() if len(stopped) == 1 else stopping.exit_status(signum)), None


def _first_line(message: Any) -> str:
    """The first line of a ``ProcessFailure.message`` (a text, or ``@record``'s ``{"message": ...}``)."""
    text = message.get("message", "") if isinstance(message, dict) else str(message or "")
    return text.strip().splitlines()[0] if text.strip() else ""


def failed_rank(failures: dict[int, Any]) -> tuple[int, str]:
    """The exit status and the one line for a run that failed (``ChildFailedError.failures``: global
    rank -> ``ProcessFailure`` with ``local_rank``, ``exitcode``, ``timestamp``, ``message``).

    The failing rank: one killed by a signal that is not a stop signal (SIGKILL, SIGSEGV, SIGABRT:
    the others then fail or are stopped because of it), else the one that failed first. Its status
    is ``128 + N`` for signal N, else its exit code.
    """
    killed = [r for r, f in failures.items() if f.exitcode < 0 and -f.exitcode not in stopping.STOP_SIGNALS]
    rank = min(killed or failures, key=lambda r: (failures[r].timestamp, r))
    failure = failures[rank]
    if failure.exitcode < 0:
        status, what = (
            stopping.exit_status(-failure.exitcode),
            f"was killed by {stopping.signal_name(-failure.exitcode)}",
        )
    else:
        first = _first_line(failure.message)
        status = failure.exitcode
        what = f"exited with status {status}" + (
            f": {first}"
            if first and not first.startswith("To enable traceback")
            else " (its own output above says why)"
        )
    others = sorted(r for r in failures if r != rank)
    after = f"; rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} stopped after it" if others else ""
    return status, f"torchrun: rank {rank} (local rank {failure.local_rank}) {what}{after}"


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
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    raised = False

    def raise_once(signum: int, frame: object) -> None:  # main thread, between bytecodes; no lock
        nonlocal raised
        if not raised:
            raised = True
            raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))

    statuses: dict[int, int | None] = {}
    original_close = mp_api.SubprocessContext._close

    def close(self: Any, death_sig: signal.Signals, timeout: int = 30) -> None:
        if isinstance(sys.exc_info()[1], SignalException):
            for signum in stopping.STOP_SIGNALS:  # torchrun's main thread; even with --signals-to-handle
                signal.signal(signum, raise_once)  # listing them, no second signal interrupts the wait below
            supervise.wait_until_caught(  # a rank still in Python's start-up would die of the signal
                [h.proc.pid for h in self.subprocess_handlers.values() if h.proc.poll() is None],
                signal.SIGTERM,
                HANDLER_WAIT_SECONDS,
            )
        try:
            original_close(self, death_sig, timeout)
        finally:
            statuses.update({r: h.proc.returncode for r, h in self.subprocess_handlers.items()})

    mp_api.SubprocessContext._close = close  # type: ignore[method-assign]
    for name in ELASTIC_LOGGERS:
        logging.getLogger(name).addFilter(_DropWhileStopping())

    os.environ["PET_SIGNALS_TO_HANDLE"] = TORCHRUN_OWN_SIGNALS  # the default of torchrun's --signals-to-handle
    for signum in stopping.STOP_SIGNALS:  # from here on, before torchrun's rendezvous
        signal.signal(signum, raise_once)
    if early.signum is not None:  # it came while torch was importing: start nothing
        return stopping.exit_status(early.signum)
    try:
        torchrun.main(argv)
    except SignalException as exc:
        early.ignore_further()  # as the interpreter exits, a late signal would otherwise kill it (-15)
        status, line = run_status(exc.sigval, statuses)
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        return status
    except ChildFailedError as exc:
        early.ignore_further()
        status, line = failed_rank(exc.failures)
        print(line, file=sys.stderr, flush=True)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
