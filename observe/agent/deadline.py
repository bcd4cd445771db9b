"""Calls that may hang (a GPU driver that stops answering), run where the caller can stop waiting.

A ``Worker`` is one daemon thread that runs the calls handed to it, in order. ``Worker.submit``
returns a ``Job`` at once; the caller waits for it up to a deadline (``Job.wait``) and, when the
deadline passes first, goes on without its result. A call that never returns holds only its own
worker: the worker stays ``busy`` and refuses new calls (``submit`` returns ``None``) until it
does, so one stuck GPU never queues up work or freezes the others. A blocked C call cannot be
interrupted from Python; this is the price of isolating it, one parked thread.

ctypes releases the GIL around foreign calls, so a worker stuck in the driver costs no CPU and
does not slow the other threads.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Job(Generic[T]):
    """One call handed to a ``Worker``."""

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._done = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        """Run the call, keeping its result or exception."""
        try:
            self._result = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the waiter by result()
            self._error = exc
        finally:
            self._done.set()

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (0 or less: not at all); whether the call has finished."""
        return self._done.wait(max(0.0, seconds)) if seconds > 0 else self._done.is_set()

    def result(self) -> T:
        """The call's return value, or its exception raised here (only after ``wait`` said finished)."""
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


class Worker:
    """A daemon thread running submitted calls one at a time.

    Args:
        name: the thread's name (shown by ``py-spy`` and in tracebacks).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._todo: queue.SimpleQueue[Job[object] | None] = queue.SimpleQueue()
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """Whether a call is queued or running."""
        return self._busy.is_set()

    def submit(self, call: Callable[[], T]) -> Job[T] | None:
        """Run ``call`` on this worker; ``None`` (nothing queued) while the previous call is unfinished."""
        if self._busy.is_set():
            return None
        job: Job[T] = Job(call)
        self._busy.set()
        self._todo.put(job)  # type: ignore[arg-type]
        return job

    def close(self) -> None:
        """Let the thread end after its current call (it is a daemon: a stuck one ends with the process)."""
        self._todo.put(None)

    def _run(self) -> None:
        while (job := self._todo.get()) is not None:
            try:
                job.run()
            finally:
                self._busy.clear()
