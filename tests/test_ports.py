"""``observe.ports``: free ports outside the kernel's ephemeral range, where outgoing connections
take their local ports (a port chosen there and bound later can be taken meanwhile)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from observe import ports
from observe.errors import PortInUseError
from observe.ports import port_holder, port_is_free


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


def test_a_port_left_in_time_wait_is_free_as_our_servers_bind_it() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    served, _ = listener.accept()
    served.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
    client.close()
    listener.close()
    with socket.socket() as plain:  # the premise: a bind without SO_REUSEADDR is refused here
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert port_is_free(port)


def test_a_taken_port_says_who_holds_it() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        assert not port_is_free(port)
        assert port_holder(port) == f"pid {os.getpid()} ({Path(f'/proc/{os.getpid()}/comm').read_text().strip()})"
        err = PortInUseError("--agent-port", "127.0.0.1", port, "pass another --agent-port")
        assert f"port {port} on 127.0.0.1 is already in use by pid {os.getpid()} (" in str(err)
    assert port_holder(port) is None
