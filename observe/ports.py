"""Free TCP ports on this machine: the one helper the demo, the trainer and the tests use.

A port found free can be taken by another process before it is bound; callers that must not
race bind port 0 themselves. The ports given here lie *below* the kernel's ephemeral range
(``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default on Linux): that range is
where every outgoing connection takes its local port, so a port chosen there and bound seconds
later (a rank's metrics port, bound after torch has imported; Prometheus scraping targets
meanwhile) could be taken by a connection in between, as one test run's rank 1 found (its port,
the kernel's port-0 choice plus one, was in use when it bound it). Standard library only.
"""

from __future__ import annotations

import os
import random
import socket

#: The lowest port handed out: above the registered ports most services use by default (the
#: agent's 9401, the trainer's 9500+, Prometheus' 9090, etcd's 2379).
LOWEST_PORT = 15000
#: Linux's default ``ip_local_port_range``, for systems that do not expose it.
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)


def ephemeral_range(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections, ``(first, last)``."""
    try:
        with open(path) as fh:
            first, last = (int(v) for v in fh.read().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return first, last


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` can be bound now, as our servers bind it: with ``SO_REUSEADDR``
    (Python's ``HTTPServer`` sets it), so the ``TIME_WAIT`` sockets a server that just stopped
    leaves behind do not count as holding the port, while a listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def port_holder(port: int, proc: str = "/proc") -> str | None:
    """Who listens on TCP ``port``, for an error message: ``pid 123 (python3)``; ``a process of
    another user`` when the socket is there but no visible process has it open; ``None`` when no
    socket listens there (or off Linux). Reads ``/proc/net/tcp{,6}`` (state ``0A`` is LISTEN) and
    each process's ``fd`` links (``socket:[inode]``)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        if inodes & _fd_links(f"{proc}/{pid}/fd"):
            try:
                with open(f"{proc}/{pid}/comm") as fh:
                    return f"pid {pid} ({fh.read().strip()})"
            except OSError:
                return f"pid {pid}"
    return "a process of another user"


def _fd_links(folder: str) -> set[str]:
    """Where a process's open files point (``socket:[inode]`` for sockets); what cannot be read
    (another user's process, an fd closed meanwhile) is left out."""
    links: set[str] = set()
    try:
        fds = os.listdir(folder)
    except OSError:
        return links
    for fd in fds:
        try:
            links.add(os.readlink(f"{folder}/{fd}"))
        except OSError:
            continue
    return links


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that is free right now, outside the ephemeral range (``free_port_block``)."""
    return free_port_block(1, host)


def free_port_block(count: int, host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A base port such that ``base .. base+count-1`` are all free right now on ``host``.

    For a run whose ranks serve on ``base + local_rank``. The block lies between ``LOWEST_PORT``
    and the start of the ephemeral range, chosen at random so that concurrent callers rarely
    meet; where the ephemeral range leaves no room below it, the kernel's choice for port 0.

    Raises:
        OSError: no such block found in ``attempts`` tries.
    """
    first_ephemeral = ephemeral_range()[0]
    for _ in range(attempts):
        if first_ephemeral - count > LOWEST_PORT:
            base = random.randrange(LOWEST_PORT, first_ephemeral - count)
        else:
            with socket.socket() as s:
                s.bind((host, 0))
                base = int(s.getsockname()[1])
        if base + count < 65535 and all(port_is_free(p, host) for p in range(base, base + count)):
            return base
    raise OSError(f"no block of {count} free ports found on {host}")
