"""Side-by-side timing of two revisions' dashboard queries on one TSDB (``dashboard_queries --baseline``).

Absolute latencies on a shared 2-core machine move with its load; a ratio measured by alternating
the two revisions' queries on the same Prometheus does not. Each query the baseline run (another
revision's ``dashboard_queries`` JSON, same ``--nodes``) and this one share by name is sent
alternately, baseline first, ``repeat`` times each. Queries whose text did not change give the
noise band: their ratios should sit near 1.

The TSDB carries this revision's recording rules only: a baseline panel that reads a record this
revision no longer writes returns nothing and is reported with its series count, so it is seen.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import httpx


def compare(
    time_one: Callable[[httpx.Client, dict], tuple[float, int | None]],
    client: httpx.Client,
    baseline: list[dict],
    current: list[dict],
    repeat: int,
) -> list[dict]:
    """Alternate the baseline's and the current revision's query of each shared name.

    Args:
        time_one: runs one query once; returns (milliseconds, series returned or None on error).
        client: HTTP client of the Prometheus holding the TSDB.
        baseline, current: result rows (``where``, ``kind``, ``expr``, ``instant``) of each revision.
        repeat: timed runs per query and revision.

    Returns:
        One row per shared name: ``where``, ``kind``, ``changed`` (the text differs),
        ``base_p50_ms``, ``new_p50_ms``, ``ratio`` (new over base p50), and each side's series.
    """
    base_by = {r["where"]: r for r in baseline}
    rows = []
    for new in current:
        old = base_by.get(new["where"])
        if old is None:
            continue
        times: dict[str, list[float]] = {"base": [], "new": []}
        series: dict[str, int | None] = {}
        for _ in range(repeat):
            for side, q in (("base", old), ("new", new)):
                ms, n = time_one(client, q)
                times[side].append(ms)
                series[side] = n
        base_p50, new_p50 = statistics.median(times["base"]), statistics.median(times["new"])
        rows.append(
            {
                "where": new["where"],
                "kind": new["kind"],
                "changed": old["expr"] != new["expr"],
                "base_p50_ms": round(base_p50, 1),
                "new_p50_ms": round(new_p50, 1),
                "ratio": round(new_p50 / base_p50, 3) if base_p50 > 0 else math.inf,
                "base_series": series["base"],
                "new_series": series["new"],
            }
        )
    return rows


def report(rows: list[dict]) -> dict:
    """Print the changed queries and the noise band of the unchanged ones; returns the summary
    (geometric mean ratio and range of the unchanged queries)."""
    unchanged = [r["ratio"] for r in rows if not r["changed"] and math.isfinite(r["ratio"]) and r["ratio"] > 0]
    band = {
        "unchanged_queries": len(unchanged),
        "unchanged_geomean_ratio": round(math.exp(statistics.fmean(math.log(x) for x in unchanged)), 3)
        if unchanged
        else None,
        "unchanged_min_ratio": min(unchanged, default=None),
        "unchanged_max_ratio": max(unchanged, default=None),
    }
    print(f"\n{'kind':8} {'base p50':>9} {'new p50':>9} {'new/base':>9} {'series':>9}  changed query")
    for r in sorted((r for r in rows if r["changed"]), key=lambda r: r["ratio"]):
        series = f"{r['base_series']}->{r['new_series']}"
        print(
            f"{r['kind']:8} {r['base_p50_ms']:9.1f} {r['new_p50_ms']:9.1f} {r['ratio']:9.3f} {series:>9}  {r['where']}"
        )
    print(
        f"unchanged queries ({band['unchanged_queries']}): new/base geometric mean {band['unchanged_geomean_ratio']}, "
        f"range {band['unchanged_min_ratio']}-{band['unchanged_max_ratio']} (the noise band)"
    )
    return band
