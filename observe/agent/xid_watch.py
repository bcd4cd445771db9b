"""XID errors as they happen: a kernel-log follower on its own thread, and the store it feeds.

The watcher reads the kernel ring buffer from its oldest record, so XIDs logged before the agent
started are counted too: through ``/dev/kmsg`` (the default; needs CAP_SYSLOG where
``kernel.dmesg_restrict=1``, and in a container a privileged one, as the device cgroup refuses
the device otherwise) or through the ``syslog(2)`` call (``--kernel-log-source syslog``,
``observe.agent.klog``: CAP_SYSLOG is enough, the unprivileged DaemonSet's way). With
``--kernel-log`` it follows a file like ``tail -F`` instead (``observe.agent.logfile``: bounded
lines, rotation and copytruncate detected; a deleted, vanished or unreadable file makes the
source report not ok until it can be read again). Each line goes through
``observe.xid.KernelLogParser``; a malformed line is a parse error, never a stop. When the kernel
log cannot be opened, the watcher says so once and the agent falls back to NVML's
XidCriticalError events, which carry fewer XIDs (79, 119 and 120, among others, only reach the
kernel log). Both sources are never used together, so one XID is never counted twice.

Text in an event that a process controls (its name, the message, the raw line) is made safe by
``observe.agent.redact`` before it is stored.

With a cursor (``observe.agent.xid_cursor``, ``--state-dir``) a restart resumes where the last
run stopped: ring-buffer records already counted in this boot are skipped (``/dev/kmsg`` by
sequence number, ``syslog(2)`` by timestamp), a file is read on from the last whole line, and the
counts continue from the saved ones.
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

from observe.agent.klog import KernelRing, permission_hint, timestamp
from observe.agent.logfile import FollowedFile
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
        event,
        process=None if event.process is None else safe_text(event.process),
        message=safe_text(event.message, MAX_MESSAGE_CHARS),
        raw=safe_text(event.raw, MAX_MESSAGE_CHARS),
    )


class XidStore:
    """Recent XID events and counts per (PCI bus, code, severity); safe to share between threads.

    Args:
        keep: how many recent events to keep.
    """

    def __init__(self, keep: int = RECENT_EVENTS) -> None:
        self._lock = threading.Lock()
        self._recent: deque[XidEvent] = deque(maxlen=keep)
        self._counts: Counter[tuple[str | None, int, str]] = Counter()
        self._last: dict[tuple[str | None, int, str], float] = {}
        self._uuids: dict[str | None, str] = {}
        #: Called with each event as it is counted (outside the lock; must not block).
        self.listeners: list[Callable[[XidEvent], None]] = []

    def add(self, event: XidEvent, dated: bool = True) -> None:
        """Count ``event`` (the same XID twice counts twice) and keep it among the recent ones.

        ``dated``: ``event.time_unix`` is when the XID happened (a kernel timestamp, or an event
        received as it happened), so it may be the latest time of its GPU and code
        (``last_times``); ``False`` for a line whose time is only when the agent read it.
        """
        event = exportable(event)
        key = (event.pci_bus, event.xid, event.severity)
        with self._lock:
            self._recent.append(event)
            self._counts[key] += 1
            if dated and event.time_unix > self._last.get(key, float("-inf")):
                self._last[key] = event.time_unix
            if event.gpu_uuid:
                self._uuids.setdefault(event.pci_bus, event.gpu_uuid)
        for listener in self.listeners:
            listener(event)

    def view(self) -> tuple[list[XidEvent], dict[tuple[str | None, int, str], int], dict[str | None, str]]:
        """Copies of (recent events oldest first, counts, PCI bus -> UUID the events named)."""
        with self._lock:
            return list(self._recent), dict(self._counts), dict(self._uuids)

    def last_times(self) -> dict[tuple[str | None, int, str], float]:
        """(PCI bus, code, severity) -> Unix time of its latest dated XID (a copy)."""
        with self._lock:
            return dict(self._last)

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
        path: a log file to follow instead of the ring buffer.
        kmsg: the kernel ring buffer device.
        syslog: read the ring buffer through ``syslog(2)`` instead of ``kmsg``.
        boot_time: Unix time of boot, to date ``/dev/kmsg`` records and ``syslog(2)`` lines.
        poll_seconds: how often to look for new lines when there are none.
        ring: the ``syslog(2)`` reader to use (tests pass a ``KernelRing`` over a crafted buffer).
        cursor: resume from and save to this (``None``: read everything, keep nothing).

    Attributes:
        status: ``ok`` while reading, else why the kernel log cannot be read.
        source: the path being read (``syslog(2)`` for the system call).
        long_lines: file mode: lines cut at ``observe.agent.logfile.MAX_LINE_BYTES``.
    """

    def __init__(
        self,
        store: XidStore,
        node: str = "",
        path: str | None = None,
        kmsg: str = KMSG,
        boot_time: float | None = None,
        poll_seconds: float = 0.5,
        syslog: bool = False,
        ring: KernelRing | None = None,
        cursor: XidCursor | None = None,
    ) -> None:
        self.store = store
        self.cursor = cursor
        self.parser = KernelLogParser(node)
        self.follow_file = path is not None
        self.syslog = (syslog or ring is not None) and not self.follow_file
        self.source = path or ("syslog(2)" if self.syslog else kmsg)
        self.boot_time = boot_time
        self.poll_seconds = poll_seconds
        self.status = "not started"
        self.overruns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._fd: int | None = None
        self._file: FollowedFile | None = None
        self._ring = ring
        self._last_stamp: float | None = None
        self._same_stamp = 0
        self._caught_up = False  # file mode: the lines already there when it was opened are read

    @property
    def up(self) -> bool:
        """Whether the kernel log is being read."""
        return self.status == "ok"

    @property
    def parse_errors(self) -> int:
        """Lines that looked like an XID report but could not be read."""
        return self.parser.parse_errors

    @property
    def long_lines(self) -> int:
        """File mode: lines cut at their first ``MAX_LINE_BYTES``."""
        return self._file.long_lines if self._file is not None else 0

    def start(self) -> bool:
        """Open the log and start following it; on failure log once why and return False."""
        target: Callable[[], None]
        try:
            if self.follow_file:
                self._file = FollowedFile(self.source)
                self._file.open()
                if self.cursor is not None and self._file.fd is not None:
                    self._file.seek(self.cursor.resume_offset(self._file.fd))
                target = self._follow_file
            elif self.syslog:
                self._ring = self._ring or KernelRing()
                target = self._follow_syslog
            else:
                self._fd = os.open(self.source, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
                target = self._follow_kmsg
        except OSError as exc:
            if self.syslog:
                hint = permission_hint(exc)
            elif exc.errno in (errno.EACCES, errno.EPERM):
                hint = "give the agent CAP_SYSLOG (or run it privileged), or pass --kernel-log FILE"
            else:
                hint = "pass --kernel-log FILE"
            self.status = f"cannot {'read' if self.syslog else 'open'} {self.source}: {exc.strerror}"
            log.warning(
                "%s; XIDs come from NVML events only, which miss some codes (79, 119, 120); %s (reported once)",
                self.status,
                hint,
            )
            return False
        self.status = "ok"
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
            if self._file is not None:
                self._file.close()

    def _feed(
        self,
        line: str,
        now: float | None = None,
        position: tuple[float, ...] | None = None,
        file_offset: int | None = None,
        dated: bool = True,
    ) -> None:
        """Parse one line and count its XID; with a cursor, skip a line counted before a restart
        (``position``: the record's place in this boot's ring buffer) and save the place after it.
        ``dated``: the event's time is when it happened (``XidStore.add``)."""
        if self.cursor is not None and self.cursor.seen(position):
            return
        event = self.parser.feed(line, now=time.time() if now is None else now, boot_time=self.boot_time)
        if event is not None and event.continues:
            event = None  # a further line of a report counted already: one fault, one count

        def add(e: XidEvent) -> None:
            self.store.add(e, dated=dated)

        if self.cursor is None:
            if event is not None:
                add(event)
            return
        fd = self._file.fd if self._file is not None else None
        self.cursor.record(add, event, ring_position=position, file_fd=fd, file_offset=file_offset)

    def _follow_kmsg(self) -> None:
        """One ``read`` per record; EAGAIN means none yet, EPIPE that the ring overwrote some."""
        fd = self._fd
        assert fd is not None
        while not self._stop.is_set():
            assert self._fd is not None  # opened by start(); this thread closes it when it ends (_run)
            try:
                record = os.read(fd, 16384)
            except BlockingIOError:
                select.select([fd], [], [], self.poll_seconds)
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
                    seq = kmsg_sequence(line)
                    # dated by the record's microseconds since boot (with the boot time)
                    dated = self.boot_time is not None
                    self._feed(line, position=None if seq is None else (float(seq),), dated=dated)

    def _follow_file(self) -> None:
        """Read to the end, then poll for appended lines; follow rotation and truncation
        (``FollowedFile.check``) and report a file that cannot be read as not ok."""
        assert self._file is not None
        while not self._stop.is_set():
            if self.status == "ok":
                try:
                    lines = self._file.read_lines()
                except OSError as exc:
                    self._set_status(f"cannot read {self.source}: {exc.strerror}")
                    lines = None
                if lines:
                    # A line read as it is appended is dated when read; the lines already in the
                    # file when it was opened may be days old and have no time the agent knows.
                    for line, end in zip(lines, self._file.line_ends, strict=True):
                        self._feed(line.decode("utf-8", "replace"), file_offset=end, dated=self._caught_up)
                    continue
                if lines is not None:
                    self._caught_up = True
            if self._stop.wait(self.poll_seconds):
                break
            self._set_status(self._file.check() or "ok")

    def _follow_syslog(self) -> None:
        """Every ``poll_seconds``, the lines logged since the last read (``KernelRing.new_lines``),
        dated by their ``[seconds since boot]``."""
        assert self._ring is not None
        while not self._stop.is_set():
            try:
                lines = self._ring.new_lines()
            except OSError as exc:
                self._set_status(f"cannot read {self.source}: {exc.strerror}")
                lines = []
            else:
                self._set_status("ok")
            for line in lines:
                since_boot = timestamp(line)
                when = self.boot_time + since_boot if since_boot is not None and self.boot_time else None
                self._feed(
                    line.decode("utf-8", "replace"),
                    now=when,
                    position=self._ring_position(since_boot),
                    dated=when is not None,
                )
            self._stop.wait(self.poll_seconds)

    def _ring_position(self, since_boot: float | None) -> tuple[float, ...] | None:
        """A ``syslog(2)`` line's place in this boot's ring: (its timestamp, how many lines before
        it had the same one); ``None`` for a line without a timestamp (it cannot be resumed at)."""
        if since_boot is None:
            return None
        same = self._same_stamp + 1 if since_boot == self._last_stamp else 0
        self._last_stamp, self._same_stamp = since_boot, same
        return (since_boot, float(same))

    def _set_status(self, status: str) -> None:
        """Change ``status``, logging each change once (a log that went away, and its return)."""
        if status == self.status:
            return
        if status == "ok":
            log.warning("kernel log %s can be read again", self.source)
        else:
            log.warning("%s; the kernel-log source reports not ok until it can be read again", status)
        self.status = status
