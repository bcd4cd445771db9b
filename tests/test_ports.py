"""``observe.ports``: free ports outside the kernel's ephemeral range, where outgoing connections
take their local ports (a port chosen there and bound later can be taken meanwhile)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from observe import ports


def test_blocks_lie_below_the_ephemeral_range_and_can_be_bound() -> None:
    first_ephemeral = ports.ephemeral_range()[0]
    for _ in range(20):
        base = ports.free_port_block(4)
        assert ports.LOWEST_PORT <= base and base + 4 <= first_ephemeral
        held = []
        try:
            for port in range(base, base + 4):
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                held.append(s)
        finally:
            for s in held:
                s.close()


def test_a_taken_port_is_never_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        choices = iter([port, port + 1])
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (port + 10, 60999))
        monkeypatch.setattr(ports.random, "randrange", lambda lo, hi: next(choices))
        monkeypatch.setattr(ports, "LOWEST_PORT", port - 1)
        assert ports.free_port() == port + 1


def test_the_kernel_range_is_read_and_a_full_range_falls_back_to_port_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "ip_local_port_range"
    conf.write_text("1024\t65535\n")
    assert ports.ephemeral_range(str(conf)) == (1024, 65535)
    assert ports.ephemeral_range(str(tmp_path / "missing")) == ports.DEFAULT_EPHEMERAL_RANGE
    monkeypatch.setattr(ports, "ephemeral_range", lambda: (1024, 65535))  # no room below it
    assert ports.port_is_free(ports.free_port_block(2))
