"""The GPU-health dashboard (uid ``fsdp-gpu-health``): every GPU by node, from dcgm-exporter's
default counters and the fsdp-observe agent.

Variables ``node`` and ``gpu`` list ``DCGM_FI_DEV_GPU_TEMP``, a field every GPU and every MIG
instance reports (``DCGM_FI_DEV_GPU_UTIL`` is not reported under MIG, so nodes with only MIG GPUs
would drop out). The graphics-engine activity (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``) is the
utilisation that holds under MIG. Per-GPU panels draw the ``top_n`` worst GPUs over the range
(``observe.monitoring.scale``), so the fleet view of 8,192 GPUs stays a handful of lines.
"""

from __future__ import annotations

import grafanalib.core as g

from observe import catalog as c
from observe.monitoring import fields as f
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
from observe.monitoring.scale import count_or_zero, spread, stable_top
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
    d = (s.dcgm_node("$node"), 'gpu=~"$gpu"')
    a = ('node=~"$node"', 'gpu=~"$gpu"')
    k = s.top_n
    legend = f"{{{{node}}}} GPU {{{{gpu}}}} {{{{{f.DCGM_MIG_PROFILE}}}}} ({{{{{s.dcgm_model_label}}}}})"

    def field(name: str, *extra: str) -> str:
        return s.dcgm(name, *d, *extra)

    def over(fn: str, name: str, window: str) -> str:
        """``fn(<DCGM selector>[window])``, normalised: range functions need the plain selector."""
        return s.dcgm_normalised(f"{fn}({s.dcgm_raw(name, *d)}[{window}])")

    raw_id = f"{s.dcgm_hostname_label}, gpu, {s.dcgm_uuid_label}, {f.DCGM_MIG_INSTANCE}"

    def worst(name: str, scale: str = "", bottom: bool = False, reducer: str = "avg") -> str:
        """The ``top_n`` worst GPUs of one DCGM field: chosen and drawn on the exporter's own
        labels, renamed (``label_replace``) only for those ``top_n`` series."""
        picked = stable_top(k, s.dcgm_raw(name, *d), raw_id, bottom=bottom, reducer=reducer)
        return s.dcgm_normalised(f"({picked}){scale}")

    def raw(name: str, *extra: str) -> str:
        return s.dcgm_raw(name, *d, *extra)

    def agent(metric: c.Metric, *extra: str) -> str:
        return s.agent(metric.name, *a, *extra)

    temp = raw(f.DCGM_GPU_TEMP)  # counted: no renaming needed
    mib = f"* {f.MIB}"
    xid_count = (
        f"max by (node, gpu, gpu_uuid, pci_bus, xid, severity) (last_over_time({agent(c.GPU_XID_ERRORS)}[$__range]))"
    )
    for column in (XID_MEANING, XID_ACTION):
        xid_count = f'label_replace({xid_count}, "{column}", "$1", "xid", "(.+)")'
    last = field(f.DCGM_XID_ERRORS, 'err_code!="0"')
    last_xid = (
        f"label_replace(max by (node, gpu, gpu_uuid, err_code, err_msg) ({last}), "
        f'"{XID_MEANING}", "$1", "err_code", "(.+)")'
    )
    uncorrected = agent(c.GPU_ECC_ERRORS, 'type="uncorrected"')
    throttle = agent(c.GPU_CLOCK_THROTTLE)
    lost = agent(c.GPU_LOST)
    processes = (
        f"topk({k}, sum by (node, gpu, pid) ({agent(c.GPU_PROCESS_MEMORY)}))\n"
        f"* on (node, pid) group_left (user, name, command)\n"
        f"max by (node, pid, user, name, command) ({s.agent(c.NODE_PROCESS_INFO.name, a[0])})"
    )
    # The latest sample within 2 minutes: NVML reports a process's SM share only in the collections
    # that read a fresh utilisation sample.
    sm_of_processes = (
        f"last_over_time({agent(c.GPU_PROCESS_SM_UTILIZATION)}[2m])\nand on (node, gpu, pid)\n({processes})"
    )
    xid_window = (
        [
            [
                timeseries(
                    "XIDs in dcgm-exporter's window",
                    [target(f"{field(f.DCGM_XID_COUNT)} > 0", legend + " XID {{xid}}")],
                    "none",
                    f"{f.DCGM_XID_COUNT}: XID records per GPU and code in the exporter's sliding window (a gauge; the "
                    f"dcgm_xid_count setting says the exporter was configured to export it).",
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
                        [target(f"count({temp})")],
                        "none",
                        f"GPUs (and MIG instances) dcgm-exporter reports {f.DCGM_GPU_TEMP} for. No data means no "
                        "exporter is scraped, not that there are no GPUs.",
                    ),
                    stat(
                        "Lost GPUs (agent)",
                        [target(count_or_zero(f"{lost} == 1", lost))],
                        "none",
                        "GPUs NVML reports lost (fallen off the bus). No data: no fsdp-observe agent is scraped.",
                        thresholds=threshold_steps((1, "red")),
                    ),
                    stat(
                        f"GPUs at or above {s.gpu_temperature_warning_celsius:g} °C",
                        [target(count_or_zero(f"{temp} >= {s.gpu_temperature_warning_celsius:g}", temp))],
                        "none",
                        "GPUs at or above the warning temperature now.",
                        thresholds=threshold_steps((1, "orange")),
                    ),
                    stat(
                        "GPUs with under 10 % memory free",
                        [
                            target(
                                count_or_zero(
                                    f"{raw(f.DCGM_FB_FREE)} / ({raw(f.DCGM_FB_USED)} + {raw(f.DCGM_FB_FREE)}) < 0.1",
                                    raw(f.DCGM_FB_FREE),
                                )
                            )
                        ],
                        "none",
                        f"GPUs whose framebuffer is over 90 % used now ({f.DCGM_FB_FREE} over {f.DCGM_FB_USED} + "
                        f"{f.DCGM_FB_FREE}): close to an out-of-memory error.",
                        thresholds=threshold_steps((1, "orange")),
                    ),
                    stat(
                        "GPUs whose row remapping failed",
                        [
                            target(
                                count_or_zero(
                                    f"{field(f.DCGM_ROW_REMAP_FAILURE)} == 1", field(f.DCGM_ROW_REMAP_FAILURE)
                                )
                            )
                        ],
                        "none",
                        f"{f.DCGM_ROW_REMAP_FAILURE} = 1: the GPU ran out of spare rows; it needs replacing.",
                        thresholds=threshold_steps((1, "red")),
                    ),
                ],
                [
                    timeseries(
                        "Graphics engine active across GPUs",
                        [target(e, lg, chr(65 + i)) for i, (e, lg) in enumerate(spread(raw(f.DCGM_GR_ENGINE_ACTIVE)))],
                        "percentunit",
                        f"Minimum, median and maximum of {f.DCGM_GR_ENGINE_ACTIVE} over the selected "
                        "GPUs: a low minimum while the median is high is one idle GPU holding a job "
                        "back.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Temperature across GPUs",
                        [target(e, lg, chr(65 + i)) for i, (e, lg) in enumerate(spread(raw(f.DCGM_GPU_TEMP)))],
                        "celsius",
                        f"Minimum, median and maximum of {f.DCGM_GPU_TEMP} over the selected GPUs.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                ],
            ],
        ),
        (
            f"Utilisation (dcgm-exporter; the {k} least busy GPUs)",
            [
                [
                    timeseries(
                        "Graphics engine active (MIG-safe)",
                        [target(worst(f.DCGM_GR_ENGINE_ACTIVE, bottom=True), legend)],
                        "percentunit",
                        f"{f.DCGM_GR_ENGINE_ACTIVE}: share of time the graphics engine was busy. Reported for MIG "
                        "instances too, unlike GPU utilisation.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Tensor-core activity",
                        [target(worst(f.DCGM_TENSOR_ACTIVE, bottom=True), legend)],
                        "percentunit",
                        f"{f.DCGM_TENSOR_ACTIVE}: share of cycles the tensor (HMMA) pipe was active; "
                        "a bf16 fine-tune that keeps it low is waiting on something else.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "DRAM activity",
                        [target(worst(f.DCGM_DRAM_ACTIVE, bottom=True), legend)],
                        "percentunit",
                        f"{f.DCGM_DRAM_ACTIVE}: share of cycles device memory was sending or receiving data.",
                        min_=0,
                        max_=1,
                    ),
                ],
                [
                    timeseries(
                        "GPU utilisation (not under MIG)",
                        [target(worst(f.DCGM_GPU_UTIL, bottom=True), legend)],
                        "percent",
                        f"{f.DCGM_GPU_UTIL}: share of time a kernel ran. dcgm-exporter does not report "
                        "it for MIG instances: use Graphics engine active there.",
                        min_=0,
                        max_=100,
                    ),
                    timeseries(
                        "Memory copy utilisation",
                        [target(worst(f.DCGM_MEM_COPY_UTIL), legend)],
                        "percent",
                        f"{f.DCGM_MEM_COPY_UTIL}: share of time device memory was read or written (not under MIG).",
                        min_=0,
                        max_=100,
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
                        [target(worst(f.DCGM_FB_USED, f" {mib}"), legend)],
                        "bytes",
                        f"{f.DCGM_FB_USED} (MiB, shown in bytes): device memory in use, the fullest GPUs.",
                    ),
                    timeseries(
                        "SM clock",
                        [target(worst(f.DCGM_SM_CLOCK, " * 1e6", bottom=True), legend)],
                        "hertz",
                        f"{f.DCGM_SM_CLOCK} (MHz, shown in Hz), the lowest clocks: a clock well under the GPU's boost "
                        "clock while it is busy means throttling (see Clock throttle reasons).",
                    ),
                    timeseries(
                        "GPU temperature",
                        [target(worst(f.DCGM_GPU_TEMP), legend)],
                        "celsius",
                        f"{f.DCGM_GPU_TEMP}, the hottest.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                    timeseries(
                        "Power draw",
                        [target(worst(f.DCGM_POWER_USAGE), legend)],
                        "watt",
                        f"{f.DCGM_POWER_USAGE}, the highest.",
                    ),
                ]
            ],
        ),
        (
            f"NVLink and PCIe (the {k} busiest GPUs)",
            [
                [
                    timeseries(
                        "NVLink throughput",
                        [target(worst(f.DCGM_NVLINK_BANDWIDTH, f" * {f.NVLINK_UNIT_TO_BYTES}"), legend)],
                        "Bps",
                        f"{f.DCGM_NVLINK_BANDWIDTH}: NVLink traffic over all links, sent and received. Typed counter "
                        "by the exporter but a rate already (KiB/s / 1000), so charted as is.",
                    ),
                    timeseries(
                        "PCIe transmit",
                        [target(worst(f.DCGM_PCIE_TX), legend)],
                        "Bps",
                        f"{f.DCGM_PCIE_TX}: bytes per second sent over PCIe, headers included.",
                    ),
                    timeseries(
                        "PCIe receive",
                        [target(worst(f.DCGM_PCIE_RX), legend)],
                        "Bps",
                        f"{f.DCGM_PCIE_RX}: bytes per second received over PCIe, headers included.",
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
                        [
                            (
                                f"topk({k}, max by (node, gpu, gpu_uuid) "
                                f"({field(f.DCGM_ROWS_REMAPPED_UNCORRECTABLE)}) > 0)",
                                "none",
                                "uncorrectable remapped rows",
                            ),
                            (
                                f"topk({k}, max by (node, gpu, gpu_uuid) ({field(f.DCGM_ROWS_REMAPPED_CORRECTABLE)}) "
                                "> 0)",
                                "none",
                                "correctable remapped rows",
                            ),
                            (
                                f"max by (node, gpu, gpu_uuid) ({field(f.DCGM_ROW_REMAP_FAILURE)}) == 1",
                                "none",
                                "remapping failed",
                            ),
                            (
                                f"topk({k}, sum by (node, gpu, gpu_uuid) "
                                f"({over('increase', f.DCGM_PCIE_REPLAY, '$__range')}) > 0)",
                                "none",
                                "PCIe replays in the range",
                            ),
                            (
                                f"topk({k}, sum by (node, gpu, gpu_uuid) (increase({uncorrected}[$__range])) > 0)",
                                "none",
                                "uncorrected ECC errors in the range (agent)",
                            ),
                        ],
                        f"GPUs with remapped rows ({f.DCGM_ROWS_REMAPPED_UNCORRECTABLE}, "
                        f"{f.DCGM_ROWS_REMAPPED_CORRECTABLE}), a "
                        f"failed remapping, PCIe replays ({f.DCGM_PCIE_REPLAY}) or uncorrected ECC errors "
                        f"({c.GPU_ECC_ERRORS.name}). An empty table: no GPU has any (check GPUs reporting above).",
                        ("node", "gpu", "gpu_uuid"),
                        s.datasource_type,
                    ),
                    timeseries(
                        "ECC errors (agent)",
                        [
                            target(
                                stable_top(k, agent(c.GPU_ECC_ERRORS), "node, gpu, type", reducer="increase"),
                                "{{node}} GPU {{gpu}} {{type}}",
                            )
                        ],
                        "none",
                        f"{c.GPU_ECC_ERRORS.name}: ECC errors since the driver loaded, corrected and uncorrected (NVML "
                        f"volatile counters), of the {k} GPUs that added the most in the range.",
                        min_=0,
                    ),
                    timeseries(
                        "PCIe replays",
                        [target(worst(f.DCGM_PCIE_REPLAY, reducer="increase"), legend)],
                        "none",
                        f"{f.DCGM_PCIE_REPLAY}: PCIe retries since boot, of the {k} GPUs that added the most in the "
                        "range; a GPU that keeps replaying has a bad link or riser.",
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
                        [target(last_xid, instant=True, table=True, plugin=s.datasource_type)],
                        f"{f.DCGM_XID_ERRORS} holds the last XID code a GPU reported and never returns to 0 by "
                        "itself: it "
                        "says which XID came last, not that one came now (the FsdpDcgmXid alerts fire when it "
                        "changes). "
                        "GPUs that never had one are left out.",
                        transformations=[organize(["node", "gpu", "gpu_uuid", "Value", XID_MEANING, "err_msg"])],
                        overrides=[
                            override("Value", displayName="last XID", unit="none"),
                            override(XID_MEANING, mappings=xid_mappings(XID_MEANING)),
                        ],
                        plugin=s.datasource_type,
                    ),
                    table(
                        "XID errors by GPU and code (agent)",
                        [target(xid_count, instant=True, table=True, plugin=s.datasource_type)],
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
                        plugin=s.datasource_type,
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
                        [
                            target(
                                f"{lost}\nand on (node, gpu)\n(max_over_time({lost}[$__range] @ end()) == 1)",
                                "{{node}} GPU {{gpu}}",
                            )
                        ],
                        "GPUs NVML reported lost at some time in the range, and when. Empty: none was.",
                        states={0: ("ok", "green"), 1: ("lost", "red")},
                        plugin=s.datasource_type,
                    ),
                    timeseries(
                        "GPUs held down, by throttle reason (all nodes)",
                        [target(s.agent(rules.THROTTLED), "{{reason}}")],
                        "none",
                        f"How many GPUs of the cluster each NVML clock event reason holds down ({rules.THROTTLED}, "
                        "recorded: a count over every GPU's reasons at every step would be slow at 8,192 GPUs).",
                        min_=0,
                    ),
                    state_timeline(
                        "Clock throttle reasons",
                        [
                            target(
                                stable_top(k, throttle, "node, gpu, reason", reducer="sum"),
                                "{{node}} GPU {{gpu}}: {{reason}}",
                            )
                        ],
                        f"The {k} (GPU, reason) pairs that held clocks down longest in the range, and when.",
                        states={0: ("free", "transparent"), 1: ("held down", "orange")},
                        plugin=s.datasource_type,
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
                        [(processes, "bytes", "GPU memory"), (sm_of_processes, "percentunit", "SM share")],
                        f"Processes using the selected GPUs: {c.GPU_PROCESS_MEMORY.name} and "
                        f"{c.GPU_PROCESS_SM_UTILIZATION.name}, with the user and (redacted) command from "
                        f"{c.NODE_PROCESS_INFO.name}.",
                        ("node", "gpu", "pid", "user", "name", "command"),
                        s.datasource_type,
                    ),
                ]
            ],
        ),
    ]
    temp_raw = s.dcgm_raw(f.DCGM_GPU_TEMP)
    templates = [
        variable("node", "Node", f"label_values({temp_raw}, {s.dcgm_hostname_label})", ".+", s.datasource_type),
        variable(
            "gpu",
            "GPU",
            f"label_values({s.dcgm_raw(f.DCGM_GPU_TEMP, s.dcgm_node('$node'))}, gpu)",
            ".+",
            s.datasource_type,
        ),
    ]
    return (
        "GPUs by node from dcgm-exporter's default counters and the fsdp-observe agent: utilisation (MIG-safe), "
        "tensor and DRAM activity, memory, clocks, heat, power, NVLink and PCIe, ECC and row remapping, XIDs "
        "with their meaning and action, lost and throttled GPUs, GPU processes.",
        templates,
        layout(sections),
    )
