"""A simulated fleet: ONE process answering as N node agents, each on its own port.

Each simulated node has 8 GPUs (H100-like readings) and 300 processes, 96 cores, and answers
``GET /snapshot`` (full) and ``GET /snapshot?view=summary`` exactly as ``observe.agent`` does
(``observe.agent.server.summary``), over HTTP/1.1 keep-alive, from bodies rendered in advance
(as the real agent serves a cached rendering). Bodies are re-rendered every ``--refresh`` seconds
with a new ``time_unix`` and new readings, so the client sees fresh data. So that one process can
stand in for 4,096 agents, summaries are made from ``VARIANTS`` rendered node templates with the
node's name, GPU UUIDs and time written in (a byte replacement, not a JSON rendering per node).

    python -m benchmarks.fleet --nodes 1024    # prints "ready" and the JSON list of ports when serving
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import time
from collections.abc import Awaitable, Callable

from observe.agent.server import summary
from observe.model import AgentHealth, CpuStats, GpuInfo, GpuProcess, HostStats, MemoryStats, NodeSnapshot, ProcessInfo

GPUS, PROCESSES, CORES = 8, 300, 96
#: Distinct readings rendered per refresh; node ``i`` serves variant ``(i + refresh) % VARIANTS``.
VARIANTS = 64


def make_node(index: int, now: float, seed: int, processes: bool = True) -> NodeSnapshot:
    """Node ``index`` of the fleet at ``now`` (readings vary with ``seed``); ``processes=False``
    leaves the process lists out (the summary view has none; building 300 of them per node for
    nothing would load the server)."""
    with_processes = processes
    r = random.Random(index * 7919 + seed)
    gpus = tuple(
        GpuInfo(
            index=g,
            uuid=f"GPU-{index:08x}-{g:04x}-4000-8000-{seed % 4096:012x}",
            name="NVIDIA H100 80GB HBM3",
            pci_bus=f"0000:{0x18 + 0x10 * g:02x}:00",
            driver_version="550.54.15",
            utilization_ratio=r.uniform(0.6, 1.0),
            memory_utilization_ratio=r.uniform(0.2, 0.6),
            memory_total_bytes=80 << 30,
            memory_used_bytes=r.randrange(40 << 30, 78 << 30),
            memory_reserved_bytes=512 << 20,
            temperature_celsius=float(r.randrange(40, 84)),
            power_watts=r.uniform(300, 700),
            power_limit_watts=700.0,
            sm_clock_hertz=1.98e9,
            memory_clock_hertz=2.619e9,
            fan_speed_ratio=None,
            pcie_rx_bytes_per_second=r.uniform(1e6, 1e9),
            pcie_tx_bytes_per_second=r.uniform(1e6, 1e9),
            encoder_utilization_ratio=0.0,
            decoder_utilization_ratio=0.0,
            ecc_corrected_total=0,
            ecc_uncorrected_total=0,
            throttle_reasons=("sw_power_cap",) if r.random() < 0.3 else (),
            mig_enabled=False,
        )
        for g in range(GPUS)
    )
    procs = tuple(
        ProcessInfo(
            pid=1000 + p,
            ppid=1,
            name="python3" if p < GPUS else f"worker{p}",
            state="running" if p < GPUS else "sleeping",
            user="root",
            cpu_cores=r.uniform(0.9, 1.0) if p < GPUS else r.uniform(0, 0.05),
            memory_ratio=r.uniform(0, 0.01),
            rss_bytes=r.randrange(1 << 30),
            cpu_seconds=r.uniform(0, 1e5),
            threads=r.randrange(1, 64),
            command=f"/usr/bin/python3 -m trainer --preset llama2-7b --local-rank {p % GPUS} --log-every 10 "
            f"--data /mnt/data/shard-{p:05d}.bin",
            pod_uid="0f2c9a44-52a3-4b8e-9c41-3e2d7f1a6b90",
            container_id=f"{p:064x}",
        )
        for p in range(PROCESSES if with_processes else 0)
    )
    gpu_processes = tuple(
        GpuProcess(
            gpu=g,
            gpu_uuid=gpus[g].uuid,
            pid=1000 + g,
            used_memory_bytes=gpus[g].memory_used_bytes,
            sm_utilization_ratio=gpus[g].utilization_ratio,
            name="python3",
            user="root",
            command=procs[g].command,
        )
        for g in range(GPUS if with_processes else 0)
    )
    cores = tuple(r.uniform(0.05, 0.95) for _ in range(CORES))
    host = HostStats(
        cpu_count=CORES,
        cpu=CpuStats(sum(cores) / CORES, cores),
        memory=MemoryStats(2 << 40, r.randrange(200 << 30, 1 << 40), 1 << 40, 1 << 30, 300 << 30, 0, 0),
        load1=40.0,
        load5=41.0,
        load15=42.0,
        uptime_seconds=1.2e6,
        processes=1400,
        threads=21000,
        processes_by_state={"running": 12, "sleeping": 1388},
    )
    agent = AgentHealth(
        version="0.1.0",
        interval_seconds=1.0,
        collection_seconds=0.04,
        collections=1000,
        cpu_seconds=120.0,
        resident_memory_bytes=60 << 20,
        sources={"procfs": "ok", "nvml": "ok", "kernel_log": "ok"},
    )
    return NodeSnapshot(
        node=f"gpu-node-{index:04d}",
        time_unix=now,
        host=host,
        processes=procs,
        gpus=gpus,
        gpu_processes=gpu_processes,
        agent=agent,
    )


class Fleet:
    """Bodies of every simulated node, re-rendered on a timer (full bodies only when asked for)."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.seed = 0
        self.summaries: list[bytes] = []
        self.full: dict[int, bytes] = {}
        self.render()

    def render(self) -> None:
        now, self.seed = time.time(), self.seed + 1
        variants = []
        for v in range(VARIANTS):
            body = summary(make_node(v, now, self.seed, processes=False)).to_json().encode()
            variants.append((body, b"gpu-node-%04d" % v, b"GPU-%08x-" % v))
        summaries = []
        for i in range(self.nodes):
            body, name, uuid = variants[(i + self.seed) % VARIANTS]
            summaries.append(body.replace(name, b"gpu-node-%04d" % i).replace(uuid, b"GPU-%08x-" % i))
        self.summaries = summaries
        self.full = {}

    def body(self, index: int, target: bytes) -> bytes:
        if b"view=summary" in target:
            return self.summaries[index]
        if index not in self.full:
            self.full[index] = make_node(index, time.time(), self.seed).to_json().encode()
        return self.full[index]


async def serve(fleet: Fleet, refresh: float) -> None:
    async def handle(index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                body = fleet.body(index, target)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            writer.close()

    def handler(index: int) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        return lambda reader, writer: handle(index, reader, writer)

    servers = []
    for i in range(fleet.nodes):  # port 0: the kernel picks free ports, so nothing can collide
        servers.append(await asyncio.start_server(handler(i), "127.0.0.1", 0, backlog=64))
    print("ready", json.dumps([s.sockets[0].getsockname()[1] for s in servers]), flush=True)
    while True:
        await asyncio.sleep(refresh)
        fleet.render()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--refresh", type=float, default=5.0, help="seconds between re-renders (default 5)")
    ns = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * ns.nodes + 256)), hard))
    asyncio.run(serve(Fleet(ns.nodes), ns.refresh))


if __name__ == "__main__":
    main()
