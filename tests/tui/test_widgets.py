"""Meters, sparklines, number formats and the Node screen's header: N/A for the unknown, htop units."""

from __future__ import annotations

from dataclasses import replace

from observe.model import CpuStats
from observe.sources.view import node_status
from observe.tui import fmt
from observe.tui.screens.node import MAX_CORE_METERS, host_lines, process_rows
from observe.tui.widgets.lines import bar, spark
from tests.support.fleet import recorded

NOW = 1_800_000_000.0


def text(line) -> str:
    return "".join(t for t, _ in line)


def test_meters_fill_by_ratio_and_say_na_for_none() -> None:
    half = text(bar(0.5, 12))
    assert len(half) == 12 and half.startswith("[|||||") and half.endswith("50.0%]")
    assert text(bar(None, 12)) == "[       N/A]"
    assert text(bar(1.7, 8, "x")) == "[|||||x]"  # clamped, never wider than asked
    assert text(bar(0.25, 14, "500 ms", outside=8)) == "[|   ]  500 ms"  # 14 cells in all


def test_sparklines_scale_and_leave_gaps_for_unknown_values() -> None:
    assert spark([0.0, 0.5, 1.0], 3) == "▁▅█"
    assert spark([0.0, None, 1.0], 3) == "▁ █"
    assert spark([3.0, 2.0, 1.0], 3, top=None) == "█▅▁"  # scaled to the values' own range (loss)
    assert spark([None, None], 2) == "  " and len(spark(list(range(100)), 10)) == 10


def test_a_command_names_its_program_and_script_by_base_name() -> None:
    venv = "/home/me/clone/.venv/bin"
    assert [
        fmt.short_command(c)
        for c in (
            f"{venv}/python3 -u /home/me/clone/train.py --out /data/run1",
            f"{venv}/python3 {venv}/fsdp-observe demo",
            f"{venv}/python3 -m observe.cli agent --port 0",
            "[kworker/0:1]",
            "",
            None,
        )
    ] == [
        "python3 -u train.py --out /data/run1",
        "python3 fsdp-observe demo",
        "python3 -m observe.cli agent --port 0",
        "[kworker/0:1]",
        "",
        None,
    ]


def test_formats() -> None:
    assert (fmt.pct(None), fmt.pct(0.456), fmt.size(None), fmt.size(1536), fmt.size(80 << 30)) == (
        "N/A",
        "46%",
        "N/A",
        "1.5K",
        "80.0G",
    )
    assert (fmt.pct(-1e-6, 1), fmt.pct(-0.0), fmt.pct(-0.004), fmt.pct(-0.2, 1)) == ("0.0%", "0%", "0%", "-20.0%")
    assert (fmt.duration(59), fmt.duration(3725), fmt.duration(90061)) == ("59s", "1h02m", "1d01h")
    assert (fmt.cpu_time(61.5), fmt.cpu_time(3 * 3600 + 65)) == ("1:01.50", "3h01:05")
    assert (fmt.step_time(0.25), fmt.step_time(1.5), fmt.age(None), fmt.age(0.2)) == (
        "250 ms",
        "1.50 s",
        "never",
        "now",
    )
    assert fmt.one_line("a\nb\x1b[31m", 80) == "a\\x0ab\\x1b[31m" and fmt.one_line("abcdef", 4) == "abc…"


def test_one_meter_per_core_up_to_128_then_one_average() -> None:
    snap = recorded("gpu-node-1", NOW)
    four = replace(snap, host=replace(snap.host, cpu_count=4, cpu=CpuStats(0.5, (0.1, 0.2, 0.3, 0.4))))
    lines = [text(line) for line in host_lines(node_status("n", "u", four, NOW, True), four, 120)]
    assert sum(line.lstrip().startswith("0 [") or line.lstrip().startswith("1 [") for line in lines) == 2
    many = tuple(0.5 for _ in range(MAX_CORE_METERS + 1))
    big = replace(snap, host=replace(snap.host, cpu_count=len(many), cpu=CpuStats(0.5, many)))
    lines = [text(line) for line in host_lines(node_status("n", "u", big, NOW, True), big, 120)]
    assert [line for line in lines if "Avg" in line] and "129 CPUs" in "\n".join(lines)
    assert not any(line.lstrip().startswith("0 [") for line in lines)


def test_gpu_processes_join_the_process_table_by_pid() -> None:
    snap = recorded("gpu-node-2", NOW)
    rows = {r.pid: r for r in process_rows(snap)}
    outside = rows[31999]  # only NVML knows it: kept with its GPU memory, nothing else
    assert (outside.user, outside.cpu_ratio, outside.gpu_memory_bytes, outside.gpus) == (None, None, 8 << 30, "0")
    listed = next(r for r in rows.values() if r.gpus == "1")
    assert listed.user == "root" and listed.gpu_memory_bytes == 4 << 30 and 'print("}{")' in listed.command


def test_a_cluster_without_gpus_gives_the_gpu_columns_room_to_mem_and_note() -> None:
    from observe.tui.screens import cluster
    from observe.tui.widgets.table import column_layout
    from tests.support.scenes import cpu_only_snapshot, fleet_snapshot

    nodes = cpu_only_snapshot().nodes
    assert cluster.columns_for(fleet_snapshot().nodes) == cluster.COLUMNS
    assert cluster.columns_for(()) == cluster.COLUMNS  # nothing answered yet: not known GPU-less
    layout = {c.key: w for c, w in column_layout(cluster.columns_for(nodes), 120)}
    assert {"cpu", "mem", "xid"} <= set(layout) and not set(layout) & set(cluster.GPU_COLUMN_KEYS)
    assert layout["note"] >= 40 and layout["node"] == 22, layout


def test_a_node_without_nvml_says_no_gpus_first_so_a_cut_note_still_says_it() -> None:
    import subprocess
    import sys

    from observe.tui.screens import cluster
    from tests.support.scenes import cpu_only_snapshot

    # this machine has no NVML library: the agent's real reason, from a fresh process (another test
    # in this one may have loaded the stand-in library into pynvml)
    code = "from observe.agent.nvml import Nvml; n = Nvml(); print(n.start()); print(n.reason)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    started, reason = done.stdout.splitlines()[:2]
    assert started == "False" and reason.startswith("no GPUs on this node: "), done.stdout + done.stderr
    (node,) = cpu_only_snapshot().nodes  # the recorded CPU-only agent's notice
    assert cluster._note(node).startswith("no GPUs on this node: NVML unavailable")


def test_the_gpu_popup_lists_the_xids_its_compact_row_counts() -> None:
    from observe.sources.view import events_of_gpu
    from observe.tui.screens.gpus import detail_lines
    from tests.support.scenes import fleet_snapshot

    status = fleet_snapshot("p5-node-8gpu").node("p5-node-8gpu")
    assert status is not None and status.snapshot is not None and status.figures is not None
    gpu0 = status.snapshot.gpus[0]
    xids = events_of_gpu(gpu0, status.xid_events)
    assert xids and status.figures.gpu_xid_severities[0] is not None  # the compact row's NOTE says XID
    shown = "\n".join("".join(piece[0] for piece in line) for line in detail_lines(gpu0, ((), ()), 92, xids))
    assert f"XID/1h {len(xids)} event" in shown
    for x in xids[:10]:
        assert f"XID {x.xid} {x.name}" in shown, shown


def test_the_gpu_notes_of_a_node_fit_whole_at_80_columns() -> None:
    from observe.tui.screens.gpus import GPU_COLUMNS, _note, gpu_rows
    from observe.tui.widgets.table import column_layout
    from tests.support.scenes import fleet_snapshot

    status = fleet_snapshot("p5-node-8gpu").node("p5-node-8gpu")
    assert status is not None and status.snapshot is not None and status.figures is not None
    rows = gpu_rows(status.snapshot.gpus, status.figures.gpu_xid_severities)
    widths = {c.key: w for c, w in column_layout(GPU_COLUMNS, 80)}
    assert {"gpu", "util", "mem", "mem_pct", "temp", "power"} <= set(widths), widths
    notes = [_note(r) for r in rows if _note(r).startswith(("XID", "throttle"))]
    assert "XID gpu_reset; throttle sw_power_cap" in notes
    assert all(len(n) <= widths["note"] for n in notes), (widths["note"], notes)


def test_a_cut_node_name_keeps_its_end_so_an_agents_port_shows() -> None:
    from observe.tui.screens import cluster
    from observe.tui.widgets.table import cut_cell

    assert cut_cell("127.0.0.1:21999", 14, middle=True) == "127.0.…1:21999"
    assert cut_cell("gb200-node-16gpu", 14, middle=True) == "gb200-…e-16gpu"
    assert cut_cell("abcdef", 4, middle=True) == "abc…" and cut_cell("abc", 14, middle=True) == "abc"
    assert cut_cell("127.0.0.1:21999", 14) == "127.0.0.1:219…"
    assert next(c for c in cluster.COLUMNS if c.key == "node").cut_middle


def test_an_agent_notice_wraps_so_its_fix_shows_at_80_columns() -> None:
    from tests.support.scenes import fleet_snapshot

    status = fleet_snapshot("gpu-node-2").node("gpu-node-2")
    assert status is not None and status.snapshot is not None
    (notice,) = [n for n in status.snapshot.agent.notices if n.startswith("GPU processes")]
    drawn = ["".join(piece[0] for piece in line) for line in host_lines(status, status.snapshot, 80, 24)]
    assert all(len(line) <= 80 for line in drawn), drawn
    words = " ".join(" ".join(drawn).split())
    assert " ".join(notice.split()) in words, drawn  # "... (Kubernetes: hostPID: true) to see ..." whole
