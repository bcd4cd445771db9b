"""Every panel query and every rule of the generated dashboards, timed on simulated GPU clusters.

Claim: at 1,024 nodes of 8 GPUs (dcgm-exporter mid-upgrade: a quarter of the nodes on each of
4.5.3-4.8.2, 4.6.0-4.8.3, 4.9.0 and 4.10.0, read through the canonical layer of recording rules;
the agent; 8,192 trainer ranks of one run; 6 hours at a 15 s scrape), every panel query answers
within 500 ms p95 and returns at most 50 series, and every rule evaluates within 200 ms. Several
``--nodes`` sizes give the growth with the cluster as a measured curve.

How: ``benchmarks/simulated_cluster.py`` streams the cluster's series as OpenMetrics, one chunk of
``--chunk-minutes`` at a time (so disk use stays one chunk of text), ``promtool tsdb
create-blocks-from openmetrics`` turns each chunk into TSDB blocks, a real Prometheus (with the
generated rule file) opens them, and ``promtool tsdb create-blocks-from rules`` backfills the
recording rules the panels read. Then each panel query of each committed dashboard (variables on
"All", the dashboard's default range of 3 h, a 15 s step, ``$__rate_interval`` as Grafana computes
it) and each rule expression (an instant query, as the rule manager runs it) is sent ``--repeat``
times over HTTP; the table gives p50/p95 latency and the series returned, flags what misses a
target, and the JSON goes to ``--out`` (by default under a scratch folder).

Size: about 1,450 series per node, ~310 bytes of OpenMetrics per sample; at 1,024 nodes and 6 h,
1.5 M series and 2.1 G samples (~650 GB of text in all, ~27 GB per 15-minute chunk; ``promtool``
converts ~0.3 M samples/s per core). The script prints its estimate first and refuses a chunk that
would not fit on the disk.

    .venv/bin/python -m benchmarks.dashboard_queries --nodes 16 --hours 1 --repeat 5        # smoke
    .venv/bin/python -m benchmarks.dashboard_queries --nodes 16 64 256 --hours 1 --chunk-minutes 15
    .venv/bin/python -m benchmarks.dashboard_queries --nodes 1024 --hours 6 --chunk-minutes 15 --repeat 20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from benchmarks.simulated_cluster import Cluster, series_total, write_span
from observe import prometheus_local
from observe.monitoring import rules
from observe.ports import free_port

REPO = Path(__file__).resolve().parents[1]
PANEL_P95_MS, PANEL_SERIES, RULE_P95_MS = 500.0, 50, 200.0
BYTES_PER_SAMPLE = 312  # measured on the generator's output
HISTORY_END = "history_end"  # in each size's workdir: where its history ends (Unix seconds)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--nodes", type=int, nargs="+", default=[16], help="simulated nodes, one run per size (the claim is about 1024)"
    )
    p.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    p.add_argument("--ranks", type=int, default=8, help="trainer ranks per node")
    p.add_argument("--cores", type=int, default=64, help="CPUs per node (per-core series)")
    p.add_argument("--hours", type=float, default=6.0, help="history to build")
    p.add_argument("--scrape", type=float, default=15.0, help="seconds between samples")
    p.add_argument("--chunk-minutes", type=float, default=60.0, help="history written and converted at a time")
    p.add_argument("--range", dest="range_", default="3h", help="dashboard time range the panels query")
    p.add_argument("--step", type=float, default=15.0, help="range-query step, seconds")
    p.add_argument("--repeat", type=int, default=10, help="timed runs per query")
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the TSDBs are built, one folder per size (default: a temp dir)",
    )
    p.add_argument("--keep", action="store_true", help="keep the workdir (reuse it with --reuse)")
    p.add_argument("--reuse", action="store_true", help="skip building: open the TSDBs already in --workdir")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another revision's JSON from this benchmark: time its queries and this revision's alternately "
        "on the same TSDB and print the ratios (benchmarks/query_compare.py)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "dashboard_queries.json",
        help="JSON results",
    )
    return p.parse_args(argv)


def seconds(duration: str) -> float:
    """``3h`` → 10800."""
    from observe.promql import duration_seconds

    return duration_seconds(duration)


def build(cluster: Cluster, tsdb: Path, work: Path, chunk: float) -> dict:
    """Generate and convert the history chunk by chunk; returns timings."""
    tsdb.mkdir(parents=True, exist_ok=True)
    spent = {"generate_s": 0.0, "convert_s": 0.0, "samples": 0}
    t = cluster.start
    while t < cluster.end:
        stop = min(cluster.end, t + chunk)
        text = work / "chunk.om"
        began = time.perf_counter()
        with open(text, "w", buffering=16 * 2**20) as out:
            spent["samples"] += write_span(cluster, out, t, stop)
        spent["generate_s"] += time.perf_counter() - began
        began = time.perf_counter()
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(text), str(tsdb)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        spent["convert_s"] += time.perf_counter() - began
        text.unlink()
        print(f"  history to {time.strftime('%H:%M', time.gmtime(stop))} UTC: {spent['samples']:,} samples", flush=True)
        t = stop
    return spent


def recording_rules(path: Path) -> Path:
    """A rule file with only the recording rules (for ``promtool tsdb create-blocks-from rules``)."""
    groups = [
        {"name": g["name"], "rules": [r for r in g["rules"] if "record" in r]} for g in rules.rule_file()["groups"]
    ]
    path.write_text(yaml.safe_dump({"groups": [g for g in groups if g["rules"]]}, sort_keys=False))
    return path


def substitute(expr: str, values: dict[str, str]) -> str:
    """Grafana's interpolation of ``$name`` and ``${name}`` (``$1`` of label_replace is left alone)."""
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), expr)


def queries(range_s: float, step: float, scrape: float, one_node: str) -> list[dict]:
    """Every panel target and query variable of the committed dashboards, interpolated for "All"
    (``one_node`` for a variable without "All")."""
    out = []
    rate_interval = max(step + scrape, 4 * scrape)  # Grafana: max($__interval + scrape, 4 x scrape)
    for path in sorted((REPO / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        values = {v["name"]: v.get("allValue", one_node) for v in board["templating"]["list"] if v["type"] == "query"}
        values.update(__rate_interval=f"{rate_interval:g}s", __interval=f"{step:g}s", __range=f"{range_s:g}s")
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append(
                    {
                        "kind": "panel",
                        "where": f"{board['uid']} / {panel['title']} / {target['refId']}",
                        "expr": substitute(target["expr"], values),
                        "instant": bool(target.get("instant")),
                    }
                )
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                found = re.fullmatch(r"(?:label_values|query_result)\((.+?)(?:, \w+)?\)", var["query"])
                assert found, var["query"]  # the dashboards use only these two forms
                inner = found.group(1)
                out.append(
                    {
                        "kind": "variable",
                        "where": f"{board['uid']} / ${var['name']}",
                        "expr": substitute(inner, values),
                        "instant": True,
                    }
                )
    for group in rules.rule_file()["groups"]:
        for rule in group["rules"]:
            out.append(
                {"kind": "rule", "where": rule.get("record") or rule["alert"], "expr": rule["expr"], "instant": True}
            )
    return out


def run_once(client: httpx.Client, q: dict, end: float, range_s: float, step: float) -> tuple[float, dict]:
    """One run of ``q`` (instant at ``end``, or over ``range_s`` before it): wall ms and the reply."""
    params = (
        {"query": q["expr"], "time": f"{end:.3f}"}
        if q["instant"]
        else {"query": q["expr"], "start": f"{end - range_s:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    )
    path = "/api/v1/query" if q["instant"] else "/api/v1/query_range"
    began = time.perf_counter()
    body = client.get(path, params=params).json()
    return (time.perf_counter() - began) * 1000, body


def time_query(client: httpx.Client, q: dict, end: float, range_s: float, step: float, repeat: int) -> dict:
    """p50/p95 wall latency (ms) over ``repeat`` runs, and the series the last one returned."""
    latencies, body = [], {}
    for _ in range(repeat):
        ms, body = run_once(client, q, end, range_s, step)
        latencies.append(ms)
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, math.ceil(0.95 * len(latencies)) - 1)]
    ok = body.get("status") == "success"
    return {
        **q,
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(p95, 1),
        "series": len(body["data"]["result"]) if ok else None,
        "error": None if ok else body.get("error"),
    }


def verdict(r: dict) -> str:
    """What a result misses: SLOW (latency target), MANY (series target), ERROR."""
    if r["error"]:
        return "ERROR"
    flags = []
    if r["p95_ms"] > (RULE_P95_MS if r["kind"] == "rule" else PANEL_P95_MS):
        flags.append("SLOW")
    if r["kind"] == "panel" and (r["series"] or 0) > PANEL_SERIES:
        flags.append("MANY")
    return " ".join(flags) or "ok"


def run_size(args: argparse.Namespace, nodes: int, work: Path) -> dict | None:
    """Build (or reuse) one size's TSDB, time every query, print its table; ``None`` when it does
    not fit on the disk."""
    work.mkdir(parents=True, exist_ok=True)
    end = math.floor(time.time() / args.scrape) * args.scrape
    cluster = Cluster(
        nodes=nodes,
        gpus=args.gpus,
        ranks=args.ranks,
        cores=args.cores,
        start=end - args.hours * 3600,
        end=end,
        step=args.scrape,
    )
    series = series_total(cluster)
    samples = series * args.hours * 3600 / args.scrape
    chunk_bytes = series * (args.chunk_minutes * 60 / args.scrape) * BYTES_PER_SAMPLE
    free = shutil.disk_usage(work).free
    print(
        f"\n{nodes} nodes: {series:,} series, {samples:,.0f} samples; {chunk_bytes / 1e9:.1f} GB of text per "
        f"{args.chunk_minutes:g}-minute chunk ({free / 1e9:.0f} GB free in {work}); at ~0.3 M samples/s per core "
        f"promtool needs ~{samples / 3e5 / 60:.0f} min",
        flush=True,
    )
    if not args.reuse and chunk_bytes * 1.2 > free:
        print(
            f"error: --chunk-minutes {args.chunk_minutes:g}: a chunk needs {chunk_bytes / 1e9:.0f} GB, "
            f"{free / 1e9:.0f} GB are free; give fewer minutes",
            file=sys.stderr,
        )
        return None
    load_before = os.getloadavg()
    tsdb = work / "prometheus" / "tsdb"
    built = {} if args.reuse else build(cluster, tsdb, work, args.chunk_minutes * 60)
    if args.reuse:  # the history ends where it was built, not now
        end = history_end(work)
        cluster = dataclasses.replace(cluster, start=end - args.hours * 3600, end=end)
    else:
        (work / HISTORY_END).write_text(f"{end:.0f}\n")
    rule_file = work / "rules.yaml"
    rule_file.write_text(rules.render())
    config = {
        "global": {"scrape_interval": f"{args.scrape:g}s", "evaluation_interval": "1m"},
        "rule_files": [str(rule_file)],
    }
    prometheus = prometheus_local.start(work / "prometheus", config, free_port(), timeout=600)
    try:
        if not args.reuse:
            began = time.perf_counter()
            backfill = work / "rules-backfill"
            subprocess.run(
                [
                    "promtool",
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    f"--start={cluster.start:.0f}",
                    f"--end={end:.0f}",
                    f"--url={prometheus.url}",
                    f"--output-dir={backfill}",
                    "--eval-interval=60s",
                    str(recording_rules(work / "recording.yaml")),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            prometheus.stop()
            for block in backfill.iterdir():
                shutil.move(str(block), tsdb / block.name)
            prometheus = prometheus_local.start(work / "prometheus", config, free_port(), timeout=600)
            built["rules_backfill_s"] = round(time.perf_counter() - began, 1)
        range_s, results, compared = seconds(args.range_), [], None
        with httpx.Client(base_url=prometheus.url, timeout=120) as client:
            for q in queries(range_s, args.step, args.scrape, cluster.node(0)):
                results.append(time_query(client, q, end, range_s, args.step, args.repeat))
            if args.baseline is not None:
                compared = side_by_side(args, client, nodes, results, end, range_s)
    finally:
        prometheus.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results.sort(key=lambda r: (r["kind"], -r["p95_ms"]))
    print(f"\n{'kind':8} {'p50 ms':>8} {'p95 ms':>8} {'series':>7}  {'verdict':8} query ({nodes} nodes)")
    for r in results:
        shown = "-" if r["series"] is None else r["series"]
        print(f"{r['kind']:8} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {shown:>7}  {verdict(r):8} {r['where']}")
    missed = [r for r in results if verdict(r) != "ok"]
    load_after = os.getloadavg()
    print(
        f"\n{nodes} nodes: {len(results)} queries, {len(missed)} miss a target (panel p95 <= {PANEL_P95_MS:g} ms "
        f"and <= {PANEL_SERIES} series; rule p95 <= {RULE_P95_MS:g} ms). Load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; {os.cpu_count()} CPUs.",
        flush=True,
    )
    return {
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": args.gpus,
            "ranks_per_node": args.ranks,
            "cores_per_node": args.cores,
            "hours": args.hours,
            "scrape_s": args.scrape,
            "series": series,
            "samples": int(samples),
        },
        "query": {"range": args.range_, "step_s": args.step, "repeat": args.repeat},
        "build": built,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "targets": {"panel_p95_ms": PANEL_P95_MS, "panel_series": PANEL_SERIES, "rule_p95_ms": RULE_P95_MS},
        "results": [{**r, "verdict": verdict(r)} for r in results],
        **({"compared": compared} if compared is not None else {}),
    }


def history_end(work: Path) -> float:
    """The Unix time (s) the history built in ``work`` ends at (written there by the build)."""
    try:
        return float((work / HISTORY_END).read_text())
    except FileNotFoundError:
        raise SystemExit(
            f"error: --reuse: nothing built in {work}; build it first (without --reuse, with --keep)"
        ) from None


def side_by_side(
    args: argparse.Namespace, client: httpx.Client, nodes: int, results: list[dict], end: float, range_s: float
) -> dict:
    """The baseline revision's queries (``args.baseline_runs``, read and checked by ``main``)
    against these, alternately (``query_compare``)."""
    from benchmarks import query_compare

    def once(c: httpx.Client, q: dict) -> tuple[float, int | None]:
        ms, body = run_once(c, q, end, range_s, args.step)
        return ms, len(body["data"]["result"]) if body.get("status") == "success" else None

    rows = query_compare.compare(once, client, args.baseline_runs[nodes], results, args.repeat)
    return {"baseline": str(args.baseline), "band": query_compare.report(rows), "rows": rows}


def growth(runs: list[dict]) -> None:
    """The curve: per size, the worst panel and rule and the most series; then the queries that
    are slowest at the largest size, with their p95 at every size."""
    print(f"\n{'nodes':>6} {'series':>10} {'worst panel p95':>16} {'most series':>12} {'worst rule p95':>15}  misses")
    for run in runs:
        results = run["results"]
        panels = [r for r in results if r["kind"] == "panel"]
        rule_list = [r for r in results if r["kind"] == "rule"]
        print(
            f"{run['cluster']['nodes']:>6} {run['cluster']['series']:>10,} "
            f"{max(r['p95_ms'] for r in panels):>13.1f} ms {max(r['series'] or 0 for r in panels):>12} "
            f"{max(r['p95_ms'] for r in rule_list):>12.1f} ms  {sum(verdict(r) != 'ok' for r in results)}"
        )
    if len(runs) < 2:
        return
    by_size = [{r["where"]: r for r in run["results"]} for run in runs]
    largest = sorted(runs[-1]["results"], key=lambda r: -r["p95_ms"])[:12]
    sizes = " ".join(f"{run['cluster']['nodes']:>7}" for run in runs)
    print(f"\np95 ms at {sizes} nodes (the 12 slowest at the largest size)")
    for r in largest:
        row = " ".join(
            f"{found[r['where']]['p95_ms']:>7.1f}" if r["where"] in found else "      -" for found in by_size
        )
        print(f"  {row}  {r['kind']:8} {r['where']}")


def main(argv: list[str] | None = None) -> int:
    """Build (or reuse) each size's TSDB, time every query, print the tables, write the JSON."""
    args = parse_args(argv)
    if shutil.which("promtool") is None or prometheus_local.binary() is None:
        print("error: needs promtool and prometheus on PATH (apt-get install prometheus)", file=sys.stderr)
        return 2
    if args.reuse and args.workdir is None:
        print("error: --reuse: give the --workdir a run with --keep built", file=sys.stderr)
        return 2
    if args.baseline is not None:  # before any building: a wrong file is said at once
        try:
            args.baseline_runs = {
                r["cluster"]["nodes"]: r["results"] for r in json.loads(args.baseline.read_text())["runs"]
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(
                f"error: --baseline {args.baseline}: not this benchmark's JSON ({exc}); give its --out file",
                file=sys.stderr,
            )
            return 2
        if missing := sorted(set(args.nodes) - set(args.baseline_runs)):
            print(
                f"error: --baseline {args.baseline} has no run at {missing} nodes "
                f"(it has {sorted(args.baseline_runs)})",
                file=sys.stderr,
            )
            return 2
    base = args.workdir or Path(tempfile.mkdtemp(prefix="fsdp-dash-bench-"))
    runs = []
    for nodes in args.nodes:
        run = run_size(args, nodes, base / f"nodes-{nodes}")
        if run is None:
            return 2
        runs.append(run)
    growth(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
