"""What the trainer's metrics cost: paired A/B runs with metrics on and off.

Each pair runs the same short two-rank CPU job twice, ``--metrics on`` (scraped once a second,
as a busy Prometheus would) and ``--metrics off``, alternating which goes first to cancel drift.
The figure is the median over pairs of (median step time on / median step time off); target
<= 1.01. A micro-measurement of ``TrainingCollector.on_step`` shows the per-step cost directly.

    python -m benchmarks.trainer_overhead [--pairs 5] [--steps 80] [--out FILE]

The JSON goes to ``--out`` (default: a scratch folder); the committed figures are
``benchmarks/results/trainer_overhead.json``, rewritten only when asked with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import timeit
from pathlib import Path

import httpx

from benchmarks.report_table import print_and_write
from observe.training.collector import TrainingCollector
from trainer.runspec.config import DataConfig, MetricsConfig, TrainConfig
from trainer.runspec.launch import check_ports_free, torchrun_command

#: Where the JSON goes unless --out says otherwise (never over the committed benchmarks/results/).
SCRATCH = Path(tempfile.gettempdir()) / "fsdp-observe-benchmarks"


def run_once(metrics_on: bool, steps: int, port: int, workdir: Path) -> float:
    """One run; returns rank 0's median step time (seconds)."""
    log_json = workdir / f"run-{metrics_on}-{time.monotonic_ns()}.jsonl"
    cfg = TrainConfig(
        steps=steps,
        data=DataConfig(seq_len=256, batch_size=8),
        metrics=MetricsConfig(
            enabled=metrics_on, log_every=10, log_json=str(log_json), port_base=port, address="127.0.0.1"
        ),
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    stop = threading.Event()
    scraper = threading.Thread(target=scrape_loop, args=(port, stop), daemon=True)
    if metrics_on:
        scraper.start()
    try:
        subprocess.run(torchrun_command(cfg, 2), env=env, check=True, stdout=subprocess.DEVNULL)
    finally:
        stop.set()
    end = [json.loads(line) for line in log_json.read_text().splitlines()][-1]
    return end["step_seconds_p50"]


def scrape_loop(port: int, stop: threading.Event) -> None:
    """Scrape both ranks once a second until stopped."""
    with httpx.Client(timeout=1.0) as client:
        while not stop.wait(1.0):
            for rank in (0, 1):
                try:
                    client.get(f"http://127.0.0.1:{port + rank}/metrics")
                except httpx.HTTPError:
                    pass


def on_step_cost_seconds() -> float:
    """Seconds per ``TrainingCollector.on_step`` call (median of 5 repeats of 20,000 calls)."""
    m = TrainingCollector({"run_id": "b", "rank": "0", "local_rank": "0", "node": "n"}, {}, 100, 1, None, True)
    times = timeit.repeat(lambda: m.on_step(1, 0.2, 0.001, 2048, 8, 1e-3), number=20_000, repeat=5)
    return statistics.median(times) / 20_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--port", type=int, default=9580)
    ap.add_argument("--out", default=str(SCRATCH / "trainer_overhead.json"), help="JSON output (default %(default)s)")
    ns = ap.parse_args()
    check_ports_free("127.0.0.1", ns.port, 2)
    ratios, on_medians, off_medians = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(ns.pairs):
            order = (True, False) if i % 2 == 0 else (False, True)
            result = {flag: run_once(flag, ns.steps, ns.port, Path(tmp)) for flag in order}
            on_medians.append(result[True])
            off_medians.append(result[False])
            ratios.append(result[True] / result[False])
            print(
                f"pair {i + 1}/{ns.pairs}: on {result[True] * 1000:.1f} ms, off {result[False] * 1000:.1f} ms, "
                f"ratio {ratios[-1]:.4f}",
                flush=True,
            )
    per_call = on_step_cost_seconds()
    step = statistics.median(off_medians)
    report = {
        "pairs": ns.pairs,
        "steps_per_run": ns.steps,
        "ranks": 2,
        "preset": "tiny",
        "seq_len": 256,
        "batch_size": 8,
        "median_step_seconds_metrics_on": statistics.median(on_medians),
        "median_step_seconds_metrics_off": step,
        "pair_ratios": ratios,
        "median_ratio_on_over_off": statistics.median(ratios),
        "on_step_seconds_per_call": per_call,
        "on_step_share_of_step": per_call / step,
        "target_ratio": 1.01,
    }
    rows = [
        ("median step, metrics on (scraped 1/s)", f"{report['median_step_seconds_metrics_on'] * 1000:.2f} ms"),
        ("median step, metrics off", f"{step * 1000:.2f} ms"),
        ("median of pair ratios on/off", f"{report['median_ratio_on_over_off']:.4f} (target <= 1.01)"),
        ("pair ratios", ", ".join(f"{r:.3f}" for r in ratios)),
        ("on_step() per call", f"{per_call * 1e6:.2f} us ({report['on_step_share_of_step']:.2e} of a step)"),
    ]
    print_and_write(rows, report, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
