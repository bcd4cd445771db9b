"""The per-rank ``/metrics`` endpoint of the training-metrics core, and its port rule.

A rank serves on ``port_base + LOCAL_RANK`` (``observe.catalog.TRAINER_PORT_BASE`` by default),
so every rank of a node has its own port and a PodMonitor can name them ``metrics-<local_rank>``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.registry import Collector

from observe.catalog import TRAINER_PORT_BASE
from observe.errors import bind_error


def rank_port(local_rank: int, port_base: int = TRAINER_PORT_BASE) -> int:
    """The port of the rank with ``local_rank`` on its node: ``port_base + local_rank``."""
    return port_base + local_rank


def serve(metrics: Collector, address: str, port: int, field: str = "--metrics-port") -> CollectorRegistry:
    """Serve ``metrics`` (and this process's CPU/RSS) as Prometheus text on ``address:port``.

    Uses a fresh ``CollectorRegistry`` (never the global one) and prometheus_client's threaded
    HTTP server.

    Raises:
        UserError: the port is taken or cannot be bound (flag ``--metrics-port``).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    ProcessCollector(registry=registry)
    try:
        start_http_server(port, addr=address, registry=registry)
    except OSError as exc:
        raise bind_error(field, address, port, exc,
                         f"stop what holds it or pass {field} with a free base port") from None
    return registry
