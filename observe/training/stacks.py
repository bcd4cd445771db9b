"""A rank's Python stacks, read from its own exporter threads, and a GIL watch for when they cannot run.

``thread_stack`` reads another thread's frames with ``sys._current_frames()`` (about 7 µs): this
works while the training thread is blocked in a collective, because ``Work.wait`` releases the GIL.
It cannot work while the training thread holds the GIL (a long C call such as a catastrophic regex):
no other Python thread runs then, the rank's HTTP server included. ``GilWatch`` covers that case with
``faulthandler.dump_traceback_later``, whose watchdog is a C thread: the stall watchdog re-arms it
every second, so it fires only when Python threads have been starved for ``seconds``, and then writes
every thread's stack to this rank's file in the dump folder. That file is served by the other ranks
of the node (``observe.training.debug``), which are blocked in a collective and still answer.
``faulthandler`` is process-wide: a program that uses ``dump_traceback_later`` itself loses it while
fsdp-observe is armed (docs/hangs.md). Standard library only.
"""

from __future__ import annotations

import faulthandler
import linecache
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: Frames kept per stack, innermost last (a deep FSDP backward is about 60).
MAX_FRAMES = 80


@dataclass(frozen=True)
class Frame:
    """One frame: file, line number, function, and the source line (stripped; ``""`` if unknown)."""

    file: str
    line: int
    function: str
    code: str

    def to_json(self) -> list[object]:
        """``[file, line, function, code]``."""
        return [self.file, self.line, self.function, self.code]

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}" + (f": {self.code}" if self.code else "")


#: Files whose frames are left out of stacks: fsdp-observe's own collective wrappers, which sit
#: between the caller and ``torch.distributed`` and say nothing about where the rank is.
HIDDEN: set[str] = set()


def thread_stack(ident: int | None = None) -> list[Frame]:
    """The stack of thread ``ident`` (default: the main thread), outermost first, without ``HIDDEN``
    files' frames; ``[]`` when the thread is gone. Source lines come from ``linecache``."""
    if ident is None:
        ident = threading.main_thread().ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    frames: list[Frame] = []
    while frame is not None and len(frames) < MAX_FRAMES:
        code = frame.f_code
        if code.co_filename in HIDDEN:
            frame = frame.f_back
            continue
        frames.append(
            Frame(
                code.co_filename,
                frame.f_lineno,
                code.co_name,
                linecache.getline(code.co_filename, frame.f_lineno).strip(),
            )
        )
        frame = frame.f_back
    frames.reverse()
    return frames


def all_stacks() -> dict[str, list[Frame]]:
    """Every thread's stack, keyed ``"<name> (<ident>)"``."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return {f"{names.get(ident, 'thread')} ({ident})": thread_stack(ident) for ident in sys._current_frames()}


class GilWatch:
    """Writes every thread's stack to ``path`` when Python threads have been starved ``seconds``.

    Args:
        path: the rank's GIL file (appended to; each firing starts with faulthandler's header).
        seconds: how long the GIL must be held before the C watchdog writes the stacks.
    """

    def __init__(self, path: Path, seconds: float) -> None:
        self.path = path
        self.seconds = seconds
        self._file: IO[str] | None = None

    def arm(self) -> None:
        """(Re-)arm the C watchdog for ``seconds`` from now; call it at least every ``seconds / 2``."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the C thread
        faulthandler.dump_traceback_later(self.seconds, repeat=False, file=self._file, exit=False)

    def fired(self) -> str | None:
        """The stacks the watchdog wrote, or ``None`` when it never fired."""
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        return text or None

    def disarm(self) -> None:
        """Cancel the watchdog and close the file."""
        faulthandler.cancel_dump_traceback_later()
        if self._file is not None:
            self._file.close()
            self._file = None
