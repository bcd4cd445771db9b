"""The Nodes dashboard (uid ``fsdp-nodes``): host data from node-exporter and the fsdp-observe agent.

node-exporter runs wherever kube-prometheus-stack does, so the first row (CPU, network, disk) is
filled before the agent is deployed; the rest comes from the agent (per-core CPU, memory, swap,
load, processes, its NVML view of the GPUs, its own health). The ``node`` variable lists nodes
that either source reports. Per-node panels draw the ``top_n`` busiest nodes over the range.
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
from observe.monitoring.scale import stable_top
from observe.monitoring.settings import Settings


def nodes(s: Settings) -> tuple[str, list[g.Template], list[g.Panel]]:
    """Description, variables and panels of the Nodes dashboard."""
    n = 'node=~"$node"'
    k = s.top_n

    def a(metric: c.Metric, *extra: str) -> str:
        return s.agent(metric.name, n, *extra)

    def recorded(rule: str) -> str:
        """A per-node series recorded from node-exporter (``observe.monitoring.rules.node_rules``)."""
        return f"{rule}{{{n}}}"

    def busiest(expr: str, by: str = "node", bottom: bool = False) -> str:
        return stable_top(k, expr, by, bottom=bottom)

    cpu_rate = f"rate({a(c.NODE_PROCESS_CPU_SECONDS)}[5m])"
    top_processes = f"topk({k}, {cpu_rate})"
    gpu = "{{node}} GPU {{gpu}}"
    sources = a(c.AGENT_UP)
    sections = [
        (
            f"Host (node-exporter; the {k} busiest nodes)",
            [
                [
                    timeseries(
                        "CPU busy (node-exporter)",
                        [target(busiest(recorded(rules.NODE_CPU_BUSY)), "{{node}}")],
                        "percentunit",
                        f"1 - the idle share of {f.NODE_CPU_SECONDS} over all cores ({rules.NODE_CPU_BUSY}).",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Network receive",
                        [target(busiest(recorded(rules.NODE_NETWORK_RECEIVE)), "{{node}}")],
                        "Bps",
                        f"{f.NODE_NETWORK_RECEIVE} over the physical interfaces (loopback, CNI and bridge devices left "
                        "out): data loading, checkpoint reads and, without RDMA, the collectives.",
                    ),
                    timeseries(
                        "Network transmit",
                        [target(busiest(recorded(rules.NODE_NETWORK_TRANSMIT)), "{{node}}")],
                        "Bps",
                        f"{f.NODE_NETWORK_TRANSMIT} over the physical interfaces.",
                    ),
                ],
                [
                    timeseries(
                        "Disk read",
                        [target(busiest(recorded(rules.NODE_DISK_READ)), "{{node}}")],
                        "Bps",
                        f"{f.NODE_DISK_READ} over whole disks (partitions and device-mapper counted once).",
                    ),
                    timeseries(
                        "Disk write",
                        [target(busiest(recorded(rules.NODE_DISK_WRITTEN)), "{{node}}")],
                        "Bps",
                        f"{f.NODE_DISK_WRITTEN}: a checkpoint save shows as a burst here.",
                    ),
                    timeseries(
                        "Disk busy",
                        [target(busiest(recorded(rules.NODE_DISK_BUSY)), "{{node}}")],
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
                        [target(busiest(a(c.NODE_CPU_BUSY)), "{{node}}")],
                        "percentunit",
                        "Share of all CPU time not idle or in iowait.",
                        min_=0,
                        max_=1,
                    ),
                    heatmap(
                        RowsHeatmap,
                        "CPU busy per core of $core_node",
                        [
                            target(
                                s.agent(c.NODE_CPU_CORE_BUSY.name, 'node="$core_node"'),
                                "{{cpu}}",
                                plugin=s.datasource_type,
                            )
                        ],
                        "percentunit",
                        "Each logical CPU's busy share of one node (the Cores of variable), one row per core "
                        "in core order. One node at a time: a row per core of every node would be thousands.",
                        plugin=s.datasource_type,
                    ),
                    timeseries(
                        "Load average",
                        [
                            target(busiest(a(c.NODE_LOAD1)), "{{node}} 1m"),
                            target(busiest(a(c.NODE_LOAD5)), "{{node}} 5m", "B"),
                            target(busiest(a(c.NODE_LOAD15)), "{{node}} 15m", "C"),
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
                        [
                            target(
                                stable_top(
                                    k,
                                    f"{a(c.NODE_MEMORY_USED)} / {a(c.NODE_MEMORY_TOTAL)}",
                                    "node",
                                    pick_from=a(c.NODE_MEMORY_USED),
                                ),
                                "{{node}}",
                            )
                        ],
                        "percentunit",
                        "Used (total - free - buffers - cache, as free and htop count it) over total.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Memory available",
                        [target(busiest(a(c.NODE_MEMORY_AVAILABLE), bottom=True), "{{node}}")],
                        "bytes",
                        "MemAvailable of the nodes with the least: what can still be allocated without swapping.",
                    ),
                    timeseries(
                        "Swap used",
                        [target(busiest(a(c.NODE_SWAP_USED)), "{{node}}")],
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
                            target(f"sum by (state) ({a(c.NODE_PROCESSES)})", "{{state}}"),
                            target(f"sum({a(c.NODE_THREADS)})", "threads", "B"),
                        ],
                        "short",
                        "Processes on the selected nodes by state, and their threads.",
                    ),
                    merged_table(
                        f"Busiest processes (the {k} of all selected nodes)",
                        [
                            (
                                f"{top_processes}\n* on (node, pid) group_left (name, user, "
                                f"command)\n{a(c.NODE_PROCESS_INFO)}",
                                "short",
                                "CPU (cores)",
                            ),
                            (
                                f"{a(c.NODE_PROCESS_RESIDENT_MEMORY)}\nand on (node, pid)\n{top_processes}",
                                "bytes",
                                "resident memory",
                            ),
                        ],
                        f"The {k} processes of the selected nodes that used the most CPU over 5 minutes (cores), with "
                        "their "
                        "resident memory. Command lines are redacted on the node (docs/agent.md).",
                        ("node", "pid", "user", "name", "command"),
                        s.datasource_type,
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
                        [target(stable_top(k, a(c.GPU_UTILIZATION), "node, gpu", bottom=True), gpu)],
                        "percentunit",
                        "Share of the last sample period in which a kernel ran, the least busy GPUs.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "GPU memory used",
                        [target(stable_top(k, a(c.GPU_MEMORY_USED), "node, gpu"), gpu)],
                        "bytes",
                        "Device memory allocated by processes, the fullest GPUs.",
                    ),
                    timeseries(
                        "GPU temperature",
                        [target(stable_top(k, a(c.GPU_TEMPERATURE), "node, gpu"), gpu)],
                        "celsius",
                        "GPU core temperature, the hottest GPUs.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                    timeseries(
                        "GPU power",
                        [target(stable_top(k, a(c.GPU_POWER), "node, gpu"), gpu)],
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
                        [target(f"count({a(c.AGENT_COLLECTIONS)})")],
                        "none",
                        "Nodes whose fsdp-observe agent is scraped. No data: none is.",
                    ),
                    state_timeline(
                        "Sources unreadable",
                        [
                            target(
                                f"{sources}\nand on (node, source)\n(min_over_time({sources}[$__range] @ end()) == 0)",
                                "{{node}} {{source}}",
                            )
                        ],
                        "Sources (procfs, NVML, the kernel log) an agent could not read at some time in the range, and "
                        "when. Empty: every agent read every source throughout.",
                        states={0: ("unreadable", "red"), 1: ("readable", "green")},
                        plugin=s.datasource_type,
                    ),
                    timeseries(
                        "Collection time",
                        [target(busiest(a(c.AGENT_COLLECTION_SECONDS)), "{{node}}")],
                        "s",
                        "Wall time of the agent's last collection, the slowest agents.",
                    ),
                ]
            ],
        ),
    ]
    node_sources = (
        f"count by (node) ({s.node_exporter(f.NODE_UNAME, s.node_exporter_node('.+'))}) "
        f"or count by (node) ({s.agent(c.AGENT_COLLECTIONS.name)})"
    )
    templates = [
        variable("node", "Node", f"query_result({node_sources})", ".+", s.datasource_type, regex='/node="([^"]+)"/'),
        variable(
            "core_node",
            "Cores of",
            f"label_values({s.agent(c.NODE_CPU_CORE_BUSY.name, n)}, node)",
            None,
            s.datasource_type,
        ),
    ]
    return (
        "Host data from node-exporter (CPU, network, disk) and the fsdp-observe agent (per-core CPU, memory, "
        "swap, load, processes, its NVML view of the GPUs, its own health).",
        templates,
        layout(sections),
    )
