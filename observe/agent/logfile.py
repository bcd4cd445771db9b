"""A log file followed like ``tail -F``, complete lines at a time, with bounded memory and rotation checks.

``FollowedFile.read_lines`` returns the complete lines appended since the last call. A line
longer than ``MAX_LINE_BYTES`` keeps its first ``MAX_LINE_BYTES`` (an XID report is at the start
of its line) and the rest is skipped as it arrives, so a run of bytes without a newline costs
linear time and a bounded buffer (counted in ``long_lines``).

``FollowedFile.check`` runs when the end of the file is reached and answers whether the file is
still there and readable; it reopens the path when the file was replaced:

- renamed away and recreated (another inode or device): reopen and read the new file whole;
- truncated (``copytruncate``, or rewritten shorter: size below the read position): read again
  from the start;
- truncated and refilled past the read position before this check (``copytruncate`` of a busy
  log), or between a check and the next read (each read carries the ``TAIL_BYTES`` before the
  position and compares them): the first bytes of the file (up to ``HEAD_BYTES``, remembered when first read), or the
  ``TAIL_BYTES`` just before the read position (remembered as read), differ, so read again from
  the start. A refill whose bytes at both places are the same as before is taken for the same
  file grown (it is, when the content up to there is unchanged, e.g. ``dmesg > file`` run again);
  only a refill with other lines that are byte for byte the same at both places (identical lines
  without timestamps) cannot be told from growth, and its lines up to the old read position are
  not read;
- deleted, vanished or unreadable: ``check`` returns the reason (the kernel-log source reports
  not ok) and tries again on the next call.
"""

from __future__ import annotations

import os

#: Longest line kept, in bytes.
MAX_LINE_BYTES = 64 * 1024
#: Bytes at the start of the file compared on each check (they differ after a copytruncate).
HEAD_BYTES = 256
#: Bytes just before the read position compared on each check (they differ after a refill whose start is the same).
TAIL_BYTES = 256
_READ_BYTES = 65536


class FollowedFile:
    """One followed file (rules in the module docstring).

    Args:
        path: the file.
        max_line_bytes: longest line kept.

    Attributes:
        long_lines: lines cut at ``max_line_bytes``. reopened: times the file was read again
            from its start after a rotation or truncation.
        line_ends: for the lines the last ``read_lines`` returned, the file offset just past each
            (where reading resumes after it: ``observe.agent.xid_cursor``).
    """

    def __init__(self, path: str, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.long_lines = 0
        self.reopened = 0
        self._fd: int | None = None
        self._position = 0
        self._head = b""
        self._tail = b""
        self._pending = bytearray()
        self._skipping = False  # inside a line already cut at max_line_bytes
        self.line_ends: list[int] = []

    @property
    def fd(self) -> int | None:
        """The open file's descriptor (``None`` while closed)."""
        return self._fd

    def seek(self, offset: int) -> None:
        """Go on reading at ``offset`` (a line's start) of the open file, as if what is before it
        had been read (its first bytes remembered for the truncation check)."""
        if self._fd is None or offset <= 0:
            return
        self._head = os.pread(self._fd, min(HEAD_BYTES, offset), 0)  # _split adds the rest as it reads
        self._tail = os.pread(self._fd, min(TAIL_BYTES, offset), max(0, offset - TAIL_BYTES))
        self._position = offset
        self._pending.clear()
        self._skipping = False

    def open(self) -> None:
        """Open ``path`` and read from its start.

        Raises:
            OSError: it cannot be opened.
        """
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self.close()
        self._fd, self._position, self._head, self._tail = fd, 0, b"", b""
        self._pending.clear()
        self._skipping = False

    def close(self) -> None:
        """Close the file (``open`` again to go on)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def read_lines(self) -> list[bytes]:
        """Complete lines (without their newline) appended since the last call; ``[]`` only at the
        end of the file (a long line is read through, a chunk at a time, until its newline).

        Raises:
            OSError: reading failed.
        """
        lines: list[bytes] = []
        self.line_ends = []
        while self._fd is not None and not lines:
            data, start = self._read_on(self._fd)
            if len(data) == start:
                break
            lines = self._split(data, start)
        return lines

    def _read_on(self, fd: int) -> tuple[bytes, int]:
        """The next bytes past the read position, as ``(data, start)``: they are ``data[start:]``.

        They are read in one ``pread`` with the ``TAIL_BYTES`` before the position (``data[:start]``):
        when those are no longer the bytes read there, the file was truncated (and maybe refilled)
        since, even between a ``check`` and this read, so reading starts again at the file's start
        instead of taking the refill's later lines alone.
        """
        keep = len(self._tail)
        data = os.pread(fd, keep + _READ_BYTES, self._position - keep)
        if data[:keep] == self._tail:
            return data, keep
        self._position, self._head, self._tail = 0, b"", b""
        self._pending.clear()
        self._skipping = False
        self.reopened += 1
        return os.pread(fd, _READ_BYTES, 0), 0

    def _split(self, data: bytes, start: int) -> list[bytes]:
        """The lines that ``data[start:]``, the bytes at the read position, completes; its tail
        joins the line being read. ``data[:start]`` are the bytes just before the position."""
        if len(self._head) < HEAD_BYTES and self._position < HEAD_BYTES:
            self._head += data[start : start + HEAD_BYTES - self._position]
        base = self._position - start  # the file offset of data[0]
        self._position += len(data) - start
        self._tail = data[-TAIL_BYTES:]  # data starts with the previous tail, so this is the last TAIL_BYTES read
        lines: list[bytes] = []
        while (end := data.find(b"\n", start)) >= 0:
            self._take(data, start, end)
            lines.append(bytes(self._pending))
            self.line_ends.append(base + end + 1)
            self._pending.clear()
            self._skipping = False
            start = end + 1
        self._take(data, start, len(data))
        return lines

    def _take(self, chunk: bytes, start: int, end: int) -> None:
        """Add ``chunk[start:end]`` to the line being read, up to ``max_line_bytes``."""
        if self._skipping:
            return
        room = self.max_line_bytes - len(self._pending)
        if end - start > room:
            self._pending += chunk[start : start + room]
            self._skipping = True
            self.long_lines += 1
        else:
            self._pending += chunk[start:end]

    def check(self) -> str | None:
        """At the end of the file: ``None`` while it is fine, else why it cannot be followed.

        Reopens a rotated file, and reads a truncated or refilled one again from its start.
        """
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return f"{self.path} is gone (deleted, or rotated away and not recreated)"
        except OSError as exc:
            return f"cannot read {self.path}: {exc.strerror}"
        try:
            if self._fd is None:
                self.open()
                return None
            current = os.fstat(self._fd)
            replaced = (now.st_ino, now.st_dev) != (current.st_ino, current.st_dev)
            if (
                replaced
                or now.st_size < self._position
                or (self._head and os.pread(self._fd, len(self._head), 0) != self._head)
                or (self._tail and os.pread(self._fd, len(self._tail), self._position - len(self._tail)) != self._tail)
            ):
                self.open()
                self.reopened += 1
        except OSError as exc:
            self.close()
            return f"cannot read {self.path}: {exc.strerror}"
        return None
