"""The Nodes dashboard (uid ``fsdp-nodes``): host data from node-exporter and the fsdp-observe agent.

node-exporter runs wherever kube-prometheus-stack does, so the first row (CPU, network, disk) is
filled before the agent is deployed; the rest comes from the agent (per-core CPU, memory, swap,
load, processes, its NVML view of the GPUs, its own health). The ``node`` variable lists nodes
that either source reports. Per-node panels draw the ``top_n`` busiest nodes over the range. A
list of panels; the queries are ``observe.monitoring.queries.NodeQueries``.
"""

from __future__ import annotations

import grafanalib.core as g

from observe import catalog as c
from observe.monitoring import fields as f
from observe.monitoring import rules
from observe.monitoring.board_gpu import temperature_soft_max, temperature_thresholds
from observe.monitoring.grafana import (
    RowsHeatmap,
    heatmap,
    layout,
    merged_table,
    stat,
    state_timeline,
    target,
    timeseries,
    variable,
)
from observe.monitoring.queries import NodeQueries
from observe.monitoring.settings import Settings


def nodes(s: Settings) -> tuple[str, list[g.Template], list[g.Panel]]:
    """Description, variables and panels of the Nodes dashboard."""
    q = NodeQueries(s)
    k = s.top_n
    ds = s.datasource_type
    gpu = "{{node}} GPU {{gpu}}"
    sections = [
        (
            f"Host (node-exporter; the {k} busiest nodes)",
            [
                [
                    timeseries(
                        "CPU busy (node-exporter)",
                        [target(q.cpu_busy_node_exporter, "{{node}}")],
                        "percentunit",
                        f"1 - the idle share of {f.NODE_CPU_SECONDS} over all cores ({rules.NODE_CPU_BUSY}).",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Network receive",
                        [target(q.network_receive, "{{node}}")],
                        "Bps",
                        f"{f.NODE_NETWORK_RECEIVE} over the physical interfaces (loopback, CNI and bridge devices left "
                        "out): data loading, checkpoint reads and, without RDMA, the collectives.",
                    ),
                    timeseries(
                        "Network transmit",
                        [target(q.network_transmit, "{{node}}")],
                        "Bps",
                        f"{f.NODE_NETWORK_TRANSMIT} over the physical interfaces.",
                    ),
                ],
                [
                    timeseries(
                        "Disk read",
                        [target(q.disk_read, "{{node}}")],
                        "Bps",
                        f"{f.NODE_DISK_READ} over whole disks (partitions and device-mapper counted once).",
                    ),
                    timeseries(
                        "Disk write",
                        [target(q.disk_written, "{{node}}")],
                        "Bps",
                        f"{f.NODE_DISK_WRITTEN}: a checkpoint save shows as a burst here.",
                    ),
                    timeseries(
                        "Disk busy",
                        [target(q.disk_busy, "{{node}}")],
                        "percentunit",
                        f"{f.NODE_DISK_IO_TIME}: share of time the busiest disk of the node had I/O in flight.",
                        min_=0,
                        max_=1,
                    ),
                ],
            ],
        ),
        (
            f"CPU (agent; the {k} busiest nodes)",
            [
                [
                    timeseries(
                        "CPU busy",
                        [target(q.cpu_busy, "{{node}}")],
                        "percentunit",
                        "Share of all CPU time not idle or in iowait.",
                        min_=0,
                        max_=1,
                    ),
                    heatmap(
                        RowsHeatmap,
                        f"CPU busy: the {k} busiest cores of $core_node",
                        [target(q.busiest_cores, "{{cpu}}", plugin=ds)],
                        "percentunit",
                        f"The busy share of the {k} logical CPUs of one node (the Cores of variable) that were busiest "
                        "over the range, one row per core in core order: a rank pinned to a saturated core shows as a "
                        "hot row. The busiest few, not every core: a 192-core node would draw 192 rows.",
                        plugin=ds,
                    ),
                    timeseries(
                        "Load average",
                        [
                            target(q.load[0], "{{node}} 1m"),
                            target(q.load[1], "{{node}} 5m", "B"),
                            target(q.load[2], "{{node}} 15m", "C"),
                        ],
                        "short",
                        "Run-queue length averaged over 1, 5 and 15 minutes.",
                    ),
                ]
            ],
        ),
        (
            f"Memory (agent; the {k} fullest nodes)",
            [
                [
                    timeseries(
                        "Memory used",
                        [target(q.memory_used, "{{node}}")],
                        "percentunit",
                        "Used (total - free - buffers - cache, as free and htop count it) over total.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Memory available",
                        [target(q.memory_available, "{{node}}")],
                        "bytes",
                        "MemAvailable of the nodes with the least: what can still be allocated without swapping.",
                    ),
                    timeseries(
                        "Swap used",
                        [target(q.swap_used, "{{node}}")],
                        "bytes",
                        "Swap in use; a training node that swaps is slow.",
                    ),
                ]
            ],
        ),
        (
            "Processes (agent)",
            [
                [
                    timeseries(
                        "Processes by state",
                        [
                            target(q.processes_by_state, "{{state}}"),
                            target(q.threads, "threads", "B"),
                        ],
                        "short",
                        "Processes on the selected nodes by state, and their threads.",
                    ),
                    merged_table(
                        f"Busiest processes (the {k} of all selected nodes)",
                        [
                            (q.busiest_processes_cpu, "short", "CPU (cores)"),
                            (q.busiest_processes_memory, "bytes", "resident memory"),
                        ],
                        f"The {k} processes of the selected nodes that used the most CPU over 5 minutes (cores), with "
                        "their "
                        "resident memory. Command lines are redacted on the node (docs/agent.md).",
                        ("node", "pid", "user", "name", "command"),
                        ds,
                    ),
                ]
            ],
        ),
        (
            f"GPUs (fsdp-observe agent, NVML; the {k} worst GPUs)",
            [
                [
                    timeseries(
                        "GPU utilisation",
                        [target(q.gpu_utilization, gpu)],
                        "percentunit",
                        "Share of the last sample period in which a kernel ran, the least busy GPUs.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "GPU memory used",
                        [target(q.gpu_memory_used, gpu)],
                        "bytes",
                        "Device memory allocated by processes, the fullest GPUs.",
                    ),
                    timeseries(
                        "GPU temperature",
                        [target(q.gpu_temperature, gpu)],
                        "celsius",
                        "GPU core temperature, the hottest GPUs.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                    timeseries(
                        "GPU power",
                        [target(q.gpu_power, gpu)],
                        "watt",
                        f"Board power, the GPUs drawing most ({c.GPU_POWER_LIMIT.name} is the limit the driver "
                        "enforces).",
                    ),
                ]
            ],
        ),
        (
            "The agent itself",
            [
                [
                    stat(
                        "Agents reporting",
                        [target(q.agents_reporting)],
                        "none",
                        "Nodes whose fsdp-observe agent is scraped. No data: none is.",
                    ),
                    state_timeline(
                        "Sources unreadable",
                        [target(q.sources_unreadable, "{{node}} {{source}}")],
                        "Sources (procfs, NVML, the kernel log) an agent could not read at some time in the range, and "
                        "when. Empty: every agent read every source throughout.",
                        states={0: ("unreadable", "red"), 1: ("readable", "green")},
                        plugin=ds,
                    ),
                    timeseries(
                        "Collection time",
                        [target(q.collection_time, "{{node}}")],
                        "s",
                        "Wall time of the agent's last collection, the slowest agents.",
                    ),
                ]
            ],
        ),
    ]
    templates = [
        variable("node", "Node", q.nodes, ".+", ds, regex='/node="([^"]+)"/'),
        variable("core_node", "Cores of", q.core_nodes, None, ds),
    ]
    return (
        "Host data from node-exporter (CPU, network, disk) and the fsdp-observe agent (per-core CPU, memory, "
        "swap, load, processes, its NVML view of the GPUs, its own health).",
        templates,
        layout(sections),
    )
