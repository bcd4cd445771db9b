"""XID errors as they happen: a kernel-log follower on its own thread, and the store it feeds.

The watcher reads ``/dev/kmsg`` (the kernel ring buffer, from its oldest record, so XIDs logged
before the agent started are counted too) or, with ``--kernel-log``, a file it follows like
``tail -F`` (it reopens a rotated or truncated file). Each line goes through
``observe.xid.KernelLogParser``; a malformed line is a parse error, never a stop. When the kernel
log cannot be opened (``/dev/kmsg`` needs CAP_SYSLOG where ``kernel.dmesg_restrict=1``), the
watcher says so once and the agent falls back to NVML's XidCriticalError events, which carry
fewer XIDs (79, 119 and 120, among others, only reach the kernel log). Both sources are never
used together, so one XID is never counted twice.

Text in an event that a process controls (its name, the message, the raw line) is made safe by
``observe.agent.redact`` before it is stored.

With a cursor (``observe.agent.xid_cursor``, ``--state-dir``) a restart resumes where the last
run stopped: ``/dev/kmsg`` records already counted in this boot are skipped by sequence number, a
file is read on from the last whole line, and the counts continue from the saved ones.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import select
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from observe.agent.redact import safe_text
from observe.agent.xid_cursor import XidCursor, kmsg_sequence
from observe.model import XidEvent
from observe.xid import KernelLogParser

log = logging.getLogger(__name__)

KMSG = "/dev/kmsg"
#: Recent events kept for ``/snapshot``.
RECENT_EVENTS = 100
#: Longest exported kernel message / raw line, in characters.
MAX_MESSAGE_CHARS = 512


def exportable(event: XidEvent) -> XidEvent:
    """``event`` with its process name, message and raw line redacted, escaped and cut."""
    return dataclasses.replace(
        event, process=None if event.process is None else safe_text(event.process),
        message=safe_text(event.message, MAX_MESSAGE_CHARS), raw=safe_text(event.raw, MAX_MESSAGE_CHARS))


class XidStore:
    """Recent XID events and counts per (PCI bus, code, severity); safe to share between threads.

    Args:
        keep: how many recent events to keep.
    """

    def __init__(self, keep: int = RECENT_EVENTS) -> None:
        self._lock = threading.Lock()
        self._recent: deque[XidEvent] = deque(maxlen=keep)
        self._counts: Counter[tuple[str | None, int, str]] = Counter()
        self._uuids: dict[str | None, str] = {}
        #: Called with each event as it is counted (outside the lock; must not block).
        self.listeners: list[Callable[[XidEvent], None]] = []

    def add(self, event: XidEvent) -> None:
        """Count ``event`` (the same XID twice counts twice) and keep it among the recent ones."""
        event = exportable(event)
        with self._lock:
            self._recent.append(event)
            self._counts[(event.pci_bus, event.xid, event.severity)] += 1
            if event.gpu_uuid:
                self._uuids.setdefault(event.pci_bus, event.gpu_uuid)
        for listener in self.listeners:
            listener(event)

    def view(self) -> tuple[list[XidEvent], dict[tuple[str | None, int, str], int], dict[str | None, str]]:
        """Copies of (recent events oldest first, counts, PCI bus -> UUID the events named)."""
        with self._lock:
            return list(self._recent), dict(self._counts), dict(self._uuids)

    def restore(self, counts: dict[tuple[str | None, int, str], int], uuids: dict[str | None, str]) -> None:
        """Start from counts a previous run of the agent saved (``observe.agent.xid_cursor``)."""
        with self._lock:
            self._counts.update(counts)
            for bus, uuid in uuids.items():
                self._uuids.setdefault(bus, uuid)


class KernelLogWatcher:
    """Follows the kernel log on a daemon thread and adds every XID it finds to ``store``.

    Args:
        store: where events go.
        node: node name put on events.
        path: a log file to follow instead of ``kmsg``.
        kmsg: the kernel ring buffer device.
        boot_time: Unix time of boot, to date ``/dev/kmsg`` records.
        poll_seconds: how often to look for new lines when there are none.
        cursor: resume from and save to this (``None``: read everything, keep nothing).

    Attributes:
        status: ``ok`` while reading, else why the kernel log cannot be read.
        source: the path being read.
    """

    def __init__(self, store: XidStore, node: str = "", path: str | None = None, kmsg: str = KMSG,
                 boot_time: float | None = None, poll_seconds: float = 0.5, cursor: XidCursor | None = None) -> None:
        self.store = store
        self.cursor = cursor
        self.parser = KernelLogParser(node)
        self.source = path or kmsg
        self.follow_file = path is not None
        self.boot_time = boot_time
        self.poll_seconds = poll_seconds
        self.status = "not started"
        self.overruns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None

    @property
    def up(self) -> bool:
        """Whether the kernel log is being read."""
        return self.status == "ok"

    @property
    def parse_errors(self) -> int:
        """Lines that looked like an XID report but could not be read."""
        return self.parser.parse_errors

    def start(self) -> bool:
        """Open the log and start following it; on failure log once why and return False."""
        try:
            self._fd = os.open(self.source, os.O_RDONLY | os.O_CLOEXEC | (0 if self.follow_file else os.O_NONBLOCK))
        except OSError as exc:
            hint = ("give the agent CAP_SYSLOG (or run it privileged), or pass --kernel-log FILE"
                    if exc.errno in (errno.EACCES, errno.EPERM) else "pass --kernel-log FILE")
            self.status = f"cannot open {self.source}: {exc.strerror}"
            log.warning("%s; XIDs come from NVML events only, which miss some codes (79, 119, 120); "
                        "%s (reported once)", self.status, hint)
            return False
        self.status = "ok"
        target = self._follow_file if self.follow_file else self._follow_kmsg
        self._thread = threading.Thread(target=self._run, args=(target,), name="xid-watch", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop the thread (within ``poll_seconds``) and close the log."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.poll_seconds + 1)

    def _run(self, target: Callable[[], None]) -> None:
        try:
            target()
        except Exception as exc:
            self.status = f"stopped reading {self.source}: {exc}"
            log.exception("kernel-log watcher stopped (reported once)")
        finally:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _feed(self, line: str, file_offset: int | None = None) -> None:
        """Parse one line; count its XID (through the cursor, with the position after the line)."""
        if self.cursor is None:
            event = self.parser.feed(line, now=time.time(), boot_time=self.boot_time)
            if event is not None:
                self.store.add(event)
            return
        seq = None if self.follow_file else kmsg_sequence(line)
        if self.cursor.seen(seq):
            return  # counted before this agent restarted
        event = self.parser.feed(line, now=time.time(), boot_time=self.boot_time)
        self.cursor.record(self.store.add, event, kmsg_seq=seq, file_fd=self._fd if self.follow_file else None,
                           file_offset=file_offset)

    def _follow_kmsg(self) -> None:
        """One ``read`` per record; EAGAIN means none yet, EPIPE that the ring overwrote some."""
        while not self._stop.is_set():
            try:
                record = os.read(self._fd, 16384)
            except BlockingIOError:
                select.select([self._fd], [], [], self.poll_seconds)
                continue
            except OSError as exc:
                if exc.errno != errno.EPIPE:
                    raise
                self.overruns += 1
                continue
            if not record:
                self._stop.wait(self.poll_seconds)
                continue
            for line in record.decode("utf-8", "replace").split("\n"):
                if line and not line.startswith(" "):  # " KEY=value" lines continue a record
                    self._feed(line)

    def _follow_file(self) -> None:
        """Read to the end, then poll for appended lines; reopen when rotated or truncated."""
        pending = b""
        fd = self._fd
        if fd is None:
            return
        if self.cursor is not None:
            os.lseek(fd, self.cursor.resume_offset(fd), os.SEEK_SET)
        position = os.lseek(fd, 0, os.SEEK_CUR)
        while not self._stop.is_set():
            chunk = os.read(self._fd, 65536)
            if chunk:
                line_end = position - len(pending)  # offset just past the last whole line
                position += len(chunk)
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    line_end += len(line) + 1
                    self._feed(line.decode("utf-8", "replace"), line_end)
                continue
            if self._stop.wait(self.poll_seconds):
                break
            try:
                now = os.stat(self.source)
            except OSError:
                continue  # rotated away and not recreated yet
            current = os.fstat(self._fd)
            if (now.st_ino, now.st_dev) != (current.st_ino, current.st_dev) or now.st_size < position:
                os.close(self._fd)
                self._fd = os.open(self.source, os.O_RDONLY | os.O_CLOEXEC)
                pending, position = b"", 0
