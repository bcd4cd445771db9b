"""Grafana dashboards for FSDP runs, their GPUs and their nodes, generated with grafanalib.

``dashboards(settings)`` returns file name → dashboard JSON data for ``dashboards/``:

- ``training-run.json`` (uid ``fsdp-training-run``): one run's progress, throughput, MFU, step
  time per rank, memory, optimiser, where wall time goes, the scaling efficiency across runs,
  and the run's own GPUs from dcgm-exporter (joined on GPU UUID and node) beside its step time;
- ``gpu-health.json`` (uid ``fsdp-gpu-health``): the six DCGM fields of the EKS walkthrough by node
  and GPU, DCGM's XID fields, the agent's XID counter as a table with each code's meaning and
  action, lost GPUs and clock throttling;
- ``nodes.json`` (uid ``fsdp-nodes``): host data from the agent (CPU per core, memory, swap,
  load, processes) and its NVML view of the GPUs.

Every metric name comes from ``observe.catalog`` or ``observe.monitoring.settings`` (DCGM's); every
choice a cluster makes (datasource plugin, selectors, DCGM dialect, thresholds) from
``observe.monitoring.settings.Settings``. Panels and queries point at the ``${datasource}`` variable.
"""

from __future__ import annotations

from typing import Any

import grafanalib.core as g

from observe import catalog as c
from observe import xid
from observe.monitoring.grafana import (
    datasource,
    datasource_variable,
    dumps,
    layout,
    merged_table,
    override,
    rows_heatmap,
    stat,
    table,
    target,
    threshold_steps,
    timeseries,
    to_json,
    variable,
)
from observe.monitoring.queries import scaling_queries
from observe.monitoring.settings import (
    DCGM_GPU_TEMP,
    DCGM_GPU_UTIL,
    DCGM_MEM_COPY_UTIL,
    DCGM_POWER_USAGE,
    DCGM_SM_CLOCK,
    DCGM_XID_COUNT,
    DCGM_XID_ERRORS,
    Settings,
)

TAGS = ["fsdp-observe"]
UIDS = {"training-run.json": "fsdp-training-run", "gpu-health.json": "fsdp-gpu-health", "nodes.json": "fsdp-nodes"}
#: What "All" stands for in each variable: namespace may be absent (local runs carry none);
#: run_id, node and gpu are always present, and ``.+`` keeps out DCGM series of the other dialect.
ALL_ANY, ALL_PRESENT = ".*", ".+"


def _dashboard(title: str, file: str, description: str, templates: list[g.Template], panels: list[g.Panel],
               s: Settings) -> dict[str, Any]:
    board = g.Dashboard(
        title=title, uid=UIDS[file], description=description, tags=TAGS, timezone="browser", refresh="30s",
        schemaVersion=39, graphTooltip=1, time=g.Time("now-3h", "now"), editable=True,
        templating=g.Templating(list=[datasource_variable(s.datasource_type), *templates]), panels=panels,
        links=[{"type": "dashboards", "tags": TAGS, "asDropdown": False, "includeVars": False, "keepTime": True,
                "title": "fsdp-observe", "icon": "external link", "targetBlank": False, "url": "", "tooltip": ""}])
    return to_json(board)


# --- FSDP training run ---------------------------------------------------------------------------

def training_run(s: Settings) -> dict[str, Any]:
    """The training-run dashboard (variables namespace, run_id, node)."""
    m = ('namespace=~"$namespace"', 'run_id=~"$run_id"', 'node=~"$node"')

    def t(metric: c.Metric | str, *extra: str) -> str:
        return s.trainer(metric if isinstance(metric, str) else metric.name, *m, *extra)

    step = c.TRAIN_STEP_SECONDS.name
    rank = "{{run_id}} rank {{rank}}"
    def quantile(q: float) -> str:
        return (f"histogram_quantile({q:g}, sum by (namespace, run_id, rank, le) "
                f"(rate({t(step + '_bucket')}[$__rate_interval])))")
    step_mean = f"(rate({t(step + '_sum')}[5m]) / rate({t(step + '_count')}[5m]))"
    scaling = scaling_queries(matchers=",".join(filter(None, (s.trainer_selector, 'namespace=~"$namespace"'))))
    cuda_info = t(c.TRAIN_INFO, 'gpu_uuid!=""')  # CUDA ranks carry their GPU's UUID
    run_gpus = f"group by (node, gpu_uuid, run_id, rank) ({cuda_info})"

    def dcgm_of_run(name: str) -> str:
        return (f"{s.dcgm(name, s.dcgm_node('$node'))}\n"
                f"* on (node, gpu_uuid) group_left (run_id, rank)\n{run_gpus}")

    gpu_legend = "{{run_id}} rank {{rank}} · {{node}} GPU {{gpu}}"
    sections = [
        ("Progress", [[
            timeseries("Loss", [
                target(f"max by (run_id) ({t(c.TRAIN_LOSS)})", "{{run_id}} training"),
                target(f"max by (run_id) ({t(c.TRAIN_VALIDATION_LOSS)})", "{{run_id}} validation", "B")],
                "none", "Cross-entropy in nats per token: token-weighted over all ranks per log window, and on "
                        "the held-out split at each evaluation."),
            timeseries("Global tokens/s", [target(f"max by (run_id) ({t(c.TRAIN_GLOBAL_TOKENS_PER_SECOND)})",
                                                  "{{run_id}}")],
                       "short", "Labelled tokens per second over all data-parallel ranks, per log window "
                                "(exported by rank 0)."),
            stat("Progress", [target(f"max by (run_id) ({t(c.TRAIN_STEP)}) / max by (run_id) "
                                     f"({t(c.TRAIN_PLANNED_STEPS)})", "{{run_id}}")],
                 "percentunit", "Last completed optimizer step over the steps the run is configured to reach."),
        ], [
            timeseries("Tokens/s per rank", [target(t(c.TRAIN_TOKENS_PER_SECOND), rank + " ({{node}})")], "short",
                       "Labelled tokens per second on each rank over its last log window."),
            timeseries("MFU per rank", [target(t(c.TRAIN_MFU), rank)], "percentunit",
                       "Model FLOPs utilisation (6N + attention FLOPs per token x tokens/s / the device's dense BF16 "
                       "peak). Absent on CPU ranks and GPUs whose peak is unknown.", min_=0),
        ]]),
        ("Step time: find the slow rank", [[
            rows_heatmap(title="Step time p50 by rank", dataSource=datasource(s.datasource_type), unit="s",
                        description="Median step time of each rank (one row per rank) from the step-time histogram.",
                        targets=[target(quantile(0.5), rank, plugin=s.datasource_type)]),
            rows_heatmap(title="Step time p95 by rank", dataSource=datasource(s.datasource_type), unit="s",
                        description="95th-percentile step time of each rank (one row per rank).",
                        targets=[target(quantile(0.95), rank, plugin=s.datasource_type)]),
        ], [
            timeseries("Step time vs the run's median rank", [target(
                f"{step_mean}\n/ on (namespace, run_id) group_left\nquantile by (namespace, run_id) (0.5, {step_mean})",
                rank)], "none",
                f"Each rank's mean step time (5m) over the run's median rank. The FsdpStragglerRank alert fires above "
                f"{s.straggler_ratio:g} for {s.straggler_for}.",
                thresholds=threshold_steps((s.straggler_ratio, "orange"))),
            timeseries("Data-wait share per rank", [target(
                f"rate({t(c.TRAIN_DATA_WAIT_SECONDS.name + '_sum')}[$__rate_interval])\n/\n"
                f"rate({t(step + '_sum')}[$__rate_interval])", rank)], "percentunit",
                "Share of step time spent waiting for the next batch. A high share on one rank makes every rank "
                "wait at the next collective.", min_=0),
        ]]),
        ("Memory and optimiser", [[
            timeseries("Memory per rank", [
                target(t(c.TRAIN_DEVICE_MEMORY_ALLOCATED), rank + " allocated"),
                target(t(c.TRAIN_DEVICE_MEMORY_RESERVED), rank + " reserved", "B"),
                target(t(c.TRAIN_DEVICE_MEMORY_PEAK), rank + " peak allocated", "C"),
                target(t(c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK), rank + " host RSS peak", "D")], "bytes",
                "CUDA caching allocator per rank (allocated, reserved, peak allocated; absent on CPU) and each "
                "rank process's peak resident memory (VmHWM)."),
            timeseries("Gradient norm", [target(f"max by (run_id) ({t(c.TRAIN_GRAD_NORM)})", "{{run_id}}")], "none",
                       "Global L2 norm of the gradients before clipping, at each log step."),
            timeseries("Learning rate", [target(f"max by (run_id) ({t(c.TRAIN_LEARNING_RATE)})", "{{run_id}}")],
                       "sci", "Learning rate of the last step."),
        ]]),
        ("Where wall time goes", [[
            timeseries("Wall time by phase", [target(
                f"sum by (run_id, phase) (rate({t(c.TRAIN_PHASE_SECONDS)}[$__rate_interval]))\n/ on (run_id) "
                f"group_left\nsum by (run_id) (rate({t(c.TRAIN_PHASE_SECONDS)}[$__rate_interval]))",
                "{{run_id}} {{phase}}")], "percentunit",
                "Share of the ranks' wall time in each phase: loading weights, restarting, training, validating, "
                "checkpointing, finished.", stack=True, min_=0, max_=1),
            timeseries("Goodput", [target(f"min by (run_id) ({t(c.TRAIN_GOODPUT)})", "{{run_id}}")], "percentunit",
                       "Productive step time over wall time since the run's first start, across restarts.",
                       min_=0, max_=1),
            timeseries("Restarts", [target(f"max by (run_id) ({t(c.TRAIN_RESTARTS)})", "{{run_id}}")], "none",
                       "Times torchrun restarted the run's worker group."),
            timeseries("Checkpoints", [
                target(f"max by (run_id) ({t(c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + '_sum')}\n/\n"
                       f"({t(c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + '_count')} > 0))", "{{run_id}} mean save time"),
                target(f"time() - max by (run_id) ({t(c.TRAIN_LAST_CHECKPOINT_TIMESTAMP)})",
                       "{{run_id}} since the last checkpoint", "B")], "s",
                "Mean wall time of one sharded checkpoint save (slowest rank), and the age of the newest "
                "checkpoint."),
        ]]),
        ("Scaling efficiency across runs", [[
            merged_table(
                "Scaling efficiency", scaling.efficiency, scaling.throughput,
                "E(N) = tokens/s at N / (N/N0 x tokens/s at N0) over the runs in the time range that share a "
                "model and sharding strategy; N0 is the smallest world size among them (docs/scaling.md).",
                (("percentunit", "scaling efficiency"), ("short", "global tokens/s")), s.datasource_type),
        ]]),
        ("The run's GPUs (dcgm-exporter, joined on GPU UUID and node)", [[
            timeseries("Step time per rank", [target(t(c.TRAIN_WINDOW_STEP_SECONDS),
                                                     rank + " · {{node}} {{gpu_uuid}}")], "s",
                       "Mean step time of each rank over its last log window: set it beside the GPU panels to "
                       "trace a slow rank to its GPU."),
            timeseries("GPU utilisation", [target(dcgm_of_run(DCGM_GPU_UTIL), gpu_legend)], "percent",
                       f"{DCGM_GPU_UTIL} of the GPUs the run's ranks use.", min_=0, max_=100),
        ], [
            timeseries("GPU power", [target(dcgm_of_run(DCGM_POWER_USAGE), gpu_legend)], "watt",
                       f"{DCGM_POWER_USAGE} of the run's GPUs."),
            timeseries("GPU temperature", [target(dcgm_of_run(DCGM_GPU_TEMP), gpu_legend)], "celsius",
                       f"{DCGM_GPU_TEMP} of the run's GPUs.", thresholds=_temperature(s)),
        ]]),
    ]
    info = s.trainer(c.TRAIN_INFO.name)
    templates = [
        variable("namespace", "Namespace", f"label_values({info}, namespace)", ALL_ANY, s.datasource_type),
        variable("run_id", "Run", f"label_values({s.trainer(c.TRAIN_INFO.name, m[0])}, run_id)",
                 ALL_PRESENT, s.datasource_type),
        variable("node", "Node", f"label_values({s.trainer(c.TRAIN_INFO.name, *m[:2])}, node)", ALL_PRESENT,
                 s.datasource_type),
    ]
    return _dashboard("FSDP training run", "training-run.json",
                      "One FSDP fine-tune: loss, throughput, MFU, step time per rank, memory, where wall time goes, "
                      "scaling efficiency, and the run's GPUs from dcgm-exporter.", templates, layout(sections), s)


def _temperature(s: Settings) -> list[g.Threshold]:
    return threshold_steps((s.gpu_temperature_warning_celsius, "orange"), (s.gpu_temperature_critical_celsius, "red"))


# --- GPU health ----------------------------------------------------------------------------------

#: XID table columns the value mappings fill in: the code's meaning and the recommended action.
XID_MEANING, XID_ACTION = "meaning", "action"


def xid_mappings(field: str) -> list[dict[str, Any]]:
    """Grafana value mappings from an XID code to its name (``meaning``) or action (``action``),
    with a fallback for codes outside the catalogue."""
    def text(info: xid.XidInfo) -> str:
        return info.name if field == XID_MEANING else info.action

    unknown = xid.lookup(-1)
    return [
        {"type": "value", "options": {str(code): {"text": text(info), "index": i}
                                      for i, (code, info) in enumerate(sorted(xid.CATALOGUE.items()))}},
        {"type": "regex", "options": {"pattern": ".*", "result": {"text": text(unknown), "index": len(xid.CATALOGUE)}}},
    ]


def gpu_health(s: Settings) -> dict[str, Any]:
    """The GPU-health dashboard (variables node and gpu, by node name, not exporter pod)."""
    d = (s.dcgm_node("$node"), 'gpu=~"$gpu"')
    a = ('node=~"$node"', 'gpu=~"$gpu"')
    legend = f"{{{{node}}}} GPU {{{{gpu}}}} ({{{{{s.dcgm_model_label}}}}})"

    def field(name: str) -> str:
        return s.dcgm(name, *d)

    xid_count = (f"max by (node, gpu, gpu_uuid, pci_bus, xid, severity) "
                 f"(last_over_time({s.agent(c.GPU_XID_ERRORS.name, *a)}[$__range]))")
    for column in (XID_MEANING, XID_ACTION):
        xid_count = f'label_replace({xid_count}, "{column}", "$1", "xid", "(.+)")'
    sections = [
        ("dcgm-exporter: the six fields of the EKS GPU walkthrough", [[
            timeseries("GPU utilisation", [target(field(DCGM_GPU_UTIL), legend)], "percent",
                       f"{DCGM_GPU_UTIL}: share of time a kernel ran.", min_=0, max_=100),
            timeseries("Memory copy utilisation", [target(field(DCGM_MEM_COPY_UTIL), legend)], "percent",
                       f"{DCGM_MEM_COPY_UTIL}: share of time device memory was read or written.", min_=0, max_=100),
            timeseries("SM clock", [target(f"{field(DCGM_SM_CLOCK)} * 1e6", legend)], "hertz",
                       f"{DCGM_SM_CLOCK} (MHz, shown in Hz). A clock well under the GPU's boost clock while busy "
                       "means throttling."),
        ], [
            timeseries("GPU temperature", [target(field(DCGM_GPU_TEMP), legend)], "celsius",
                       f"{DCGM_GPU_TEMP}.", thresholds=_temperature(s)),
            timeseries("Power draw", [target(field(DCGM_POWER_USAGE), legend)], "watt", f"{DCGM_POWER_USAGE}."),
            table("Last XID per GPU (sticky)", [target(
                f"max by (node, gpu, gpu_uuid, err_code, err_msg) ({field(DCGM_XID_ERRORS)})",
                instant=True, table=True, plugin=s.datasource_type)],
                f"{DCGM_XID_ERRORS} holds the last XID code a GPU reported and never returns to 0 by itself: it "
                f"says which XID came last, not that one came now. See the counts below for recent XIDs.",
                transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}],
                plugin=s.datasource_type),
        ], [
            timeseries("XIDs in dcgm-exporter's window", [target(field(DCGM_XID_COUNT),
                                                                  legend + " XID {{xid}}")], "none",
                       f"{DCGM_XID_COUNT}: XID records per GPU and code in the exporter's sliding window (a gauge).",
                       min_=0),
        ]]),
        ("XID errors (fsdp-observe agent)", [[
            table("XID errors by GPU and code", [target(xid_count, instant=True, table=True,
                                                        plugin=s.datasource_type)],
                  f"{c.GPU_XID_ERRORS.name}: XIDs per GPU and code since the agent started, with the code's "
                  f"meaning and NVIDIA's recommended action (observe/xid.py).",
                  transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True}}}],
                  overrides=[override(XID_MEANING, mappings=xid_mappings(XID_MEANING)),
                             override(XID_ACTION, mappings=xid_mappings(XID_ACTION)),
                             override("Value", displayName="count", unit="none")],
                  plugin=s.datasource_type),
        ]]),
        ("Lost and throttled GPUs (fsdp-observe agent)", [[
            stat("Lost GPUs", [target(f"sum by (node) ({s.agent(c.GPU_LOST.name, *a)})", "{{node}}")], "none",
                 "GPUs NVML reports lost (fallen off the bus): a reset or reboot is needed.",
                 thresholds=threshold_steps((1, "red"))),
            timeseries("Clock throttle reasons", [target(f"{s.agent(c.GPU_CLOCK_THROTTLE.name, *a)} == 1",
                                                         "{{node}} GPU {{gpu}}: {{reason}}")], "none",
                       "Reasons holding the GPUs' clocks down now (NVML clock event reasons), one point per "
                       "active reason.", points=True, min_=0, max_=1),
        ]]),
    ]
    util = s.dcgm_raw(DCGM_GPU_UTIL)
    templates = [
        variable("node", "Node", f"label_values({util}, {s.dcgm_hostname_label})", ALL_PRESENT, s.datasource_type),
        variable("gpu", "GPU", f"label_values({s.dcgm_raw(DCGM_GPU_UTIL, s.dcgm_node('$node'))}, gpu)", ALL_PRESENT,
                 s.datasource_type),
    ]
    return _dashboard("GPU health", "gpu-health.json",
                      "GPUs by node: the dcgm-exporter fields of the EKS walkthrough, XIDs with their meaning and "
                      "action, lost and throttled GPUs.", templates, layout(sections), s)


# --- Nodes ---------------------------------------------------------------------------------------

def nodes(s: Settings) -> dict[str, Any]:
    """The nodes dashboard: host data from the agent (variable node)."""
    n = 'node=~"$node"'

    def a(metric: c.Metric, *extra: str) -> str:
        return s.agent(metric.name, n, *extra)

    cpu_rate = f"rate({a(c.NODE_PROCESS_CPU_SECONDS)}[5m])"
    busiest = f"topk(10, {cpu_rate})"
    sections = [
        ("CPU", [[
            timeseries("CPU busy", [target(a(c.NODE_CPU_BUSY), "{{node}}")], "percentunit",
                       "Share of all CPU time not idle or in iowait.", min_=0, max_=1),
            rows_heatmap(title="CPU busy per core", dataSource=datasource(s.datasource_type), unit="percentunit",
                        description="Each logical CPU's busy share, one row per core.",
                        targets=[target(a(c.NODE_CPU_CORE_BUSY), "{{node}} cpu {{cpu}}", plugin=s.datasource_type)]),
            timeseries("Load average", [target(a(c.NODE_LOAD1), "{{node}} 1m"),
                                        target(a(c.NODE_LOAD5), "{{node}} 5m", "B"),
                                        target(a(c.NODE_LOAD15), "{{node}} 15m", "C")], "short",
                       "Run-queue length averaged over 1, 5 and 15 minutes."),
        ]]),
        ("Memory", [[
            timeseries("Memory", [target(a(c.NODE_MEMORY_USED), "{{node}} used"),
                                  target(a(c.NODE_MEMORY_AVAILABLE), "{{node}} available", "B"),
                                  target(a(c.NODE_MEMORY_CACHED), "{{node}} cached", "C"),
                                  target(a(c.NODE_MEMORY_BUFFERS), "{{node}} buffers", "D"),
                                  target(a(c.NODE_MEMORY_TOTAL), "{{node}} total", "E")], "bytes",
                       "Used = total - free - buffers - cache, as free and htop count it."),
            timeseries("Swap", [target(a(c.NODE_SWAP_USED), "{{node}} used"),
                                target(a(c.NODE_SWAP_TOTAL), "{{node}} total", "B")], "bytes",
                       "Swap in use and configured."),
        ]]),
        ("Processes", [[
            timeseries("Processes by state", [target(a(c.NODE_PROCESSES), "{{node}} {{state}}"),
                                              target(a(c.NODE_THREADS), "{{node}} threads", "B")], "short",
                       "Processes on the node by state, and their threads."),
            merged_table(
                "Busiest processes",
                f"{busiest}\n* on (node, pid) group_left (name, user, command)\n{a(c.NODE_PROCESS_INFO)}",
                f"{a(c.NODE_PROCESS_RESIDENT_MEMORY)}\nand on (node, pid)\n{busiest}",
                "The ten processes that used the most CPU over 5 minutes (cores), with their resident memory. "
                "Command lines are redacted on the node (docs/agent.md).",
                (("short", "CPU (cores)"), ("bytes", "resident memory")), s.datasource_type),
        ]]),
        ("GPUs (fsdp-observe agent, NVML)", [[
            timeseries("GPU utilisation", [target(a(c.GPU_UTILIZATION), "{{node}} GPU {{gpu}}")], "percentunit",
                       "Share of the last sample period in which a kernel ran.", min_=0, max_=1),
            timeseries("GPU memory", [target(a(c.GPU_MEMORY_USED), "{{node}} GPU {{gpu}} used"),
                                      target(a(c.GPU_MEMORY_TOTAL), "{{node}} GPU {{gpu}} total", "B")], "bytes",
                       "Device memory allocated by processes, and installed."),
            timeseries("GPU temperature", [target(a(c.GPU_TEMPERATURE), "{{node}} GPU {{gpu}}")], "celsius",
                       "GPU core temperature.", thresholds=_temperature(s)),
            timeseries("GPU power", [target(a(c.GPU_POWER), "{{node}} GPU {{gpu}}"),
                                     target(a(c.GPU_POWER_LIMIT), "{{node}} GPU {{gpu}} limit", "B")], "watt",
                       "Board power and the limit the driver enforces."),
        ]]),
        ("The agent itself", [[
            timeseries("Sources readable", [target(a(c.AGENT_UP), "{{node}} {{source}}")], "none",
                       "1 when the agent can read procfs, NVML and the kernel log (XIDs).", min_=0, max_=1),
            timeseries("Collection time", [target(a(c.AGENT_COLLECTION_SECONDS), "{{node}}")], "s",
                       "Wall time of the agent's last collection."),
        ]]),
    ]
    templates = [variable("node", "Node", f"label_values({s.agent(c.AGENT_COLLECTIONS.name)}, node)", ALL_PRESENT,
                          s.datasource_type)]
    return _dashboard("FSDP nodes", "nodes.json",
                      "Host data from the fsdp-observe node agent: CPU per core, memory, swap, load, processes, "
                      "and its NVML view of the GPUs.", templates, layout(sections), s)


def dashboards(settings: Settings | None = None) -> dict[str, dict[str, Any]]:
    """File name → dashboard JSON data, for ``dashboards/``."""
    s = settings or Settings()
    return {"gpu-health.json": gpu_health(s), "nodes.json": nodes(s), "training-run.json": training_run(s)}


def render(settings: Settings | None = None) -> dict[str, str]:
    """File name → deterministic JSON text (sorted keys)."""
    return {name: dumps(data) for name, data in dashboards(settings).items()}
