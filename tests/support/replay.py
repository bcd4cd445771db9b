"""Stand-ins for what cannot run on a machine without a GPU, served over real HTTP.

- ``StaticServer`` replays recorded ``/metrics`` bodies (e.g. dcgm-exporter's, ``tests/cases/dcgm``)
  on 127.0.0.1, one path per body, for a real Prometheus to scrape.
- ``cuda_rank_exposition`` writes what a CUDA trainer rank exports *and a CPU rank cannot*
  (``gpu_uuid`` on every series, MFU, the caching allocator's memory) with the trainer's own
  exporter (``observe.training.collector.TrainingCollector``) fed CUDA-like figures, so the format is the
  trainer's and only the values are made up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, generate_latest

from observe import catalog as c

#: Families only a CUDA rank exports (plus fsdp_train_info, which carries its gpu_uuid).
CUDA_ONLY = (
    c.TRAIN_INFO,
    c.TRAIN_MFU,
    c.TRAIN_DEVICE_MEMORY_ALLOCATED,
    c.TRAIN_DEVICE_MEMORY_RESERVED,
    c.TRAIN_DEVICE_MEMORY_PEAK,
    c.TRAIN_DEVICE_ALLOC_RETRIES,
)


class StaticServer:
    """Serves fixed bodies at fixed paths on 127.0.0.1 (Prometheus text format) from a thread.

    Args:
        bodies: path (``/dcgm``) → body bytes, or a function returning the body of each request
            (a counter that grows between scrapes).
    """

    def __init__(self, bodies: dict[str, bytes | Callable[[], bytes]]) -> None:
        table = dict(bodies)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = table.get(self.path)
                body = found() if callable(found) else found
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args) -> None:  # quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StaticServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def cuda_rank_exposition(
    run_id: str, rank: int, node: str, gpu_uuid: str, world_size: int, peak_flops: float = 989e12
) -> bytes:
    """The CUDA-only families of one rank as the trainer's exporter writes them.

    The rank has done 20 steps of one 4096-token sequence at 0.5 s each (MFU about 0.33) (Llama 2 7B shapes, FULL_SHARD,
    bf16); ``peak_flops`` is the dense BF16 peak of an H100/H200 SXM (NVIDIA datasheet).
    """
    from observe.training.collector import DeviceMemory, TrainingCollector
    from observe.training.window import WindowStats

    labels = {"run_id": run_id, "rank": str(rank), "local_rank": str(rank), "node": node, "gpu_uuid": gpu_uuid}
    info = {
        "model": "llama2-7b",
        "sharding_strategy": "FULL_SHARD",
        "mixed_precision": "bf16",
        "world_size": str(world_size),
        "device_type": "cuda",
        "backend": "nccl",
        "activation_checkpointing": "full",
        "mesh": str(world_size),
    }
    metrics = TrainingCollector(
        labels,
        info,
        planned_steps=1000,
        flops_per_token=6 * 6_738_000_000,
        peak_flops=peak_flops,
        export_global=rank == 0,
    )
    for step in range(1, 21):
        metrics.on_step(step, 0.5, 0.002, 4096, 1, 3e-5)
    gib = 2**30
    metrics.on_window(
        WindowStats(steps=20, seconds=10.0, data_wait_seconds=0.04, labelled_tokens=20 * 4096),
        loss=1.9,
        grad_norm=0.8,
        global_tokens_per_second=world_size * 8192.0,
        memory=DeviceMemory(allocated=61 * gib, reserved=70 * gib, peak_allocated=66 * gib, alloc_retries=0),
    )
    wanted = {m.family for m in CUDA_ONLY}
    families = [f for f in metrics.collect() if f.name in wanted]

    class Only:
        def collect(self):
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Only())
    return generate_latest(registry)
