"""The node's process table, read from ``/proc`` like htop: state, CPU, memory, owner, command, pod.

This is the agent's hot path: every collection reads every process (about 1,100 on a busy node).
psutil's ``process_iter`` needs more CPU for that than the agent's whole budget on this project's
reference machine (2 cores), so the table reads procfs itself and keeps the work per process to
one system call:

- ``/proc/<pid>/stat`` is opened once per process and re-read with ``pread(fd, …, 0)`` (procfs
  regenerates the text at offset 0); a process whose ``stat`` text did not change since the last
  read is not parsed again;
- a process that was idle at its last read (its ``stat`` unchanged: no CPU, same memory and
  state) is read again only every ``IDLE_EVERY`` collections, staggered by pid, while busy
  processes are read every time. Most of a node's processes sleep, so this cuts the reads about
  fivefold; a process that wakes up shows its CPU within ``IDLE_EVERY`` collections, averaged
  over the time since its previous read (the agent's CPU per collection is measured by
  ``benchmarks/agent_cost.py``, figures in ``benchmarks/results/agent_cost.json``);
- command line, owner and cgroup are read only for the processes a snapshot shows, and cached
  until the process's name (``comm``) changes, which it does on ``exec``. An empty command line is
  cached only for a kernel thread: a process read between ``exec``'s new name and its new
  arguments (a real window) shows ``[name]`` until its arguments are there, not for its life.

Field positions follow proc(5) (``/proc/pid/stat``: state 3, ppid 4, utime 14, stime 15,
num_threads 20, starttime 22, rss 24). A process that exits while it is read is skipped; an entry
that cannot be read is counted as an error and logged once.
"""

from __future__ import annotations

import errno
import heapq
import logging
import os
import pwd
import re
import resource
from collections import Counter
from dataclasses import dataclass
from operator import attrgetter

from observe.agent.redact import MAX_NAME_CHARS, safe_command, safe_text
from observe.logonce import OnceLog
from observe.model import ProcessInfo

log = logging.getLogger(__name__)

#: ``/proc/<pid>/stat`` state letter -> state name (proc(5)).
STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "disk_sleep",
    "T": "stopped",
    "t": "stopped",
    "Z": "zombie",
    "I": "idle",
}
STATE_NAMES: tuple[str, ...] = ("running", "sleeping", "disk_sleep", "stopped", "zombie", "idle", "other")
_VANISHED = (errno.ENOENT, errno.ESRCH)
_STAT_BYTES = 4096
#: Idle processes are re-read every this many collections (see the module docstring).
IDLE_EVERY = 5
# Kubernetes pod UID in a cgroup path (systemd driver writes '_' for '-'), and a container ID.
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER = re.compile(r"(?:^|[-/])([0-9a-f]{64})(?:\.scope)?$")


@dataclass
class _Static:
    """What a process shows that changes only on exec (read lazily, cached; text already safe)."""

    comm: str
    name: str
    user: str | None
    command: str | None
    pod_uid: str | None
    container_id: str | None
    final: bool = True  # False: read mid-exec (no arguments yet, not a kernel thread); read again


class _Proc:
    __slots__ = (
        "pid",
        "fd",
        "raw",
        "comm",
        "state",
        "ppid",
        "ticks",
        "prev_ticks",
        "threads",
        "rss_pages",
        "cpu_cores",
        "read_at",
        "idle",
        "static",
    )

    def __init__(self, pid: int, fd: int | None) -> None:
        self.pid, self.fd = pid, fd
        self.raw = b""
        self.comm, self.state, self.ppid = "", "other", 0
        self.ticks = self.prev_ticks = self.threads = self.rss_pages = 0
        self.cpu_cores: float | None = None  # None until a second read
        self.read_at: float | None = None
        self.idle = False  # its stat did not change at its last read
        self.static: _Static | None = None


def parse_cgroup(text: str) -> tuple[str | None, str | None]:
    """``(pod_uid, container_id)`` from a ``/proc/<pid>/cgroup`` text, each ``None`` when absent.

    Understands the cgroupfs (``/kubepods/burstable/pod<uid>/<id>``) and systemd
    (``kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope``) layouts of
    containerd, CRI-O and Docker.
    """
    pod = container = None
    for line in text.splitlines():
        path = line.rpartition(":")[2]
        if pod is None and (m := _POD.search(path)):
            pod = m.group(1).replace("_", "-")
        if container is None and (m := _CONTAINER.search(path)):
            container = m.group(1)
    return pod, container


def raise_fd_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; return the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            pass
    return soft


class ProcessTable:
    """Every process under ``proc_root``, refreshed by ``refresh()``.

    Args:
        proc_root: the procfs to read (``/proc``, or the host's mounted elsewhere, or a fixture).
        keep_open: keep each process's ``stat`` open between collections (one syscall each).
        idle_every: a process whose ``stat`` did not change at its last read is read again only
            every ``idle_every`` refreshes (staggered by pid); 1 reads every process every time.

    Attributes:
        errors: kind (``proc_unreadable``, ``proc_parse``) -> count.
        count: processes seen by the last ``refresh``. threads: their threads.
        by_state: state name -> processes.
    """

    def __init__(self, proc_root: str = "/proc", keep_open: bool = True, idle_every: int = IDLE_EVERY) -> None:
        self.root = proc_root.rstrip("/") or "/"
        self.keep_open = keep_open
        self.idle_every = max(1, idle_every)
        self._cycle = 0
        self.ticks_per_second = os.sysconf("SC_CLK_TCK")
        self.page_size = os.sysconf("SC_PAGE_SIZE")
        self.errors: Counter[str] = Counter()
        self._once = OnceLog(log, self.errors)
        self.count = self.threads = 0
        self.by_state: dict[str, int] = {}
        self._procs: dict[int, _Proc] = {}
        self._users: dict[int, str] = {}
        if keep_open:
            raise_fd_limit()

    # -- collection ---------------------------------------------------------------------------

    def refresh(self, now: float) -> None:
        """Read the ``stat`` of every process that was busy last time, and of a staggered
        ``1 / idle_every`` of the idle ones; notice processes that came and went.

        Args:
            now: a monotonic clock in seconds (a process's CPU share is its ticks over the time
                since its previous read).

        Raises:
            OSError: ``proc_root`` itself cannot be listed.
        """
        self._cycle += 1
        cycle, every = self._cycle, self.idle_every
        old, seen, pread = self._procs, {}, os.pread
        for name in os.listdir(self.root):
            if not name.isdigit():
                continue
            pid = int(name)
            proc = old.pop(pid, None)
            data = b""
            if proc is not None:
                if proc.idle and (pid + cycle) % every:  # idle last time: not due yet
                    seen[pid] = proc
                    continue
                if proc.fd is not None:  # fast path: one pread, usually unchanged
                    try:
                        data = pread(proc.fd, _STAT_BYTES, 0)
                    except OSError:
                        data = b""
                    if data == proc.raw:
                        proc.idle, proc.cpu_cores, proc.read_at = True, 0.0, now
                        seen[pid] = proc
                        continue
            proc = self._update(proc, pid, data, now)
            if proc is not None:
                seen[pid] = proc
        for gone in old.values():
            self._close(gone)
        self._procs = seen
        self.count = len(seen)
        self.threads = sum(map(attrgetter("threads"), seen.values()))
        states = Counter(map(attrgetter("state"), seen.values()))
        self.by_state = {s: states.get(s, 0) for s in STATE_NAMES}

    def _update(self, proc: _Proc | None, pid: int, data: bytes, now: float) -> _Proc | None:
        """The slow path: a new process, a changed ``stat``, or one that must be read by path."""
        if proc is not None and not data and proc.fd is not None:
            self._close(proc)  # stale descriptor (the pid was reused, or it cannot be read)
            proc = None
        if proc is None:
            proc = self._open(pid)
            if proc is None:
                return None
        if not data:
            read = self._read_stat(proc, pid)
            if read is None:
                self._close(proc)
                return None
            data = read
        if data == proc.raw:
            proc.idle, proc.cpu_cores, proc.read_at = True, 0.0, now
            return proc
        if not self._parse(proc, data):
            self._close(proc)
            return None
        if proc.read_at is not None and now > proc.read_at:
            proc.cpu_cores = max(0, proc.ticks - proc.prev_ticks) / self.ticks_per_second / (now - proc.read_at)
        proc.prev_ticks, proc.raw, proc.read_at, proc.idle = proc.ticks, data, now, False
        return proc

    def _open(self, pid: int) -> _Proc | None:
        if not self.keep_open:
            return _Proc(pid, None)
        try:
            return _Proc(pid, os.open(f"{self.root}/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            if exc.errno in _VANISHED:
                self._vanished(pid)
                return None
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                return _Proc(pid, None)  # out of descriptors: read this one by path each time
            self._error("proc_unreadable", f"{self.root}/{pid}/stat", exc)
            return None

    def _read_stat(self, proc: _Proc, pid: int) -> bytes | None:
        try:
            if proc.fd is not None:
                data = os.pread(proc.fd, _STAT_BYTES, 0)
            else:
                with open(f"{self.root}/{pid}/stat", "rb", buffering=0) as f:
                    data = f.read(_STAT_BYTES)
        except OSError as exc:
            if exc.errno in _VANISHED:
                self._vanished(pid)
            else:
                self._error("proc_unreadable", f"{self.root}/{pid}/stat", exc)
            return None
        if not data:  # a stale descriptor of a reaped process reads empty on some kernels
            self._vanished(pid)
            return None
        return data

    def _parse(self, proc: _Proc, data: bytes) -> bool:
        try:
            close = data.rindex(b")")
            fields = data[close + 2 :].split()
            proc.comm = data[data.index(b"(") + 1 : close].decode("utf-8", "backslashreplace")
            proc.state = STATES.get(fields[0].decode(), "other")
            proc.ppid = int(fields[1])
            proc.ticks = int(fields[11]) + int(fields[12])
            proc.threads = int(fields[17])
            proc.rss_pages = int(fields[21])
        except (ValueError, IndexError) as exc:
            self._error("proc_parse", f"{self.root}/{proc.pid}/stat", exc)
            return False
        if proc.static is not None and proc.static.comm != proc.comm:
            proc.static = None  # exec'd: command line and cgroup may have changed
        return True

    def _close(self, proc: _Proc) -> None:
        if proc.fd is not None:
            os.close(proc.fd)
            proc.fd = None

    def close(self) -> None:
        """Close every descriptor the table holds."""
        for proc in self._procs.values():
            self._close(proc)
        self._procs.clear()

    # -- what a snapshot shows ----------------------------------------------------------------

    def __contains__(self, pid: object) -> bool:
        return pid in self._procs

    def pids(self) -> list[int]:
        """Every pid seen by the last ``refresh``."""
        return list(self._procs)

    def busiest(self, n: int) -> list[int]:
        """The ``n`` pids using the most CPU (then the most memory) over the last interval."""
        procs = self._procs.values()
        busy = heapq.nlargest(n, [p for p in procs if p.cpu_cores], key=attrgetter("cpu_cores", "rss_pages"))
        if len(busy) < n:
            busy += heapq.nlargest(n - len(busy), [p for p in procs if not p.cpu_cores], key=attrgetter("rss_pages"))
        return [p.pid for p in busy]

    def info(self, pid: int, memory_total_bytes: int | None) -> ProcessInfo | None:
        """One process as a snapshot row (command line redacted), or ``None`` if it is not in the table.

        Args:
            memory_total_bytes: physical memory, for ``memory_ratio`` (absent when ``None``).
        """
        proc = self._procs.get(pid)
        if proc is None:
            return None
        static = proc.static or self._static(proc)
        proc.static = static if static.final else None
        rss = proc.rss_pages * self.page_size
        return ProcessInfo(
            pid=pid,
            ppid=proc.ppid,
            name=static.name,
            state=proc.state,
            user=static.user,
            cpu_cores=proc.cpu_cores,
            memory_ratio=rss / memory_total_bytes if memory_total_bytes else None,
            rss_bytes=rss,
            cpu_seconds=proc.ticks / self.ticks_per_second,
            threads=proc.threads,
            command=static.command,
            pod_uid=static.pod_uid,
            container_id=static.container_id,
        )

    def _static(self, proc: _Proc) -> _Static:
        base = f"{self.root}/{proc.pid}"
        command = user = pod = container = None
        final = True
        try:
            cmdline = _read_bytes(f"{base}/cmdline")
            command = safe_command(cmdline) or f"[{safe_text(proc.comm, MAX_NAME_CHARS)}]"
            final = bool(cmdline) or _kernel_thread(proc.raw)
            user = self._user(os.stat(base).st_uid)
            pod, container = parse_cgroup(_read_bytes(f"{base}/cgroup").decode("utf-8", "replace"))
        except OSError as exc:
            if exc.errno in _VANISHED:
                self._vanished(proc.pid)
            else:
                self._error("proc_unreadable", base, exc)
        return _Static(proc.comm, safe_text(proc.comm, MAX_NAME_CHARS), user, command, pod, container, final)

    def _user(self, uid: int) -> str:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]

    # -- reporting once -----------------------------------------------------------------------

    def _vanished(self, pid: int) -> None:
        self._once.report(
            "vanished",
            "process %d exited while it was read; such processes are skipped (reported once)",
            pid,
            level=logging.INFO,
            count=False,
        )

    def _error(self, kind: str, path: str, exc: BaseException) -> None:
        self._once.report(
            kind,
            "cannot read %s (%s); skipping it and others like it (reported once; "
            "counted in fsdp_node_agent_errors_total{kind=%r})",
            path,
            exc,
            kind,
        )


#: ``PF_KTHREAD`` in the ``flags`` field (9) of ``/proc/pid/stat`` (include/linux/sched.h).
PF_KTHREAD = 0x00200000


def _kernel_thread(stat: bytes) -> bool:
    """Whether a ``/proc/pid/stat`` line is a kernel thread's (``PF_KTHREAD`` set; ``False`` if unreadable)."""
    try:
        return bool(int(stat[stat.rindex(b")") + 2 :].split()[6]) & PF_KTHREAD)
    except (ValueError, IndexError):
        return False


def _read_bytes(path: str) -> bytes:
    with open(path, "rb", buffering=0) as f:
        return f.read()
