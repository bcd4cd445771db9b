"""The per-rank ``/metrics`` endpoint of the training-metrics core, and its port rule.

A rank serves on ``port_base + LOCAL_RANK`` (``observe.catalog.TRAINER_PORT_BASE`` by default),
so every rank of a node has its own port and a PodMonitor can name them ``metrics-<local_rank>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.registry import Collector

from observe.catalog import TRAINER_PORT_BASE
from observe.errors import bind_error


def rank_port(local_rank: int, port_base: int = TRAINER_PORT_BASE) -> int:
    """The port of the rank with ``local_rank`` on its node: ``port_base + local_rank``."""
    return port_base + local_rank


@dataclass
class Served:
    """A running endpoint: the registry it serves and where."""

    registry: CollectorRegistry
    address: str
    port: int
    _httpd: Any

    def shutdown(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()


def serve(metrics: Collector, address: str, port: int, field: str = "--metrics-port") -> Served:
    """Serve ``metrics`` (and this process's CPU/RSS) as Prometheus text on ``address:port``.

    Uses a fresh ``CollectorRegistry`` (never the global one) and prometheus_client's threaded
    HTTP server on a daemon thread. Port 0 lets the kernel choose (``Served.port`` says which).

    Raises:
        UserError: the port is taken (``PortInUseError``) or cannot be bound (naming ``field``).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    ProcessCollector(registry=registry)
    try:
        httpd, _ = start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise bind_error(field, address, port, exc,
                         f"stop what holds it or pass {field} with a free base port") from None
    return Served(registry, address, int(httpd.server_port), httpd)
