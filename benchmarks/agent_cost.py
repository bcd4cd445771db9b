"""What the node agent costs, side by side with prometheus-node-exporter on this machine.

One command: starts about 1,000 extra sleeping processes, the agent (1 s collection) and
``prometheus-node-exporter`` (Debian package, default collectors), then

1. scrapes each ``/metrics`` once a second for ``--seconds`` (gzip, as Prometheus asks) and
   reports the CPU seconds each process used (utime + stime of all its threads, from
   ``/proc/<pid>/stat``), their ratio, and each one's peak RSS (``VmHWM``);
2. scrapes each with ``--scrapers`` concurrent scrapers (each on its own keep-alive connection,
   all firing at the same instant once a second, the worst case for a burst) for
   ``--latency-seconds`` and reports ``/metrics`` latency p50/p99 (request written to body read,
   measured by a small asyncio client so the client adds little of its own).

Targets: agent CPU <= node-exporter CPU at the same scrape load; agent RSS <= 80 MB;
agent ``/metrics`` p99 <= 10 ms with 20 concurrent scrapers. Prints a table and writes JSON
(``--out``). Usage::

    python -m benchmarks.agent_cost                 # the full run: 60 s + 20 s
    python -m benchmarks.agent_cost --seconds 5 --latency-seconds 3 --processes 100   # smoke test
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from observe.ports import free_port

REPO = Path(__file__).resolve().parents[1]
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
TICKS = os.sysconf("SC_CLK_TCK")
TARGETS = {"cpu_ratio_max": 1.0, "agent_rss_mib_max": 80 * 1e6 / 2**20, "p99_ms_max": 10.0}


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of ``pid`` (proc(5) fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_bytes(pid: int) -> int:
    """``VmHWM``: the largest resident set the process has had."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"^VmHWM:\s+(\d+) kB", f.read(), re.M).group(1)) * 1024


def wait_ready(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"agent_cost: {url} did not answer within {timeout:g} s") from None
            time.sleep(0.1)


class Scraper:
    """One keep-alive HTTP/1.1 connection that GETs a path and times the whole response."""

    def __init__(self, port: int, path: str = "/metrics") -> None:
        self.port, self.request = (
            port,
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip\r\nConnection: keep-alive\r\n\r\n"
            ).encode(),
        )
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self) -> tuple[float, int]:
        """Seconds from writing the request to reading the last body byte, and the body size."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        start = time.perf_counter()
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1]
        if status != b"200":
            raise RuntimeError(f"HTTP {status.decode()} from port {self.port}")
        if match := re.search(rb"(?i)content-length:\s*(\d+)", head):
            length = int(match.group(1))
            await self.reader.readexactly(length)
        else:  # Transfer-Encoding: chunked (node-exporter's Go server)
            length = 0
            while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                length += size
                await self.reader.readexactly(size + 2)
            await self.reader.readuntil(b"\r\n")
        return time.perf_counter() - start, length

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def scrape_each_second(ports: dict[str, int], seconds: float, pids: dict[str, int]) -> dict[str, dict]:
    """Phase 1: one scrape per second per target; CPU seconds and peak RSS of each."""
    scrapers = {name: Scraper(port) for name, port in ports.items()}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    sizes: dict[str, int] = {}
    start = time.monotonic()
    for tick in range(int(seconds)):
        for name, scraper in scrapers.items():
            sizes[name] = (await scraper.get())[1]
        await asyncio.sleep(max(0.0, start + tick + 1 - time.monotonic()))
    elapsed = time.monotonic() - start
    out = {
        name: {
            "cpu_seconds": cpu_seconds(pid) - before[name],
            "peak_rss_bytes": peak_rss_bytes(pid),
            "gzip_body_bytes": sizes[name],
            "seconds": elapsed,
        }
        for name, pid in pids.items()
    }
    for scraper in scrapers.values():
        scraper.close()
    return out


async def burst_latency(port: int, scrapers: int, seconds: float) -> list[float]:
    """Phase 2: ``scrapers`` connections fire together once a second; every response's latency."""
    clients = [Scraper(port) for _ in range(scrapers)]
    await asyncio.gather(*(c.get() for c in clients))  # connect and warm up
    latencies: list[float] = []
    start = time.monotonic()
    for tick in range(int(seconds)):
        results = await asyncio.gather(*(c.get() for c in clients))
        latencies += [r[0] for r in results]
        await asyncio.sleep(max(0.0, start + tick + 1 - time.monotonic()))
    for client in clients:
        client.close()
    return latencies


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by the nearest-rank method."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered) + 0.5) - 1))]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; return 0 when every target is met, 1 otherwise."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60, help="length of the CPU phase (default 60)")
    ap.add_argument("--latency-seconds", type=float, default=20, help="length of the latency phase (default 20)")
    ap.add_argument("--processes", type=int, default=1000, help="extra sleeping processes (default 1000)")
    ap.add_argument("--scrapers", type=int, default=20, help="concurrent scrapers in the latency phase (default 20)")
    scratch = Path(tempfile.gettempdir()) / "fsdp-observe-benchmarks"
    ap.add_argument(
        "--out",
        type=Path,
        default=scratch / "agent_cost.json",
        help="JSON output (default %(default)s; the committed figures: benchmarks/results/agent_cost.json)",
    )
    ns = ap.parse_args(argv)
    if not shutil.which(NODE_EXPORTER):
        print(f"error: {NODE_EXPORTER} not found; apt-get install prometheus-node-exporter", file=sys.stderr)
        return 2

    sleepers = [subprocess.Popen(["sleep", "100000"]) for _ in range(ns.processes)]
    ports = {"agent": free_port(), "node_exporter": free_port()}
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "observe.cli",
            "agent",
            "--address",
            "127.0.0.1",
            "--port",
            str(ports["agent"]),
            "--interval",
            "1",
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    exporter = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{ports['node_exporter']}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pids = {"agent": agent.pid, "node_exporter": exporter.pid}
    try:
        for port in ports.values():
            wait_ready(f"http://127.0.0.1:{port}/metrics")
        time.sleep(3)  # let both settle (first collections, caches)
        processes = sum(name.isdigit() for name in os.listdir("/proc"))
        load_before = os.getloadavg()
        print(
            f"agent_cost: {processes} processes on this machine ({ns.processes} extra sleeping), "
            f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f}; {ns.seconds:g} s at 1 scrape/s, "
            f"then {ns.scrapers} concurrent scrapers for {ns.latency_seconds:g} s",
            flush=True,
        )
        cost = asyncio.run(scrape_each_second(ports, ns.seconds, pids))
        latency = {
            name: asyncio.run(burst_latency(port, ns.scrapers, ns.latency_seconds)) for name, port in ports.items()
        }
    finally:
        for proc in (agent, exporter, *sleepers):
            proc.send_signal(signal.SIGTERM)
        for proc in (agent, exporter, *sleepers):
            proc.wait()

    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "processes": processes,
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "settings": vars(ns) | {"out": str(ns.out)},
        "cost": cost,
        "latency_ms": {
            name: {
                "p50": percentile(v, 0.50) * 1e3,
                "p99": percentile(v, 0.99) * 1e3,
                "max": max(v) * 1e3,
                "mean": statistics.fmean(v) * 1e3,
                "samples": len(v),
            }
            for name, v in latency.items()
        },
    }
    a, n = cost["agent"], cost["node_exporter"]
    result["cpu_ratio"] = a["cpu_seconds"] / n["cpu_seconds"] if n["cpu_seconds"] else float("inf")
    result["targets"] = TARGETS
    result["met"] = {
        "cpu": result["cpu_ratio"] <= TARGETS["cpu_ratio_max"],
        "rss": a["peak_rss_bytes"] / 2**20 <= TARGETS["agent_rss_mib_max"],
        "p99": result["latency_ms"]["agent"]["p99"] <= TARGETS["p99_ms_max"],
    }
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")

    la, ln = result["latency_ms"]["agent"], result["latency_ms"]["node_exporter"]
    rows = [
        ("", "agent", "node-exporter", "target"),
        (f"CPU seconds in {a['seconds']:.0f} s", f"{a['cpu_seconds']:.2f}", f"{n['cpu_seconds']:.2f}", ""),
        ("CPU ratio agent / node-exporter", f"{result['cpu_ratio']:.2f}", "", "<= 1"),
        ("peak RSS (MB)", f"{a['peak_rss_bytes'] / 1e6:.1f}", f"{n['peak_rss_bytes'] / 1e6:.1f}", "<= 80"),
        (f"/metrics p50 ms ({ns.scrapers} scrapers)", f"{la['p50']:.2f}", f"{ln['p50']:.2f}", ""),
        (f"/metrics p99 ms ({ns.scrapers} scrapers)", f"{la['p99']:.2f}", f"{ln['p99']:.2f}", "<= 10"),
        ("/metrics body, gzip (bytes)", f"{a['gzip_body_bytes']:,}", f"{n['gzip_body_bytes']:,}", ""),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        cells = zip(row, widths, strict=True)
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(cells)))
    missed = [k for k, v in result["met"].items() if not v]
    print(
        f"targets met: {', '.join(k for k, v in result['met'].items() if v) or 'none'}"
        + (f"; missed: {', '.join(missed)}" if missed else "")
    )
    print(
        f"load average before / after: {load_before[0]:.2f} / {result['machine']['load_average_after'][0]:.2f} "
        "(other work on the machine shows up in the latencies)"
    )
    print(f"JSON: {ns.out}")
    return 0 if all(result["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
