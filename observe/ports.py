"""Free TCP ports on this machine: the one helper the demo, the trainer and the tests use.

A port found free can be taken by another process before it is bound; callers that must not
race bind port 0 themselves. Standard library only.
"""

from __future__ import annotations

import socket


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` can be bound now."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that is free right now (the kernel's choice for port 0)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_port_block(count: int, host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A base port such that ``base .. base+count-1`` are all free right now on ``host``.

    For a run whose ranks serve on ``base + local_rank``.

    Raises:
        OSError: no such block found in ``attempts`` tries.
    """
    for _ in range(attempts):
        base = free_port(host)
        if base + count < 65535 and all(port_is_free(p, host) for p in range(base, base + count)):
            return base
    raise OSError(f"no block of {count} free ports found on {host}")
