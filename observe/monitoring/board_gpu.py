"""The GPU-health dashboard (uid ``fsdp-gpu-health``): every GPU by node, from the canonical DCGM
records (every dcgm-exporter dialect, in base units; the agent's NVML readings where no exporter
reports a GPU) and the fsdp-observe agent. A list of panels; the queries are
``observe.monitoring.queries.GpuHealthQueries``.

Variables ``node`` and ``gpu`` list the temperature record, which every GPU and every MIG instance
has (``DCGM_FI_DEV_GPU_UTIL`` is not reported under MIG, so nodes with only MIG GPUs would drop
out). The graphics-engine activity is the utilisation that holds under MIG. Per-GPU panels draw
the ``top_n`` worst GPUs over the range (``observe.monitoring.scale``), so the fleet view of 8,192
GPUs stays a handful of lines. The profiling panels (graphics engine, tensor and DRAM activity),
NVLink, PCIe replays and remapped rows need dcgm-exporter; the agent fills the others.
"""

from __future__ import annotations

import grafanalib.core as g

from observe import catalog as c
from observe.monitoring import dialects as d
from observe.monitoring import rules
from observe.monitoring.grafana import (
    layout,
    merged_table,
    organize,
    override,
    stat,
    state_timeline,
    table,
    target,
    threshold_steps,
    timeseries,
    variable,
)
from observe.monitoring.queries import GpuHealthQueries
from observe.monitoring.settings import Settings
from observe.monitoring.xid_table import XID_ACTION, XID_MEANING, xid_mappings


def temperature_thresholds(s: Settings) -> list[g.Threshold]:
    """The warning and critical lines of every temperature panel."""
    return threshold_steps((s.gpu_temperature_warning_celsius, "orange"), (s.gpu_temperature_critical_celsius, "red"))


def temperature_soft_max(s: Settings) -> float:
    """An axis top above the critical line, so both lines show at a normal 60 °C."""
    return s.gpu_temperature_critical_celsius + 5


def gpu_health(s: Settings) -> tuple[str, list[g.Template], list[g.Panel]]:
    """Description, variables and panels of the GPU-health dashboard."""
    q = GpuHealthQueries(s)
    k = s.top_n
    legend = q.legend
    ds = s.datasource_type
    xid_window = (
        [
            [
                timeseries(
                    "XIDs in dcgm-exporter's window",
                    [target(q.xid_window, legend + " XID {{xid}}")],
                    "none",
                    f"{d.XID_WINDOW.spellings[0].name}: XID records per GPU and code in the exporter's sliding window "
                    "(a gauge; the dcgm_xid_count setting says the exporter was configured to export it).",
                    min_=0,
                )
            ]
        ]
        if s.dcgm_xid_count
        else []
    )
    sections = [
        (
            "Fleet: the selected GPUs at a glance",
            [
                [
                    stat(
                        "GPUs reporting",
                        [target(q.gpus_reporting)],
                        "none",
                        "GPUs (and MIG instances) with a temperature from dcgm-exporter or, where no exporter "
                        "reports them, the fsdp-observe agent. No data means neither is scraped, not that there are "
                        "no GPUs.",
                    ),
                    stat(
                        "Lost GPUs (agent)",
                        [target(q.lost_count)],
                        "none",
                        "GPUs NVML reports lost (fallen off the bus). No data: no fsdp-observe agent is scraped.",
                        thresholds=threshold_steps((1, "red")),
                    ),
                    stat(
                        f"GPUs at or above {s.gpu_temperature_warning_celsius:g} °C",
                        [target(q.hot_count)],
                        "none",
                        "GPUs at or above the warning temperature now.",
                        thresholds=threshold_steps((1, "orange")),
                    ),
                    stat(
                        "GPUs with under 10 % memory free",
                        [target(q.low_memory_count)],
                        "none",
                        "GPUs whose device memory is over 90 % used now (free over used + free): close to an "
                        "out-of-memory error.",
                        thresholds=threshold_steps((1, "orange")),
                    ),
                    stat(
                        "GPUs whose row remapping failed",
                        [target(q.remap_failed_count)],
                        "none",
                        "Remapping rows has failed (dcgm-exporter): the GPU ran out of spare rows; it needs replacing.",
                        thresholds=threshold_steps((1, "red")),
                    ),
                ],
                [
                    timeseries(
                        "Graphics engine active across GPUs",
                        [target(e, lg, chr(65 + i)) for i, (e, lg) in enumerate(q.engine_spread)],
                        "percentunit",
                        "Minimum, median and maximum graphics-engine activity (a DCGM profiling field) over the "
                        "selected GPUs: a low minimum while the median is high is one idle GPU holding a job back.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Temperature across GPUs",
                        [target(e, lg, chr(65 + i)) for i, (e, lg) in enumerate(q.temperature_spread)],
                        "celsius",
                        "Minimum, median and maximum temperature over the selected GPUs.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                ],
            ],
        ),
        (
            f"Utilisation (the {k} least busy GPUs)",
            [
                [
                    timeseries(
                        "Graphics engine active (MIG-safe)",
                        [target(q.engine, legend)],
                        "percentunit",
                        "Share of time the graphics or compute engine was busy (a DCGM profiling field: empty without "
                        "dcgm-exporter). Reported for MIG instances too, unlike GPU utilisation.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Tensor-core activity",
                        [target(q.tensor, legend)],
                        "percentunit",
                        "Share of cycles the tensor (HMMA) pipe was active (DCGM profiling field); a bf16 fine-tune "
                        "that keeps it low is waiting on something else.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "DRAM activity",
                        [target(q.dram, legend)],
                        "percentunit",
                        "Share of cycles device memory was sending or receiving data (DCGM profiling field).",
                        min_=0,
                        max_=1,
                    ),
                ],
                [
                    timeseries(
                        "GPU utilisation (not under MIG)",
                        [target(q.utilization, legend)],
                        "percentunit",
                        "Share of time a kernel ran (dcgm-exporter, or the agent's NVML reading). Not reported for MIG "
                        "instances: use Graphics engine active there.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Memory copy utilisation",
                        [target(q.memory_copy, legend)],
                        "percentunit",
                        "Share of time device memory was read or written (not under MIG), the busiest GPUs.",
                        min_=0,
                        max_=1,
                    ),
                ],
            ],
        ),
        (
            f"Memory, clocks, heat and power (the {k} worst GPUs)",
            [
                [
                    timeseries(
                        "Framebuffer memory used",
                        [target(q.framebuffer_used, legend)],
                        "bytes",
                        "Device memory in use, the fullest GPUs.",
                    ),
                    timeseries(
                        "SM clock",
                        [target(q.sm_clock, legend)],
                        "hertz",
                        "SM clock, the lowest: a clock well under the GPU's boost clock while it is busy means "
                        "throttling (see Clock throttle reasons).",
                    ),
                    timeseries(
                        "GPU temperature",
                        [target(q.temperature, legend)],
                        "celsius",
                        "GPU temperature, the hottest.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                    timeseries("Power draw", [target(q.power, legend)], "watt", "Board power draw, the highest."),
                ]
            ],
        ),
        (
            f"NVLink and PCIe (the {k} busiest GPUs)",
            [
                [
                    timeseries(
                        "NVLink throughput",
                        [target(q.nvlink, legend)],
                        "Bps",
                        "NVLink traffic over all links, sent and received (dcgm-exporter only).",
                    ),
                    timeseries(
                        "PCIe transmit",
                        [target(q.pcie_transmit, legend)],
                        "Bps",
                        "Bytes per second sent over PCIe (dcgm-exporter's profiling field, headers included; the "
                        "agent's NVML figure where no exporter reports the GPU).",
                    ),
                    timeseries(
                        "PCIe receive",
                        [target(q.pcie_receive, legend)],
                        "Bps",
                        "Bytes per second received over PCIe (as PCIe transmit).",
                    ),
                ]
            ],
        ),
        (
            "ECC, row remapping and PCIe replays",
            [
                [
                    merged_table(
                        "GPUs with memory or PCIe errors",
                        q.errors_table,
                        "GPUs with remapped rows, a failed remapping, PCIe replays (dcgm-exporter) or uncorrected ECC "
                        f"errors ({c.GPU_ECC_ERRORS.name}). An empty table: no GPU has any (check GPUs reporting "
                        "above).",
                        ("node", "gpu", "gpu_uuid"),
                        ds,
                    ),
                    timeseries(
                        "ECC errors (agent)",
                        [target(q.ecc_agent, "{{node}} GPU {{gpu}} {{type}}")],
                        "none",
                        f"{c.GPU_ECC_ERRORS.name}: ECC errors since the driver loaded, corrected and uncorrected (NVML "
                        f"volatile counters), of the {k} GPUs that added the most in the range.",
                        min_=0,
                    ),
                    timeseries(
                        "PCIe replays",
                        [target(q.pcie_replays, legend)],
                        "none",
                        f"PCIe retries since boot (dcgm-exporter), of the {k} GPUs that added the most in the range; a "
                        "GPU that keeps replaying has a bad link or riser.",
                        min_=0,
                    ),
                ]
            ],
        ),
        (
            "XIDs",
            [
                [
                    table(
                        "Last XID per GPU (dcgm-exporter, sticky)",
                        [target(q.last_xid, instant=True, table=True, plugin=ds)],
                        "The last XID code a GPU reported to dcgm-exporter, which never returns to 0 by itself: it "
                        "says which XID came last, not that one came now (FsdpDcgmXidCritical fires when it changes). "
                        "GPUs that never had one are left out.",
                        transformations=[organize(["node", "gpu", "gpu_uuid", "Value", XID_MEANING])],
                        overrides=[
                            override("Value", displayName="last XID", unit="none"),
                            override(XID_MEANING, mappings=xid_mappings(XID_MEANING)),
                        ],
                        plugin=ds,
                    ),
                    table(
                        "XID errors by GPU and code (agent)",
                        [target(q.agent_xids, instant=True, table=True, plugin=ds)],
                        f"{c.GPU_XID_ERRORS.name}: XIDs per GPU and code since the agent started, with the code's "
                        f"meaning and NVIDIA's recommended action (observe/xid.py).",
                        transformations=[
                            organize(
                                [
                                    "node",
                                    "gpu",
                                    "gpu_uuid",
                                    "pci_bus",
                                    "xid",
                                    "severity",
                                    "Value",
                                    XID_MEANING,
                                    XID_ACTION,
                                ]
                            )
                        ],
                        overrides=[
                            override(XID_MEANING, mappings=xid_mappings(XID_MEANING)),
                            override(XID_ACTION, mappings=xid_mappings(XID_ACTION)),
                            override("Value", displayName="count", unit="none"),
                        ],
                        plugin=ds,
                    ),
                ],
                *xid_window,
            ],
        ),
        (
            "Lost and throttled GPUs (agent)",
            [
                [
                    state_timeline(
                        "Lost GPUs",
                        [target(q.lost_timeline, "{{node}} GPU {{gpu}}")],
                        "GPUs NVML reported lost at some time in the range, and when. Empty: none was.",
                        states={0: ("ok", "green"), 1: ("lost", "red")},
                        plugin=ds,
                    ),
                    timeseries(
                        "GPUs held down, by throttle reason (all nodes)",
                        [target(q.throttled_counts, "{{reason}}")],
                        "none",
                        f"How many GPUs of the cluster each NVML clock event reason holds down ({rules.THROTTLED}, "
                        "recorded: a count over every GPU's reasons at every step would be slow at 8,192 GPUs).",
                        min_=0,
                    ),
                    state_timeline(
                        "Clock throttle reasons",
                        [target(q.throttle_reasons, "{{node}} GPU {{gpu}}: {{reason}}")],
                        f"The {k} (GPU, reason) pairs that held clocks down longest in the range, and when.",
                        states={0: ("free", "transparent"), 1: ("held down", "orange")},
                        plugin=ds,
                    ),
                ]
            ],
        ),
        (
            "Processes on the GPUs (agent)",
            [
                [
                    merged_table(
                        f"GPU processes (the {k} largest)",
                        [(q.processes, "bytes", "GPU memory"), (q.process_sm, "percentunit", "SM share")],
                        f"Processes using the selected GPUs: {c.GPU_PROCESS_MEMORY.name} and "
                        f"{c.GPU_PROCESS_SM_UTILIZATION.name}, with the user and (redacted) command from "
                        f"{c.NODE_PROCESS_INFO.name}.",
                        ("node", "gpu", "pid", "user", "name", "command"),
                        ds,
                    ),
                ]
            ],
        ),
        (
            "dcgm-exporter",
            [
                [
                    table(
                        "Nodes by dcgm-exporter dialect",
                        [target(q.dialects, instant=True, table=True, plugin=ds)],
                        f"How many of the selected nodes' exporters speak each dcgm-exporter dialect ({d.DIALECT}): "
                        "up-to-4.8.2 (Hostname), 4.8.3 (hostname), 4.9 (renamed fields in base units), 4.10 (renamed "
                        "PCIe fields; a 4.10 exporter without them shows as 4.9), with the driver version. Every panel "
                        "reads every dialect; during a rolling upgrade both rows show. Which nodes: pick one in the "
                        f"node variable, or query count by (node, dialect) ({d.DIALECT}).",
                        transformations=[organize(["dialect", "driver_version", "Value"])],
                        overrides=[override("Value", displayName="nodes", unit="none")],
                        plugin=ds,
                    ),
                ]
            ],
        ),
    ]
    templates = [
        variable("node", "Node", q.nodes, ".+", ds),
        variable("gpu", "GPU", q.gpus, ".+", ds),
    ]
    return (
        "GPUs by node from every dcgm-exporter dialect (the canonical records) and the fsdp-observe agent: "
        "utilisation (MIG-safe), tensor and DRAM activity, memory, clocks, heat, power, NVLink and PCIe, ECC and "
        "row remapping, XIDs with their meaning and action, lost and throttled GPUs, GPU processes, and which "
        "exporter dialect each node speaks.",
        templates,
        layout(sections),
    )
