"""A recorded fleet served over real HTTP: one local server per node agent or trainer rank.

Agents answer ``/snapshot`` and ``/snapshot?view=summary`` with a snapshot recorded from the real
agent (tests/tui/recorded, ``record_fleet.py``), its times moved to the moment of the request the
way a live agent's would be (data ``age`` seconds old; XID events keep their spacing, the newest
``xid_age`` seconds ago); the summary is made by the agent's own ``summary()``. Trainer ranks
answer ``/metrics`` with the text the trainer's real exporter (``observe.training.collector``) renders.
Faults: an endpoint that answers garbage (``malformed``), one that answers too late (``slow``),
and a port nobody listens on (``unreachable``).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from observe.agent.server import summary
from observe.model import NodeSnapshot

RECORDED = Path(__file__).resolve().parents[1] / "tui" / "recorded"
NODES = ("gpu-node-1", "gpu-node-2", "cpu-node-3")


def recorded(node: str, now: float, age: float = 0.5, xid_age: float = 120.0) -> NodeSnapshot:
    """The recorded snapshot of ``node`` as if taken ``age`` seconds before ``now``."""
    data = json.loads((RECORDED / f"{node}.json").read_text())
    data["time_unix"] = now - age
    events = data["xid_events"]
    if events:
        newest = max(e["time_unix"] for e in events)
        for e in events:
            e["time_unix"] = now - xid_age - (newest - e["time_unix"])
    return NodeSnapshot.from_json(json.dumps(data))


class _Server:
    def __init__(self, answer: Callable[[str], tuple[int, str, bytes]], delay: float = 0.0, port: int = 0) -> None:
        self.requests: list[str] = []
        self.connections: set[socket.socket] = set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                owner.connections.add(self.connection)

            def do_GET(self) -> None:
                owner.requests.append(self.path)
                if delay:
                    time.sleep(delay)
                status, kind, body = answer(self.path)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        """Stop listening and drop open connections, as a process that exits would."""
        self.httpd.shutdown()
        self.httpd.server_close()
        for conn in list(self.connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class RecordedFleet:
    """Local servers standing in for a fleet; ``close()`` stops them all."""

    def __init__(self) -> None:
        self.servers: dict[str, _Server] = {}

    def agent(self, node: str, age: float = 0.5) -> str:
        """Serve ``node``'s recorded snapshot; returns the agent's base URL."""

        def answer(path: str) -> tuple[int, str, bytes]:
            snap = recorded(node, time.time(), age)
            if path.startswith("/snapshot"):
                view = summary(snap) if "view=summary" in path else snap
                return 200, "application/json", view.to_json().encode()
            return 404, "text/plain", b"not found\n"

        return self._add(node, answer)

    def malformed(self, name: str = "malformed") -> str:
        """An endpoint answering 200 with something that is not a snapshot."""
        return self._add(name, lambda path: (200, "application/json", b'{"schema_version": 1, "gpus": "lots"'))

    def slow(self, name: str = "slow", delay: float = 5.0) -> str:
        """An endpoint that answers only after ``delay`` seconds."""

        def answer(path: str) -> tuple[int, str, bytes]:
            snap = recorded("gpu-node-1", time.time())
            return 200, "application/json", dataclasses.replace(snap, node=name).to_json().encode()

        return self._add(name, answer, delay)

    def trainer(self, name: str, render: Callable[[], bytes]) -> str:
        """A trainer rank serving ``render()`` as ``/metrics``; returns its ``/metrics`` URL."""
        return self._add(name, lambda path: (200, "text/plain; version=0.0.4", render())) + "/metrics"

    def rank(self, name: str, pages: dict[str, Callable[[], bytes]], delay: float = 0.0) -> str:
        """A trainer rank serving ``pages`` (path -> body: ``/metrics``, ``/debug/state``), answering
        each request after ``delay`` seconds (a rank whose threads do not run); its ``/metrics`` URL."""

        def answer(path: str) -> tuple[int, str, bytes]:
            render = pages.get(path)
            if render is None:
                return 404, "text/plain", b"not found\n"
            kind = "application/json" if path.startswith("/debug/") else "text/plain; version=0.0.4"
            return 200, kind, render()

        return self._add(name, answer, delay) + "/metrics"

    def trainer_on(self, port: int, render: Callable[[], bytes], name: str = "") -> str:
        """``trainer`` on a chosen port (another process holding a rank's port); its ``/metrics`` URL."""
        server = self.servers[name or f"port-{port}"] = _Server(
            lambda path: (200, "text/plain; version=0.0.4", render()), port=port
        )
        return server.url + "/metrics"

    @staticmethod
    def unreachable() -> str:
        """A URL on a port nothing listens on."""
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def requests(self, name: str) -> list[str]:
        """Paths requested from ``name`` so far."""
        return list(self.servers[name].requests)

    def _add(self, name: str, answer, delay: float = 0.0) -> str:
        server = self.servers[name] = _Server(answer, delay)
        return server.url

    def close(self) -> None:
        for server in self.servers.values():
            server.close()


def trainer_exposition(
    rank: int,
    node: str,
    gpu_uuid: str | None,
    step_seconds: float,
    data_wait: float,
    step: int = 120,
    world_size: int = 2,
    run_id: str = "llama-ft-7",
    phase: str | None = None,
    compute: float | None = None,
) -> Callable[[], bytes]:
    """A rank's ``/metrics`` as the trainer's own exporter renders it, after ``step`` steps; with
    ``phase``, its ``fsdp_train_phase`` series say the rank is in that phase. With ``compute``
    (seconds per step), its collective tracking is on (``observe.training.forensics``: the hang and
    straggler series): each step of the last log window spent ``compute`` computing and the rest
    after the data wait blocked in collectives, 12 collectives per step, none in flight."""
    from observe.training.collector import TrainingCollector
    from observe.training.phases import PhaseClock
    from observe.training.window import WindowStats

    labels = {"run_id": run_id, "rank": str(rank), "local_rank": str(rank), "node": node}
    if gpu_uuid:
        labels["gpu_uuid"] = gpu_uuid
    info = {
        "model": "llama2-7b",
        "sharding_strategy": "FULL_SHARD",
        "mixed_precision": "bf16",
        "world_size": str(world_size),
        "device_type": "cuda" if gpu_uuid else "cpu",
        "backend": "nccl",
    }
    metrics = TrainingCollector(
        labels,
        info,
        planned_steps=200,
        flops_per_token=40_000_000_000,
        peak_flops=989e12 if gpu_uuid else None,
        export_global=rank == 0,
        phases=PhaseClock(phase) if phase else None,
    )
    for s in range(1, step + 1):
        metrics.on_step(s, step_seconds, data_wait, labelled_tokens=8192, samples=4, learning_rate=2e-5)
    window = WindowStats(steps=10, seconds=10 * step_seconds, data_wait_seconds=10 * data_wait, labelled_tokens=81920)
    metrics.on_window(window, loss=2.0 + 100 / step, grad_norm=1.0, global_tokens_per_second=20000.0, memory=None)
    if compute is not None:
        forensics = _forensics(labels, step, step_seconds, data_wait, compute, phase)
        metrics.add_families(lambda collector: forensics.families(collector.labels))
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry)
    return lambda: text


def _forensics(
    labels: dict[str, str], step: int, step_seconds: float, data_wait: float, compute: float, phase: str | None
):
    """A rank's real ``RankForensics`` after a log window of steps of ``compute`` seconds each."""
    from observe.training.collectives import CollectiveTracker
    from observe.training.forensics import RankForensics

    tracker = CollectiveTracker()
    tracker.issued = {"0": 12 * step}
    tracker.completed = {"0": 12 * step}
    # its own Flight Recorder status (none), never this test process's, whose process groups other
    # tests may have used: the fleet's figures must not depend on the order tests run in
    forensics = RankForensics(
        tracker, dict(labels), phase=lambda: phase or "training", step=lambda: step, flight_status=lambda: None
    )
    for s in range(step - 9, step + 1):
        tracker.wait_seconds += max(0.0, step_seconds - data_wait - compute)
        forensics.step_ended(s, 0.0, step_seconds, data_wait)
    forensics.window_closed()
    return forensics
