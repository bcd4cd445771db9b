"""Where the agent stopped reading the kernel log, and the XID counts up to there, kept across restarts.

Without it a restarted agent re-reads ``/dev/kmsg`` from its oldest record (or a ``--kernel-log``
file from its first byte) and counts every XID again; where the ring buffer or a rotation dropped
some, the count even goes down, which Prometheus takes for a counter reset and ``increase()``
turns into a fresh XID: a re-page. With ``--state-dir`` the agent keeps one JSON file there,
written atomically (a temporary file renamed over it), holding:

- for the ring buffer: the boot id (``/proc/sys/kernel/random/boot_id``) and the place of the last
  record read: through ``/dev/kmsg`` its sequence number (the second field of every record,
  Documentation/ABI/testing/dev-kmsg), through ``syslog(2)`` its ``[seconds.micro]`` timestamp and
  how many lines before it had the same one; a restart within the same boot skips records up to
  there, a new boot starts afresh (the ring buffer is new, and so are the counts);
- for a file: its device, inode, the offset of the last whole line read and a hash of the bytes
  before it; a restart resumes there if the same file still holds those bytes, else (rotated,
  truncated or replaced) it reads the file from the start and keeps the counts;
- the counts per (PCI bus, code, severity class) and the PCI bus → GPU UUID map learnt so far.

The position and the counts are saved together, under one lock, so the file never holds a count
ahead of its position: what a crash loses since the last save is read and counted again, once.
Saves are at most one per ``min_interval`` seconds (``flush`` writes what is pending, on every
collection and at stop). A second agent on the node (a rolling update with surge) finds the lock
taken and runs without the file, said once. Nothing here is secret (codes, PCI buses, UUIDs).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from observe.model import XidEvent

log = logging.getLogger(__name__)

STATE_FILE = "xid-state.json"
STATE_VERSION = 1
#: Bytes before a file position whose hash proves the file still holds what was read.
TAIL_BYTES = 256
_KMSG_SEQ = re.compile(r"^\d+,(\d+),")

Counts = dict[tuple[str | None, int, str], int]


def kmsg_sequence(record: str) -> int | None:
    """The sequence number of one ``/dev/kmsg`` record (``pri,seq,usec,flags;message``), else ``None``."""
    m = _KMSG_SEQ.match(record)
    return int(m.group(1)) if m else None


def read_boot_id(proc_root: str = "/proc") -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), ``None`` when unreadable."""
    try:
        with open(f"{proc_root}/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _tail_hash(fd: int, offset: int) -> str:
    start = max(0, offset - TAIL_BYTES)
    return hashlib.sha256(os.pread(fd, offset - start, start)).hexdigest()


@dataclass
class Restored:
    """What a start takes over from the state file.

    Attributes:
        counts: (PCI bus, code, severity) → count. uuids: PCI bus → GPU UUID.
        ring_position: skip ring-buffer records up to this place (``None``: skip none).
        file: ``{"dev", "ino", "offset", "tail"}`` of the file last read (``None``: read from the start).
        why: one line on what was taken over, or why nothing was.
    """

    counts: Counts = field(default_factory=dict)
    uuids: dict[str | None, str] = field(default_factory=dict)
    ring_position: tuple[float, ...] | None = None
    file: dict[str, Any] | None = None
    why: str = "no state yet"


class XidCursor:
    """The state file of one agent: load once at start, then ``record`` every line read.

    Args:
        state_dir: where ``xid-state.json`` lives (created if missing).
        source: the kernel log being read (``/dev/kmsg``, ``syslog(2)`` or the ``--kernel-log`` file).
        follow_file: ``source`` is a file (positions are byte offsets), not the ring buffer.
        boot_id: this boot's id (``read_boot_id``).
        snapshot: returns the counts and UUID map to save (the store's, taken under ``lock``).
        min_interval: seconds between two saves at most one.

    Attributes:
        lock: held while an event is counted and the position advanced, and while saving.
        enabled: ``False`` when the file cannot be used (another agent holds it, unwritable).
        errors: saves that failed (logged once).
    """

    def __init__(
        self,
        state_dir: str,
        source: str,
        follow_file: bool,
        boot_id: str | None,
        snapshot: Callable[[], tuple[Counts, dict[str | None, str]]],
        min_interval: float = 1.0,
    ) -> None:
        self.path = Path(state_dir) / STATE_FILE
        self.source = source
        self.follow_file = follow_file
        self.boot_id = boot_id
        self.snapshot = snapshot
        self.min_interval = min_interval
        self.lock = threading.RLock()
        self.enabled = True
        self.errors = 0
        self._lock_fd: int | None = None
        self._ring: tuple[float, ...] | None = None
        self._file: dict[str, Any] | None = None
        self._dirty = False
        self._saved_at = 0.0
        self._resume: tuple[float, ...] | None = None  # where the saved run stopped in the ring

    # -- start ------------------------------------------------------------------------------

    def load(self, wait_seconds: float = 10.0) -> Restored:
        """Take the file's lock (waiting up to ``wait_seconds`` for an agent that is stopping) and
        return what it lets this start take over; on any problem, log once and start afresh."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            return self._disable(f"cannot use {self.path.parent} ({exc.strerror})")
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return self._disable(f"another agent holds {self.path}")
                time.sleep(0.1)
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return Restored()
        except (OSError, ValueError) as exc:
            log.warning("XID state %s is unreadable (%s); counting from the kernel log afresh", self.path, exc)
            return Restored(why="state unreadable")
        return self._restored(data)

    def _disable(self, why: str) -> Restored:
        self.enabled = False
        log.warning("XID state: %s; a restart of this agent counts the kernel log's XIDs again (reported once)", why)
        return Restored(why=why)

    def _restored(self, data: Any) -> Restored:
        try:
            if data.get("version") != STATE_VERSION or data.get("source") != self.source:
                return Restored(why=f"state was for {data.get('source')!r}, not {self.source!r}")
            counts: Counts = {(bus, int(code), str(severity)): int(n) for bus, code, severity, n in data["counts"]}
            uuids: dict[str | None, str] = {str(bus): str(uuid) for bus, uuid in data.get("uuids", {}).items()}
            if self.follow_file:
                self._file = dict(data["file"]) if data.get("file") else None
                return Restored(counts, uuids, file=self._file, why=f"resuming {self.source}")
            if not self.boot_id or data.get("boot_id") != self.boot_id:
                return Restored(why="a new boot: the kernel ring buffer starts afresh")
            saved = data.get("ring_position")
            self._ring = self._resume = None if saved is None else tuple(float(x) for x in saved)
            where = (
                "the start" if self._ring is None else f"ring-buffer position {' '.join(f'{x:g}' for x in self._ring)}"
            )
            return Restored(counts, uuids, ring_position=self._ring, why=f"resuming after {where}")
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.warning("XID state %s has the wrong shape (%s); counting afresh", self.path, exc)
            return Restored(why="state has the wrong shape")

    def resume_offset(self, fd: int) -> int:
        """Where to start reading the file open on ``fd``: the saved offset when it is the same
        file and still holds the bytes read before it, else 0 (rotated, truncated, replaced)."""
        saved = self._file
        if not saved:
            return 0
        st = os.fstat(fd)
        offset = int(saved.get("offset", 0))
        if (st.st_dev, st.st_ino) != (saved.get("dev"), saved.get("ino")) or st.st_size < offset:
            return 0
        return offset if _tail_hash(fd, offset) == saved.get("tail") else 0

    # -- while reading ------------------------------------------------------------------------

    def record(
        self,
        add: Callable[[XidEvent], None],
        event: XidEvent | None,
        ring_position: tuple[float, ...] | None = None,
        file_fd: int | None = None,
        file_offset: int | None = None,
    ) -> None:
        """Count ``event`` (if any) with ``add`` and advance the position past its line, atomically
        with respect to saving; save when ``min_interval`` has passed since the last save.

        A file position (device, inode, offset and the hash of the bytes before it) is taken with
        every event and whenever a save is due, so what is saved always covers every count.
        """
        with self.lock:
            due = time.monotonic() - self._saved_at >= self.min_interval
            if event is not None:
                add(event)
                self._dirty = True
            if ring_position is not None:
                self._ring = ring_position
                self._dirty = True
            if file_fd is not None and file_offset is not None and (event is not None or due):
                st = os.fstat(file_fd)
                self._file = {
                    "dev": st.st_dev,
                    "ino": st.st_ino,
                    "offset": file_offset,
                    "tail": _tail_hash(file_fd, file_offset),
                }
                self._dirty = True
            if self._dirty and due:
                self._save()

    def seen(self, ring_position: tuple[float, ...] | None) -> bool:
        """Whether a ring-buffer record was already counted before this start (in this boot)."""
        return ring_position is not None and self._resume is not None and ring_position <= self._resume

    def flush(self) -> None:
        """Save now if anything changed since the last save."""
        with self.lock:
            if self._dirty:
                self._save()

    def close(self) -> None:
        """Flush and release the lock."""
        if self.enabled:
            self.flush()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _save(self) -> None:
        if not self.enabled:
            return
        counts, uuids = self.snapshot()
        data = {
            "version": STATE_VERSION,
            "source": self.source,
            "boot_id": self.boot_id,
            "ring_position": None if self._ring is None else list(self._ring),
            "file": self._file,
            "counts": [
                [bus, code, severity, n]
                for (bus, code, severity), n in sorted(counts.items(), key=lambda kv: (kv[0][0] or "", kv[0][1]))
            ],
            "uuids": {str(bus): uuid for bus, uuid in uuids.items()},
        }
        tmp = self.path.with_suffix(".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            self.errors += 1
            if self.errors == 1:
                log.error(
                    "cannot write XID state %s (%s); retrying on the next XID (reported once)", self.path, exc.strerror
                )
            return
        self._dirty = False
        self._saved_at = time.monotonic()
