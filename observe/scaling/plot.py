"""``report.png``: throughput and scaling efficiency against ranks, memory per rank beside them.

Left panel: measured global tokens/s against world size, with the ideal line (linear from N₀)
and each point's efficiency written next to it. Right panel: scaling efficiency (%) and, on a
second y axis, the largest rank's peak memory. Drawn with matplotlib's object API on the Agg
canvas (no pyplot state, no display needed).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from observe.scaling.figures import EFFICIENCY_DEFINITION, ScalingReport
from observe.scaling.output import headline

_BLUE, _GREY, _GREEN, _ORANGE = "#1f5fa8", "#8c8c8c", "#2a8a3e", "#d9730d"


def _memory_unit(values: list[float]) -> tuple[str, float]:
    return ("GiB", 2.0**30) if max(values) >= 2**30 else ("MiB", 2.0**20)


def _tokens_formatter(top: float) -> Any:
    from matplotlib.ticker import FuncFormatter

    if top >= 1e6:
        return FuncFormatter(lambda v, _: f"{v / 1e6:g} M" if v else "0")
    if top >= 1e4:
        return FuncFormatter(lambda v, _: f"{v / 1e3:g} k" if v else "0")
    return FuncFormatter(lambda v, _: f"{v:,.0f}")


def render(report: ScalingReport, path: Path) -> None:
    """Draw ``report`` into the PNG file ``path``."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FixedLocator, LogLocator, NullFormatter, NullLocator

    sizes = report.sizes
    x = [s.world_size for s in sizes]
    n0 = report.baseline_world_size
    base = [s.global_tokens_per_second for s in sizes if s.world_size == n0]
    baseline = sum(base) / len(base)
    tps = [s.global_tokens_per_second for s in sizes]
    eff = [None if s.scaling_efficiency is None else 100 * s.scaling_efficiency for s in sizes]
    many_nodes = any(s.nodes > 1 for s in sizes)
    ticks = sorted(set(x))
    nodes_at = {s.world_size: s.nodes for s in sizes}
    labels = [f"{n}\n{nodes_at[n]} node{'s' if nodes_at[n] > 1 else ''}" if many_nodes else str(n) for n in ticks]
    xlabel = "world size (ranks; nodes below)" if many_nodes else "world size (ranks)"

    fig = Figure(figsize=(13, 6), dpi=110, layout="constrained")
    fig.suptitle(f"Scaling: {headline(report)}", fontsize=12)
    footnote = [
        EFFICIENCY_DEFINITION + ".",
        (f"memory: {report.memory_source}" if report.memory_source else "memory: not exported by these runs")
        + f"; step time and throughput after the first {report.warmup_steps} steps of each run.",
        *(line for note in report.notes for line in textwrap.wrap(f"note: {note}", 160)),
    ]
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 0.035 * len(footnote)))
    ax_tp, ax_eff = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_note = fig.add_subplot(grid[1, :])
    ax_note.axis("off")

    for ax in (ax_tp, ax_eff):
        if max(x) / min(x) >= 4:
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels(labels)
        ax.set_xlabel(xlabel, fontsize=11)
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(labelsize=10)
        pad = 0.25 if ax.get_xscale() == "log" else 0.15 * (max(x) - min(x) or 1)
        ax.set_xlim(
            min(x) / 2**pad if ax.get_xscale() == "log" else min(x) - pad,
            max(x) * 2**pad if ax.get_xscale() == "log" else max(x) + pad,
        )

    # Dense, so the ideal line is right on a log2 axis too (N/N0 x T0 is not straight there).
    ideal_x = [min(x) * (max(x) / min(x)) ** (i / 64) for i in range(65)]
    ax_tp.plot(
        ideal_x,
        [n / n0 * baseline for n in ideal_x],
        "--",
        color=_GREY,
        lw=1.5,
        label=f"ideal: linear from N\N{SUBSCRIPT ZERO} = {n0} rank{'s' if n0 > 1 else ''}",
    )
    ax_tp.plot(x, tps, "o-", color=_BLUE, lw=2.2, ms=7, label="measured")
    for xi, yi, ei in zip(x, tps, eff, strict=False):
        if ei is not None:
            ax_tp.annotate(
                f"{ei:.0f} %", (xi, yi), textcoords="offset points", xytext=(8, -14), fontsize=10, color=_BLUE
            )
    top = max(max(tps), max(x) / n0 * baseline)
    if ax_tp.get_xscale() == "log":
        # log-log: the ideal is a straight line and straight segments between points mean something
        ax_tp.set_yscale("log", base=10)
        low, high = min(min(tps), baseline) / 1.6, top * 1.6
        subs = (1.0, 2.0, 5.0) if high / low > 30 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
        ax_tp.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax_tp.yaxis.set_minor_formatter(NullFormatter())
        ax_tp.set_ylim(low, high)
    else:
        ax_tp.set_ylim(0, top * 1.12)
    ax_tp.yaxis.set_major_formatter(_tokens_formatter(top))
    ax_tp.set_ylabel(
        "global throughput (labelled tokens/s" + (", log scale)" if ax_tp.get_yscale() == "log" else ")"), fontsize=11
    )
    ax_tp.set_title("Throughput (efficiency next to each point)", fontsize=11)
    ax_tp.legend(loc="upper left", fontsize=10, frameon=False)

    ax_eff.axhline(100, color=_GREY, ls="--", lw=1.2)
    eff_points = [(xi, ei) for xi, ei in zip(x, eff, strict=False) if ei is not None]
    lines = ax_eff.plot(
        [p[0] for p in eff_points],
        [p[1] for p in eff_points],
        "o-",
        color=_GREEN,
        lw=2.2,
        ms=7,
        label="scaling efficiency (left axis)",
    )
    for xi, ei in eff_points:
        ax_eff.annotate(
            f"{ei:.0f} %", (xi, ei), textcoords="offset points", xytext=(7, 7), ha="left", fontsize=10, color=_GREEN
        )
    ax_eff.set_ylim(0, max(110, max((p[1] for p in eff_points), default=100) * 1.15))
    ax_eff.set_ylabel("scaling efficiency (%)", fontsize=11, color=_GREEN)
    ax_eff.set_title("Scaling efficiency and peak memory per rank", fontsize=11)

    memory = [s.memory_peak_bytes_max for s in sizes if s.memory_peak_bytes_max is not None]
    if len(memory) == len(sizes):
        unit, scale = _memory_unit(memory)
        ax_mem = ax_eff.twinx()
        lines += ax_mem.plot(
            x,
            [m / scale for m in memory],
            "s:",
            color=_ORANGE,
            lw=2,
            ms=7,
            label=f"peak memory per rank, largest rank (right axis, {unit})",
        )
        ax_mem.set_ylim(0, max(memory) / scale * 1.25)
        ax_mem.set_ylabel(f"peak memory per rank ({unit})", fontsize=11, color=_ORANGE)
        ax_mem.tick_params(labelsize=10)
    ax_eff.legend(lines, [str(line.get_label()) for line in lines], loc="lower left", fontsize=10, frameon=False)

    ax_note.text(
        0, 0.5, "\n".join(footnote), fontsize=9.5, color="#333333", ha="left", va="center", transform=ax_note.transAxes
    )
    fig.savefig(path)
