"""The report as a terminal table and as ``report.json``."""

from __future__ import annotations

import json
from pathlib import Path

from observe.scaling.figures import EFFICIENCY_DEFINITION, ScalingReport


def format_bytes(value: float | None) -> str:
    """Bytes in binary units (``412 MiB``, ``61.3 GiB``); ``n/a`` when absent."""
    if value is None:
        return "n/a"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            digits = 1 if value < 10 * size else 0
            return f"{value / size:.{digits}f} {unit}"
    return f"{value:.0f} B"


def format_seconds(value: float | None) -> str:
    """Seconds as ``212 ms`` below 10 s, else ``12.3 s``; ``n/a`` when absent."""
    if value is None:
        return "n/a"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def format_ratio(value: float | None) -> str:
    """A 0..1 ratio as a percentage with one decimal; ``n/a`` when absent."""
    return "n/a" if value is None else f"{value:.1%}"


def headline(report: ScalingReport) -> str:
    """One line naming what was measured."""
    first = report.sizes[0]
    batch = (
        f"{first.per_rank_batch_size:g} sequences per rank"
        if report.scaling == "weak"
        else f"global batch {first.global_batch_size:g} sequences"
        if report.scaling == "strong"
        else "batch sizes differ between runs"
    )
    return (
        f"{report.model}, {report.sharding_strategy}, {report.mixed_precision} on {report.device_type}; "
        f"{report.scaling} scaling ({batch}); first {report.warmup_steps} steps of each run excluded"
    )


def format_table(report: ScalingReport) -> str:
    """The report as an aligned text table with its definitions underneath."""
    header = (
        "ranks",
        "nodes",
        "run",
        "steps",
        "global tokens/s",
        "tokens/s/rank",
        "efficiency",
        "step p50",
        "step p95",
        "data wait",
        "peak mem/rank",
    )
    rows = [header]
    for s in report.sizes:
        rows.append(
            (
                str(s.world_size),
                str(s.nodes),
                s.run_id,
                f"{s.step_from + 1}-{s.step_to}",
                f"{s.global_tokens_per_second:,.0f}",
                f"{s.tokens_per_second_per_rank:,.0f}",
                format_ratio(s.scaling_efficiency),
                format_seconds(s.step_seconds_p50),
                format_seconds(s.step_seconds_p95),
                format_ratio(s.data_wait_ratio),
                format_bytes(s.memory_peak_bytes_max),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    left = {2}  # the run id reads best left-aligned
    lines = [
        "  ".join(
            cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    quantiles = {s.step_time_quantiles_from for s in report.sizes}
    lines += [
        "",
        EFFICIENCY_DEFINITION + f" (here N0 = {report.baseline_world_size})",
        f"step p50/p95 from: {'; '.join(sorted(quantiles))}",
        f"peak mem/rank: the largest rank's {report.memory_source or 'memory (not exported by these runs)'}",
        *(f"note: {note}" for note in report.notes),
    ]
    return "\n".join(lines)


def write_json(report: ScalingReport, path: Path) -> None:
    """Write ``report.to_json()`` to ``path`` (indented, keys in a stable order)."""
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
