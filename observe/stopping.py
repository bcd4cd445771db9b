"""How a process of this project learns that it should stop: SIGTERM and SIGINT, taking no lock.

A Python signal handler runs in the main thread *between two bytecodes*, wherever the main
thread happens to be, including inside ``threading.Event.wait`` holding the Event's lock, or in
the middle of a ``print`` holding the stream's buffer lock. A handler that sets an ``Event``,
puts to a ``Queue``, logs or prints can therefore block on a lock its own thread holds, and the
process never exits (the node agent once ignored every SIGTERM after the second one that way).

So the handler here only stores the signal number in two plain attributes. CPython's C-level
handler also writes the number to the wakeup descriptor (``signal.set_wakeup_fd``) at once,
even while the main thread is stuck inside a C call; a daemon thread, ``stop-watch``, reads that
descriptor and does everything else from an ordinary thread, where taking a lock is safe: it
notes the time, sets ``requested`` (a ``threading.Event`` the handler never touches), calls the
listeners (e.g. forward the signal to a child process, close the TUI) and, when a grace period
is set, ends the process with ``os._exit`` once it runs out, so a process never outlives its
grace period whatever its main thread is doing.

There is one set of handlers and one wakeup descriptor per process, so ``install`` returns the
one ``StopSignals`` of the process (installing it the first time, from the main thread).
Signals other than the ones asked for (a TUI's SIGWINCH, say) also reach the wakeup descriptor;
they are ignored here. Standard library only.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

#: The signals that stop every long-running command of this project.
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


def exit_status(signum: int) -> int:
    """The shell's exit status for a process stopped by ``signum``: ``128 + signum`` (POSIX shells;
    130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, ``SIGINT`` for 2, ``signal N`` for a number Python has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


Listener = Callable[[int], None]


class StopSignals:
    """The stop signals of this process, recorded without a lock; see the module docstring.

    Use ``install()`` (not the constructor) to get the process's one instance.

    Attributes:
        signum: the first stop signal received (``None`` before any). Set by the handler and
            by the watch thread, whichever runs first; read it from any thread.
        count: how many stop signals the Python handler has run for (a burst of several counts
            each one it saw; the kernel merges a signal sent again before it is handled).
        requested_at: ``time.monotonic()`` when the watch thread saw the first one.
        requested: set (by the watch thread) once a stop signal arrived.
    """

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.signals = tuple(int(s) for s in signals)
        self.signum: int | None = None
        self.count = 0
        self.requested_at: float | None = None
        self.requested = threading.Event()
        self._listeners: list[Listener] = []
        self._listeners_lock = threading.Lock()  # taken by ordinary threads only, never by the handler
        self._fired = False
        self._reader = self._writer = -1
        self._previous: dict[int, object] = {}
        self._previous_wakeup = -1

    # -- the signal side: plain attribute stores only ---------------------------------------------

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:
            self.signum = signum
        self.count += 1

    # -- set up ------------------------------------------------------------------------------------

    def _install(self) -> None:
        self._reader, self._writer = os.pipe()
        os.set_blocking(self._writer, False)  # set_wakeup_fd needs a non-blocking descriptor
        os.set_inheritable(self._reader, False)
        os.set_inheritable(self._writer, False)
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handler)
        self._previous_wakeup = signal.set_wakeup_fd(self._writer, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="stop-watch", daemon=True).start()

    def uninstall(self) -> None:
        """Restore the handlers and wakeup descriptor found at install (main thread; for tests that
        install in their own process). The watch thread ends when its descriptor closes."""
        global _installed
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]
        signal.set_wakeup_fd(self._previous_wakeup)
        os.close(self._writer)
        _installed = None

    def ignore_further(self) -> None:
        """Ignore the stop signals from now on (main thread only), once the stop is under way.

        A late signal must not kill a process that is already stopping: as the interpreter
        finalises it puts back the default action (death by the signal, status -15 / -2) for
        every handler Python installed, but leaves an ignored signal ignored. The grace deadline
        of ``exit_after`` still applies.
        """
        for signum in self.signals:
            signal.signal(signum, signal.SIG_IGN)

    # -- the waiting side ----------------------------------------------------------------------------

    @property
    def name(self) -> str | None:
        """``SIGTERM`` / ``SIGINT`` for the first stop signal, ``None`` before any."""
        return None if self.signum is None else signal_name(self.signum)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop signal arrived (or ``timeout`` seconds passed); return whether one did."""
        return self.requested.wait(timeout)

    def seconds_since(self) -> float | None:
        """Seconds since the first stop signal, or ``None``."""
        return None if self.requested_at is None else time.monotonic() - self.requested_at

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(signum)`` once, on the watch thread, when the first stop signal arrives
        (at once, on this thread, when one already has). It runs on an ordinary thread: it may
        take locks, but should be quick (later listeners and the grace deadline wait for it)."""
        with self._listeners_lock:
            fired = self._fired
            if not fired:
                self._listeners.append(listener)
        if fired and self.signum is not None:
            listener(self.signum)

    def exit_after(
        self,
        grace_seconds: float,
        message: Callable[[int], str] | None = None,
        status: Callable[[int], int] = exit_status,
    ) -> None:
        """Once a stop signal arrived, end the process ``grace_seconds`` after it with
        ``os._exit(status(signum))`` unless it has exited by then.

        Args:
            grace_seconds: seconds from the first stop signal (also when it came before this call).
            message: ``message(signum)`` is written to stderr (a raw ``os.write``, no lock) just
                before the forced exit.
            status: the exit status for the signal (default ``128 + signum``).
        """

        def enforce(_: int) -> None:
            threading.Thread(
                target=self._deadline, args=(grace_seconds, message, status), name="stop-deadline", daemon=True
            ).start()

        self.add_listener(enforce)

    def _deadline(
        self, grace_seconds: float, message: Callable[[int], str] | None, status: Callable[[int], int]
    ) -> None:
        started = self.requested_at if self.requested_at is not None else time.monotonic()
        time.sleep(max(0.0, started + grace_seconds - time.monotonic()))
        signum = self.signum if self.signum is not None else signal.SIGTERM
        if message is not None:
            try:
                os.write(2, (message(signum).rstrip("\n") + "\n").encode("utf-8", "replace"))
            except OSError:
                pass
        os._exit(status(signum))

    # -- the watch thread ---------------------------------------------------------------------------

    def _watch(self) -> None:
        while True:
            try:
                data = os.read(self._reader, 64)
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                return
            if not data:  # the write end was closed (uninstall)
                os.close(self._reader)
                return
            for signum in data:
                if signum in self.signals:
                    self._note(signum)

    def _note(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        if self.requested.is_set():
            return
        self.requested_at = time.monotonic()
        self.requested.set()
        with self._listeners_lock:
            self._fired = True
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            try:
                listener(self.signum)
            except Exception as exc:  # noqa: BLE001 - one bad listener must not stop the others or the deadline
                try:
                    os.write(2, f"warning: stopping: {type(exc).__name__}: {exc}\n".encode("utf-8", "replace"))
                except OSError:
                    pass


_installed: StopSignals | None = None


def install(signals: tuple[int, ...] = STOP_SIGNALS) -> StopSignals:
    """The process's ``StopSignals``: installs the handlers and the watch thread on the first call.

    Call it from the main thread, as early as the command can (a stop signal that arrives before
    it gets Python's default: SIGTERM kills, SIGINT raises ``KeyboardInterrupt``).

    Raises:
        ValueError: the first call is not on the main thread (``signal.signal``'s rule).
        RuntimeError: it was installed before for other signals.
    """
    global _installed
    if _installed is None:
        stop = StopSignals(signals)
        stop._install()
        _installed = stop
    elif set(int(s) for s in signals) != set(_installed.signals):
        raise RuntimeError(f"stop signals already installed for {_installed.signals}, asked for {signals}")
    return _installed
