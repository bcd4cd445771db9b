"""``fsdp-observe top`` fan-in at 16, 1,024 and 4,096 nodes: refresh cost, event-loop stalls, memory.

One fleet process (``benchmarks/fleet.py``) answers as N agents on N ports, each node with 8 GPUs
and 300 processes. The real app (``make_app`` over a ``DirectSource``) runs headless
(``App.run_test``) at 200x50 with its fan-in thread refreshing at the adaptive interval; first on
the Cluster screen (summaries from every node), then on the GPU grid screen (every GPU of every
node drawn each refresh), then on the Node screen of one node (that node's full snapshot every
refresh as well). Per refresh it records:

- wall: seconds from the refresh's start until the ``ClusterSnapshot`` was built (all pulls,
  decoding and figures);
- fan-in CPU: CPU seconds of the fan-in thread during that refresh;
- app CPU: CPU seconds of the whole TUI process per refresh interval (UI thread included);
- stall: the longest lateness of a 5 ms timer task running in the app's event loop while the app
  renders (the UI's responsiveness; target < 50 ms);
- redraw: time the UI thread spent taking the snapshot onto the screen;
- RSS: the TUI process's resident memory at the end of the phase, and its peak (``ru_maxrss``);
  with several sizes, each size runs in a process of its own.

Per screen change (``4`` from the Cluster screen to the grid, Enter on the grid to a Node
screen, Esc from there back to the grid it covered, which redraws from its release, then Enter
on the next node): the time from the key until the app is idle with the new screen drawn, and
the longest stall in the 0.5 s after the key.

As a side-by-side reference it also times one refresh of the same summaries through
``httpx.AsyncClient`` (64 connections), the obvious client, against ``observe.sources.http``.

Trainer ranks (``--ranks``, default 8,192): the CPU one refresh spends on the fan-in's thread once
the ranks' ``/metrics`` answers are in, per stage: decoding each rank's text (the samples the TUI
reads, hang series included: ``observe.sources.trainer.parse_exposition``), building the ranks'
status, then the run's verdict (each rank's evidence, and ``observe.diagnosis.judge``). The texts
are the recorded hang of two real gloo ranks (tests/tui/recorded/forensics) written out for every
rank of a simulated run, one of which never entered the collective the others wait in. Beside the
decode, the same lines through prometheus_client's parser alone (``promtext``'s fallback).
Targets: 4,096 nodes x 8 GPUs refreshed every 2 s with the GPU grid open, each
refresh <= 1 s, no stall above 50 ms; RSS reported. 1,024 nodes is the smoke size.

    python -m benchmarks.tui_fanin            # N = 16, 1024, 4096; about 5 minutes
    python -m benchmarks.tui_fanin --quick    # N = 1024, 2 refreshes per screen: the smoke size
    python -m benchmarks.tui_fanin --nodes 8 --cycles 1   # what tests/tui/test_benchmark_smoke.py runs
    python -m benchmarks.tui_fanin --ranks 8192 --nodes   # the trainer ranks' part alone

Results go to ``--out`` (default: a scratch folder; ``benchmarks/results/`` only when asked).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from observe.sources.direct import DirectSource, Endpoint
from observe.sources.http import HttpFetcher
from observe.tui.app import make_app
from observe.tui.screens.grid import GridScreen
from observe.tui.screens.node import NodeScreen

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(tempfile.gettempdir()) / "fsdp-observe-benchmarks" / "tui_fanin.json"
#: The screens measured, in order.
PHASES = ("cluster", "grid", "node")


def rss_bytes() -> int:
    """This process's resident memory now (``VmRSS``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Measured:
    """A source wrapper recording each refresh's wall and fan-in-thread CPU time."""

    def __init__(self, source: DirectSource) -> None:
        self.source = source
        self.description = source.description
        self.cycles: list[dict] = []

    async def cycle(self, focus: str | None, deadline: float):
        wall, cpu = time.perf_counter(), time.thread_time()
        snapshot = await self.source.cycle(focus, deadline)
        self.cycles.append(
            {
                "wall": time.perf_counter() - wall,
                "cpu": time.thread_time() - cpu,
                "ok": sum(n.state == "ok" for n in snapshot.nodes),
                "nodes": len(snapshot.nodes),
                "focus": focus,
                "full": sum(1 for n in snapshot.nodes if n.snapshot is not None and n.snapshot.view == "full"),
            }
        )
        return snapshot

    def close(self) -> None:
        self.source.close()


async def stall_probe(stalls: list[float], stop: asyncio.Event) -> None:
    """Sleep 5 ms over and over in the app's loop; record how late each wake-up is."""
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.005)
        stalls.append(time.perf_counter() - started - 0.005)


class GcPauses:
    """The longest garbage-collector pause per generation (gc.callbacks)."""

    def __init__(self) -> None:
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            gen = info["generation"]
            self.longest[gen] = max(self.longest[gen], time.perf_counter() - self._started)


async def run_app(ports: list[int], cycles: int) -> dict:
    """The app over the fleet: ``cycles`` refreshes on the Cluster screen, then as many on a Node screen."""
    source = Measured(DirectSource([Endpoint(f"127.0.0.1:{port}") for port in ports], [], concurrency=64))
    app = make_app(source)
    redraws: list[float] = []
    show = app.show_snapshot

    def timed_show(snapshot):
        started = time.perf_counter()
        show(snapshot)
        redraws.append(time.perf_counter() - started)

    app.show_snapshot = timed_show
    phases = {}
    async with app.run_test(size=(200, 50)) as pilot:
        while app.refreshes < 2:  # start-up (CSS, first layout) and the first refreshes are a warm-up
            await asyncio.sleep(0.05)
        await pilot.pause(0.3)
        for phase in PHASES:
            switch = {}
            if phase == "grid":  # every GPU of every node, redrawn each refresh
                switch = await timed_switch(pilot, "4")
                assert isinstance(app.screen, GridScreen), app.screen
            if phase == "node":  # the node under the grid's cursor: its full snapshot every refresh
                switch = await timed_switch(pilot, "enter")
                assert isinstance(app.screen, NodeScreen), app.screen
            stalls: list[float] = []
            pauses = GcPauses()
            gc.callbacks.append(pauses)
            stop = asyncio.Event()
            probe = asyncio.create_task(stall_probe(stalls, stop))
            first, redraw0 = len(source.cycles), len(redraws)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            while len(source.cycles) < first + cycles + 1:  # the first refresh of a phase is a warm-up
                await asyncio.sleep(0.05)
            await pilot.pause(0.2)
            stop.set()
            await probe
            gc.callbacks.remove(pauses)
            elapsed = time.perf_counter() - wall0
            measured = source.cycles[first + 1 : first + cycles + 1]
            phases[phase] = {
                "interval_s": app.poller.interval,
                "refreshes": len(measured),
                "wall_s_median": statistics.median(c["wall"] for c in measured),
                "wall_s_max": max(c["wall"] for c in measured),
                "fanin_cpu_s_median": statistics.median(c["cpu"] for c in measured),
                "app_cpu_s_per_refresh": (time.process_time() - cpu0) / max(1, elapsed / app.poller.interval),
                "stall_ms_max": 1000 * max(stalls),
                "stall_ms_p99": 1000 * sorted(stalls)[int(0.99 * (len(stalls) - 1))],
                "redraw_ms_max": 1000 * max(redraws[redraw0:] or [0.0]),
                "nodes_ok_min": min(c["ok"] for c in measured),
                "full_snapshots": max(c["full"] for c in measured),
                "gc_pause_ms_max": [round(1000 * p, 1) for p in pauses.longest],
                "rss_bytes": rss_bytes(),
                "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "gpus_drawn": app.screen.query_one("#grid").gpus() if phase == "grid" else None,
                **switch,
            }
        back = await timed_switch(pilot, "escape")  # Node screen to the grid it covered, redrawn from its release
        assert isinstance(app.screen, GridScreen), app.screen
        phases["grid"].update({f"back_{k}": v for k, v in back.items()})
        await pilot.press("right")
        again = await timed_switch(pilot, "enter")  # the next node: a Node screen once more
        assert isinstance(app.screen, NodeScreen), app.screen
        phases["node"].update({f"again_{k}": v for k, v in again.items()})
    return phases


async def timed_switch(pilot, key: str) -> dict:
    """Press ``key`` to change screens: ``switch_ms``, from the key until the app is idle again
    (the new screen mounted and drawn: ``Pilot.press`` waits for that), and ``switch_stall_ms_max``,
    the longest event-loop stall from the key until 0.5 s after it."""
    stalls: list[float] = []
    stop = asyncio.Event()
    probe = asyncio.create_task(stall_probe(stalls, stop))
    started = time.perf_counter()
    await pilot.press(key)
    switched = time.perf_counter() - started
    await pilot.pause(0.5)
    stop.set()
    await probe
    return {"switch_ms": 1000 * switched, "switch_stall_ms_max": 1000 * max(stalls, default=0.0)}


async def reference(ports: list[int]) -> dict:
    """One refresh of every summary through observe.sources.http and through httpx (2nd of 2 rounds each)."""
    urls = [f"http://127.0.0.1:{port}/snapshot?view=summary" for port in ports]

    async def ours() -> tuple[float, float]:
        fetcher = HttpFetcher(concurrency=64, timeout=10)
        result = (0.0, 0.0)
        for _ in range(2):
            wall, cpu = time.perf_counter(), time.process_time()
            await asyncio.gather(*(fetcher.get(u) for u in urls))
            result = (time.perf_counter() - wall, time.process_time() - cpu)
        fetcher.close()
        return result

    async def with_httpx() -> tuple[float, float]:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        semaphore = asyncio.Semaphore(64)
        result = (0.0, 0.0)
        async with httpx.AsyncClient(limits=limits, timeout=30) as client:

            async def get(url: str) -> bytes:
                async with semaphore:
                    return (await client.get(url)).content

            for _ in range(2):
                wall, cpu = time.perf_counter(), time.process_time()
                await asyncio.gather(*(get(u) for u in urls))
                result = (time.perf_counter() - wall, time.process_time() - cpu)
        return result

    own, other = await ours(), await with_httpx()
    return {
        "http_wall_s": own[0],
        "http_cpu_s": own[1],
        "httpx_wall_s": other[0],
        "httpx_cpu_s": other[1],
        "httpx_cpu_ratio": other[1] / own[1] if own[1] else None,
    }


def measure(n: int, cycles: int) -> dict:
    fleet = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fleet", "--nodes", str(n)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        word, _, ports_json = fleet.stdout.readline().partition(" ")
        if word != "ready":
            raise RuntimeError("the fleet process did not start")
        ports = json.loads(ports_json)
        fleet_cpu0 = _child_cpu(fleet.pid)
        load_before = os.getloadavg()
        phases = asyncio.run(run_app(ports, cycles))
        ref = asyncio.run(reference(ports))
        return {
            "nodes": n,
            **{f"{p}_{k}": v for p, d in phases.items() for k, v in d.items()},
            **ref,
            "fleet_cpu_s": _child_cpu(fleet.pid) - fleet_cpu0,
            "load_before": load_before,
            "load_after": os.getloadavg(),
        }
    finally:
        fleet.terminate()
        fleet.wait()


def _in_child(n: int, cycles: int) -> dict:
    """``measure(n, cycles)`` in a process of its own, so each size's RSS is its own (an app's
    frozen objects stay in the process that ran it: ``TopApp._freeze_startup_objects``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "one.json"
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.tui_fanin",
                "--nodes",
                str(n),
                "--cycles",
                str(cycles),
                "--out",
                str(out),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if child.returncode != 0:
            raise RuntimeError(f"measuring {n} nodes failed:\n{child.stderr[-3000:]}")
        (row,) = json.loads(out.read_text())["results"]
        return row


def _child_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def table(rows: list[dict]) -> str:
    head = (
        "nodes",
        "screen",
        "every",
        "refresh wall med/max",
        "fan-in CPU",
        "app CPU/refresh",
        "stall max (p99)",
        "redraw max",
        "switch (stall)",
        "ok",
        "RSS (peak)",
    )
    out = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        for phase in PHASES:
            out.append(
                " | ".join(
                    (
                        f"{r['nodes']:,}",
                        phase,
                        f"{r[f'{phase}_interval_s']:g} s",
                        f"{r[f'{phase}_wall_s_median']:.3f} / {r[f'{phase}_wall_s_max']:.3f} s",
                        f"{r[f'{phase}_fanin_cpu_s_median']:.3f} s",
                        f"{r[f'{phase}_app_cpu_s_per_refresh']:.3f} s",
                        f"{r[f'{phase}_stall_ms_max']:.1f} ({r[f'{phase}_stall_ms_p99']:.1f}) ms",
                        f"{r[f'{phase}_redraw_ms_max']:.1f} ms",
                        _switch(r, phase),
                        f"{r[f'{phase}_nodes_ok_min']}/{r['nodes']}",
                        f"{r[f'{phase}_rss_bytes'] / 2**20:.0f} ({r[f'{phase}_rss_peak_bytes'] / 2**20:.0f}) MiB",
                    )
                )
            )
    out += [
        "",
        "switch (stall): from the key until the screen is drawn (the longest stall in the 0.5 s after "
        "the key); grid: 4 from the Cluster screen, then Esc back from a Node screen; node: Enter on the grid, "
        "then Enter on the next node after that Esc",
    ]
    out += [
        "",
        "one refresh of N summaries | observe.sources.http wall / CPU | httpx.AsyncClient wall / CPU | "
        "httpx CPU / ours",
        "--- | --- | --- | ---",
    ]
    for r in rows:
        out.append(
            f"{r['nodes']:,} | {r['http_wall_s']:.3f} / {r['http_cpu_s']:.3f} s | "
            f"{r['httpx_wall_s']:.3f} / {r['httpx_cpu_s']:.3f} s | {r['httpx_cpu_ratio']:.1f}x"
        )
    return "\n".join(out)


def _switch(r: dict, phase: str) -> str:
    """The switch figures of one screen: into it, then back to it (grid) or into it again (node); '-' for
    the first screen."""
    parts = [
        f"{r[f'{phase}_{way}switch_ms']:.0f} ({r[f'{phase}_{way}switch_stall_ms_max']:.0f}) ms"
        for way in ("", "back_", "again_")
        if f"{phase}_{way}switch_ms" in r
    ]
    return ", ".join(parts) or "-"


def ranks_cost(n: int, repeats: int = 5) -> dict:
    """CPU seconds per refresh of ``n`` trainer ranks' decode, status and verdict (medians of
    ``repeats``), with prometheus_client's parser alone beside the decode."""
    from observe import promtext
    from observe.diagnosis import judge
    from observe.sources.trainer import SAMPLE_NAMES, parse_exposition, ranks_from_samples
    from observe.sources.verdicts import rank_evidence
    from tests.support.forensics import fleet_texts

    now = time.time()
    texts = fleet_texts(n, culprit=n * 5 // 8, now=now)
    stages: dict[str, list[float]] = {
        "decode": [],
        "decode_prometheus_client": [],
        "status": [],
        "evidence": [],
        "judge": [],
    }
    verdict = ""
    for _ in range(repeats):
        started = time.thread_time()
        samples = [parse_exposition(text) for _, text in texts]
        decoded = time.thread_time()
        ranks = [r for (url, _), s in zip(texts, samples, strict=True) for r in ranks_from_samples(s, url, now)]
        built = time.thread_time()
        evidence = [rank_evidence(r, now) for r in ranks]
        gathered = time.thread_time()
        verdict = judge(evidence).summary  # type: ignore[arg-type]  # every rank answered
        judged = time.thread_time()
        for stage, seconds in zip(
            ("decode", "status", "evidence", "judge"),
            (decoded - started, built - decoded, gathered - built, judged - gathered),
            strict=True,
        ):
            stages[stage].append(seconds)
        started = time.thread_time()
        for _, text in texts:
            promtext.full_parse(promtext.kept_lines(text, SAMPLE_NAMES))
        stages["decode_prometheus_client"].append(time.thread_time() - started)
    return {"ranks": n, **{f"{k}_cpu_s": statistics.median(v) for k, v in stages.items()}, "verdict": verdict}


def ranks_table(rows: list[dict]) -> str:
    out = [
        "trainer ranks | decode (prometheus_client alone) | status | evidence | judge | total CPU per refresh",
        "--- | --- | --- | --- | --- | ---",
    ]
    for r in rows:
        total = r["decode_cpu_s"] + r["status_cpu_s"] + r["evidence_cpu_s"] + r["judge_cpu_s"]
        out.append(
            f"{r['ranks']:,} | {r['decode_cpu_s']:.3f} ({r['decode_prometheus_client_cpu_s']:.3f}) s | "
            f"{r['status_cpu_s']:.3f} s | {r['evidence_cpu_s']:.3f} s | {r['judge_cpu_s']:.3f} s | {total:.3f} s"
        )
    out.append(f"verdict: {rows[-1]['verdict']}" if rows else "")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 1024 (the smoke size), 2 refreshes per screen")
    ap.add_argument("--nodes", type=int, nargs="*", help="fleet sizes (default 16 1024 4096; none: skip)")
    ap.add_argument("--ranks", type=int, nargs="*", help="trainer ranks' decode and verdict (default 8192; none: skip)")
    ap.add_argument("--cycles", type=int, help="refreshes measured per screen (default 5)")
    ap.add_argument("--out", type=Path, default=RESULTS, help=f"JSON results (default {RESULTS})")
    ns = ap.parse_args()
    sizes = ns.nodes if ns.nodes is not None else ([1024] if ns.quick else [16, 1024, 4096])
    rank_sizes = ns.ranks if ns.ranks is not None else ([] if ns.quick or ns.nodes else [8192])
    cycles = ns.cycles or (2 if ns.quick else 5)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * max(sizes, default=0) + 512)), hard))
    rows = []
    for n in sizes:
        print(f"measuring {n} nodes...", file=sys.stderr, flush=True)
        rows.append(measure(n, cycles) if len(sizes) == 1 else _in_child(n, cycles))
    rank_rows = []
    for n in rank_sizes:
        print(f"measuring {n} trainer ranks...", file=sys.stderr, flush=True)
        rank_rows.append(ranks_cost(n))
    if rows:
        print(table(rows))
    if rank_rows:
        print(("\n" if rows else "") + ranks_table(rank_rows))
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(
        json.dumps(
            {
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                },
                "quick": ns.quick,
                "cycles": cycles,
                "results": rows,
                "ranks": rank_rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {ns.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
