"""The kernel's log ring buffer through the ``syslog(2)`` system call: the agent's way to read XID
lines without ``/dev/kmsg``.

``/dev/kmsg`` is a device: inside a container the device cgroup refuses to open it unless the
container is privileged (kubernetes/node-problem-detector#698). ``syslog(2)``
(``SYSLOG_ACTION_READ_ALL``) reads the same ring buffer, non-destructively, and needs only
``CAP_SYSLOG`` (where ``kernel.dmesg_restrict=1``, the default of most distributions); the
container runtimes' default seccomp profile (``RuntimeDefault``) allows the call exactly when the
container holds that capability. The ring buffer is not namespaced, so a container sees the
node's kernel log.

``KernelRing.new_lines`` returns the lines logged since the previous call: it reads the newest
``TAIL_BYTES`` (``READ_ALL`` returns the last *len* bytes), finds the last line it returned
(an anchor: lines carry ``[seconds.micro]`` timestamps, so they are unique in practice) and
returns what follows; when the anchor is not in the tail, it reads the whole buffer, and when it
is not there either (the ring wrapped past it between two calls), it returns the lines with a
later timestamp. The first call returns the whole buffer, so XIDs logged before the agent
started are counted, as with ``/dev/kmsg``. Lines look like ``<3>[ 8123.004512] NVRM: Xid …``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from collections.abc import Callable

#: syslog(2) actions (linux/include/linux/syslog.h).
SYSLOG_ACTION_READ_ALL = 3
SYSLOG_ACTION_SIZE_BUFFER = 10
#: Bytes read from the end of the ring buffer first.
TAIL_BYTES = 16384
_STAMP = re.compile(rb"^(?:<\d+>)?\[\s*(\d+)\.(\d+)\]")


def timestamp(line: bytes) -> float | None:
    """Seconds since boot of a ``<pri>[seconds.micro] …`` line, or ``None`` without a timestamp."""
    m = _STAMP.match(line)
    return None if m is None else int(m.group(1)) + int(m.group(2)) / 10 ** len(m.group(2))


class SyslogCall:
    """``klogctl`` (glibc's name for ``syslog(2)``) through ctypes."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)

    def _call(self, action: int, buf: ctypes.Array[ctypes.c_char] | None, size: int) -> int:
        n = int(self._libc.klogctl(action, buf, size))
        if n < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return n

    def read_all(self, size: int) -> bytes:
        """The newest ``size`` bytes of the log (``SYSLOG_ACTION_READ_ALL``, non-destructive).

        Raises:
            OSError: refused (``EPERM`` without ``CAP_SYSLOG``).
        """
        buf = ctypes.create_string_buffer(max(1, size))
        n = self._call(SYSLOG_ACTION_READ_ALL, buf, size)
        return buf.raw[:n]

    def buffer_size(self) -> int:
        """The ring buffer's size in bytes (``SYSLOG_ACTION_SIZE_BUFFER``)."""
        return self._call(SYSLOG_ACTION_SIZE_BUFFER, None, 0)


class KernelRing:
    """The ring buffer, read through ``syslog(2)`` (rules in the module docstring).

    Args:
        read_all: ``read_all(n)`` -> the newest ``n`` bytes of the log (raises ``OSError``);
            default the real system call. buffer_bytes: the ring buffer's size (default: asked
            of the kernel, ``SYSLOG_ACTION_SIZE_BUFFER``).

    Raises:
        OSError: from the constructor, when the log cannot be read (``EPERM`` without
            ``CAP_SYSLOG``, or where seccomp refuses the call).
    """

    def __init__(self, read_all: Callable[[int], bytes] | None = None, buffer_bytes: int | None = None) -> None:
        if read_all is None:
            call = SyslogCall()
            read_all, buffer_bytes = call.read_all, buffer_bytes or call.buffer_size()
        self._read_all = read_all
        self.buffer_bytes = buffer_bytes or 1 << 20
        self._anchor: bytes | None = None
        self._anchor_stamp: float | None = None
        read_all(1)  # fails here, once, when the capability or the seccomp filter says no

    def new_lines(self) -> list[bytes]:
        """Lines logged since the previous call (the whole buffer on the first)."""
        lines: list[bytes] | None
        if self._anchor is None:
            lines = self._lines(self._read_all(self.buffer_bytes))
        else:
            lines = self._after_anchor(self._read_all(min(TAIL_BYTES, self.buffer_bytes)))
            if lines is None:
                text = self._read_all(self.buffer_bytes)
                lines = self._after_anchor(text)
                if lines is None:
                    lines = [
                        line
                        for line in self._lines(text)
                        if (t := timestamp(line)) is None or self._anchor_stamp is None or t > self._anchor_stamp
                    ]
        if lines:
            self._anchor, self._anchor_stamp = lines[-1], timestamp(lines[-1])
        return lines

    def _after_anchor(self, text: bytes) -> list[bytes] | None:
        assert self._anchor is not None
        key = self._anchor + b"\n"
        at = text.rfind(key)
        if at < 0 or (at > 0 and text[at - 1 : at] != b"\n"):
            return None
        return self._lines(text[at + len(key) :])

    @staticmethod
    def _lines(text: bytes) -> list[bytes]:
        """Complete lines of ``text`` (a partial last line is left for the next read)."""
        if not text:
            return []
        lines = text.split(b"\n")
        return [line for line in lines[:-1] if line]


def permission_hint(exc: OSError) -> str:
    """What to give the agent when ``KernelRing`` is refused."""
    if exc.errno in (errno.EPERM, errno.EACCES):
        return "give the agent CAP_SYSLOG (securityContext.capabilities.add: [SYSLOG], uid 0)"
    return "pass --kernel-log FILE"
