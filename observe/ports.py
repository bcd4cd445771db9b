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
    """Whether ``host:port`` can be bound now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


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
