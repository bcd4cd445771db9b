"""The training-run dashboard (uid ``fsdp-training-run``): one or more FSDP runs, from the ranks'
own metrics and their GPUs in dcgm-exporter (joined on GPU UUID and node).

Readable at 8,192 ranks: no panel draws one line per rank. Per-rank panels draw the ``top_n``
slowest ranks over the range and the run's median (``observe.monitoring.scale``); the "Worst
ranks" table names them; heatmaps and the phase stack repeat per run (one panel per selected
``run_id``), so runs never share a stack or interleave their rows, and heatmap rows are named by
the rank number alone, which Grafana sorts numerically (rank 2 before rank 10).
"""

from __future__ import annotations

import grafanalib.core as g

from observe import catalog as c
from observe.monitoring import fields as f
from observe.monitoring import rules
from observe.monitoring.board_gpu import temperature_soft_max, temperature_thresholds
from observe.monitoring.grafana import (
    BucketsHeatmap,
    RowsHeatmap,
    heatmap,
    layout,
    merged_table,
    repeat_by,
    stat,
    state_timeline,
    target,
    threshold_steps,
    timeseries,
    variable,
)
from observe.monitoring.queries import scaling_queries
from observe.monitoring.scale import stable_top
from observe.monitoring.settings import Settings

RUN = "namespace, run_id"
RANK_ID = "namespace, run_id, rank"
#: What "All" stands for: namespace may be absent (local runs carry none); run_id and node are
#: always present.
ALL_ANY, ALL_PRESENT = ".*", ".+"


def training_run(s: Settings) -> tuple[str, list[g.Template], list[g.Panel]]:
    """Description, variables and panels of the training-run dashboard."""
    m = ('namespace=~"$namespace"', 'run_id=~"$run_id"', 'node=~"$node"')
    k = s.top_n

    def t(metric: c.Metric | str, *extra: str) -> str:
        return s.trainer(metric if isinstance(metric, str) else metric.name, *m, *extra)

    def run_targets(expr: str, legend: str, first: str = "A") -> list[g.Target]:
        return [target(expr, legend, first, plugin=s.datasource_type)]

    rank = "{{run_id}} rank {{rank}}"
    step_mean = t(rules.STEP_MEAN)
    median = s.trainer(rules.STEP_MEDIAN, *m[:2])  # recorded per run: no node label
    ratio = f"{step_mean}\n/ on ({RUN}) group_left\n{median}"
    # The slowest ranks, chosen on the recorded mean, then divided by their run's median: the
    # division runs on top_n series per step, not on 8,192.
    slowest_ratio = f"({stable_top(k, step_mean, RANK_ID)})\n/ on ({RUN}) group_left\n{median}"
    data_wait = t(rules.DATA_WAIT_SHARE)
    scaling = scaling_queries(matchers=",".join(filter(None, (s.trainer_selector, 'namespace=~"$namespace"'))))
    run_gpus = t(rules.RUN_GPUS)  # recorded: the CUDA ranks' GPUs, in DCGM's label names too
    agent_xids = s.agent(c.GPU_XID_ERRORS.name, 'node=~"$node"')
    dcgm_id = f"{s.dcgm_hostname_label}, {s.dcgm_uuid_label}"
    copied = ", ".join(
        label
        for label in (*RUN.split(", "), "rank", "node", "gpu_uuid")
        if label not in (s.dcgm_hostname_label, s.dcgm_uuid_label)
    )

    def dcgm_of_run(name: str, scale: str = "") -> str:
        """A DCGM field of the runs' GPUs, joined on DCGM's own labels to the recorded run GPUs."""
        return f"{s.dcgm_raw(name, s.dcgm_node('$node'))}{scale}\n* on ({dcgm_id}) group_left ({copied})\n{run_gpus}"

    def worst_of_run(name: str, scale: str = "", bottom: bool = False) -> str:
        """The ``top_n`` worst of the runs' GPUs for one DCGM field, chosen once over the range,
        and joined to their ranks only after the choice (a join of ``top_n`` series per step)."""
        raw = s.dcgm_raw(name, s.dcgm_node("$node"))
        rank_by = (
            f"avg_over_time({raw}[$__range] @ end())\n* on ({dcgm_id}) group_left ({copied})\n({run_gpus} @ end())"
        )
        picked = stable_top(k, raw, dcgm_id, bottom=bottom, rank_by=rank_by)
        return f"({picked}){scale}\n* on ({dcgm_id}) group_left ({copied})\n{run_gpus}"

    def slowest(expr: str, bottom: bool = False) -> str:
        return stable_top(k, expr, RANK_ID, bottom=bottom)

    def per_run_median(expr: str) -> str:
        return f"quantile by ({RUN}) (0.5, {expr})"

    gpu_legend = "{{run_id}} rank {{rank}} · {{node}} GPU {{gpu}}"
    memory = [
        (c.TRAIN_DEVICE_MEMORY_ALLOCATED, "allocated"),
        (c.TRAIN_DEVICE_MEMORY_RESERVED, "reserved"),
        (c.TRAIN_DEVICE_MEMORY_PEAK, "peak allocated"),
    ]
    memory_targets = [
        target(f"max by ({RUN}) ({t(metric)})", f"{{{{run_id}}}} {name}, max over ranks", chr(65 + 2 * i))
        for i, (metric, name) in enumerate(memory)
    ]
    memory_targets += [
        target(per_run_median(t(metric)), f"{{{{run_id}}}} {name}, median rank", chr(66 + 2 * i))
        for i, (metric, name) in enumerate(memory)
    ]
    memory_targets.append(
        target(
            f"max by ({RUN}) ({t(c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK)})",
            "{{run_id}} host RSS peak, max over ranks",
            "G",
        )
    )
    phases = s.trainer(rules.PHASE_SHARE, *m[:2])  # recorded per run and phase
    phase_share = f"sum by ({RUN}, phase) ({phases})\n/ on ({RUN}) group_left\nsum by ({RUN}) ({phases})"
    worst_ratio = f"topk({k}, {ratio})"
    xid_dcgm = f"max by ({RUN}, rank, node, gpu_uuid, err_code, err_msg) ({dcgm_of_run(f.DCGM_XID_ERRORS)} > 0)"
    xid_agent = (
        f"max by ({RUN}, rank, node, gpu_uuid, xid) ({agent_xids}\n"
        f"* on (node, gpu_uuid) group_left ({RUN}, rank)\ngroup by (node, gpu_uuid, {RUN}, rank) "
        f"({run_gpus}))"
    )
    sections = [
        (
            "Progress",
            [
                [
                    timeseries(
                        "Loss",
                        [
                            target(f"max by ({RUN}) ({t(c.TRAIN_LOSS)})", "{{run_id}} training"),
                            target(f"max by ({RUN}) ({t(c.TRAIN_VALIDATION_LOSS)})", "{{run_id}} validation", "B"),
                        ],
                        "none",
                        "Cross-entropy in nats per token: token-weighted over all ranks per log window, and on "
                        "the held-out split at each evaluation.",
                    ),
                    timeseries(
                        "Global tokens/s",
                        [
                            target(
                                f"max by ({RUN}) ({t(c.TRAIN_GLOBAL_TOKENS_PER_SECOND)})\nor\n"
                                f"sum by ({RUN}) ({t(c.TRAIN_TOKENS_PER_SECOND)})",
                                "{{run_id}}",
                            )
                        ],
                        "short",
                        "Labelled tokens per second over all data-parallel ranks, per log window: rank 0's "
                        "global figure where the run exports one (our trainer), else the sum of the ranks' "
                        "own (runs instrumented without collectives).",
                    ),
                    stat(
                        "Progress",
                        [
                            target(
                                f"max by ({RUN}) ({t(c.TRAIN_STEP)}) / max by ({RUN}) ({t(c.TRAIN_PLANNED_STEPS)})",
                                "{{run_id}}",
                            )
                        ],
                        "percentunit",
                        "Last completed optimizer step over the steps the run is configured to reach. "
                        "No data: no rank of the selected runs is scraped.",
                    ),
                ],
                [
                    timeseries(
                        f"Tokens/s: the {k} slowest ranks and the median",
                        [
                            target(slowest(t(c.TRAIN_TOKENS_PER_SECOND), bottom=True), rank + " ({{node}})"),
                            target(per_run_median(t(c.TRAIN_TOKENS_PER_SECOND)), "{{run_id}} median rank", "B"),
                        ],
                        "short",
                        "Labelled tokens per second of the ranks that were slowest over the range, beside the run's "
                        "median rank.",
                    ),
                    timeseries(
                        f"MFU: the {k} lowest ranks and the median",
                        [
                            target(slowest(t(c.TRAIN_MFU), bottom=True), rank),
                            target(per_run_median(t(c.TRAIN_MFU)), "{{run_id}} median rank", "B"),
                        ],
                        "percentunit",
                        "Model FLOPs utilisation (6N + attention FLOPs per token x tokens/s / the device's dense BF16 "
                        "peak). Absent on CPU ranks and GPUs whose peak is unknown.",
                        min_=0,
                    ),
                ],
            ],
        ),
        (
            "Step time: find the slow rank",
            [
                [
                    heatmap(
                        BucketsHeatmap,
                        "Step-time distribution (all ranks)",
                        [
                            target(
                                f"sum by (le) ({s.trainer(rules.STEP_BUCKET_RATE, *m[:2])})",
                                "{{le}}",
                                plugin=s.datasource_type,
                                heatmap=True,
                            )
                        ],
                        "s",
                        "How many steps of all the run's ranks fell in each step-time bucket per "
                        "interval (one panel per run). A second band above the main one is a slow rank "
                        "or a slow phase.",
                        repeat=repeat_by("run_id", 2),
                        plugin=s.datasource_type,
                    ),
                    heatmap(
                        RowsHeatmap,
                        f"Mean step time of the {k} slowest ranks, by rank",
                        [target(slowest(step_mean), "{{rank}}", plugin=s.datasource_type)],
                        "s",
                        "Each row is one rank (numbered in order), coloured by its mean step time over 5 minutes; the "
                        "ranks "
                        "are the slowest over the range (one panel per run).",
                        repeat=repeat_by("run_id", 2),
                        plugin=s.datasource_type,
                    ),
                ],
                [
                    timeseries(
                        "Step time vs the run's median rank",
                        [target(slowest_ratio, rank)],
                        "none",
                        f"Mean step time (5m) over the run's median rank, for the {k} ranks furthest above it. The "
                        f"FsdpStragglerRank alert fires above {s.straggler_ratio:g} for {s.straggler_for}.",
                        thresholds=threshold_steps((s.straggler_ratio, "orange")),
                        soft_min=0.5,
                        soft_max=max(2.0, s.straggler_ratio * 1.25),
                    ),
                    merged_table(
                        f"Worst {k} ranks",
                        [
                            (worst_ratio, "none", "x median step time"),
                            (f"{step_mean}\nand on ({RANK_ID})\n{worst_ratio}", "s", "mean step time (5m)"),
                            (
                                f"({data_wait})\nand on ({RANK_ID})\n{worst_ratio}",
                                "percentunit",
                                "data-wait share (5m)",
                            ),
                        ],
                        "The ranks furthest above their run's median step time now, with where they run and how much "
                        "of "
                        "their step time is waiting for data.",
                        ("namespace", "run_id", "rank", "node", "gpu_uuid"),
                        s.datasource_type,
                    ),
                    timeseries(
                        f"Data-wait share: the {k} highest ranks",
                        [target(stable_top(k, data_wait, RANK_ID), rank)],
                        "percentunit",
                        "Share of step time spent waiting for the next batch. A high share on one rank "
                        "makes every rank wait at the next collective.",
                        min_=0,
                    ),
                ],
            ],
        ),
        (
            "Memory and optimiser",
            [
                [
                    timeseries(
                        "Device memory across ranks",
                        memory_targets,
                        "bytes",
                        "CUDA caching allocator (allocated, reserved, peak allocated; absent on CPU): the largest rank "
                        "and the median rank, and the largest rank process's peak resident memory (VmHWM).",
                    ),
                    timeseries(
                        f"Allocation retries: the {k} ranks retrying most",
                        [target(stable_top(k, t(c.TRAIN_DEVICE_ALLOC_RETRIES), RANK_ID, reducer="increase"), rank)],
                        "none",
                        f"{c.TRAIN_DEVICE_ALLOC_RETRIES.name}: allocations that had to free cached blocks and retry, "
                        "since the rank started, of the ranks that added the most in the range (memory pressure; a "
                        "rank that keeps retrying is slow and close to out-of-memory).",
                        min_=0,
                    ),
                    timeseries(
                        "Gradient norm",
                        [target(f"max by ({RUN}) ({t(c.TRAIN_GRAD_NORM)})", "{{run_id}}")],
                        "none",
                        "Global L2 norm of the gradients before clipping, at each log step.",
                    ),
                    timeseries(
                        "Learning rate",
                        [
                            target(
                                f"max by ({RUN}, optimizer, param_group) ({t(c.TRAIN_LEARNING_RATE)})",
                                "{{run_id}} {{optimizer}} {{param_group}}",
                            )
                        ],
                        "sci",
                        "Learning rate of the last step, one line per optimizer and param group.",
                    ),
                ]
            ],
        ),
        (
            "Where wall time goes",
            [
                [
                    timeseries(
                        "Wall time by phase",
                        [target(phase_share, "{{phase}}")],
                        "percentunit",
                        "Share of the ranks' wall time in each phase (one stack per run): loading weights, "
                        "restarting, training, validating, checkpointing, finished.",
                        stack=True,
                        min_=0,
                        max_=1,
                        repeat=repeat_by("run_id", 2),
                    ),
                    state_timeline(
                        "Phase of each run",
                        [target(f"{s.trainer(rules.PHASE_RANKS, *m[:2])} > 0", "{{run_id}} {{phase}}")],
                        "When each run's ranks were in each phase (a row per run and phase; the value is how many "
                        "ranks "
                        "were in it).",
                        states={1: ("ranks in phase", "blue")},
                        plugin=s.datasource_type,
                    ),
                ],
                [
                    timeseries(
                        "Goodput",
                        [target(f"min by ({RUN}) ({t(c.TRAIN_GOODPUT)})", "{{run_id}}")],
                        "percentunit",
                        "Productive step time over wall time since the run's first start, across restarts.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Restarts",
                        [target(f"max by ({RUN}) ({t(c.TRAIN_RESTARTS)})", "{{run_id}}")],
                        "none",
                        "Times torchrun restarted the run's worker group.",
                    ),
                    timeseries(
                        "Checkpoints",
                        [
                            target(
                                f"max by ({RUN}) ({t(c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + '_sum')}\n/\n"
                                f"({t(c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + '_count')} > 0))",
                                "{{run_id}} mean save time",
                            ),
                            target(
                                f"time() - max by ({RUN}) ({t(c.TRAIN_LAST_CHECKPOINT_TIMESTAMP)})",
                                "{{run_id}} since the last checkpoint",
                                "B",
                            ),
                        ],
                        "s",
                        "Mean wall time of one sharded checkpoint save (slowest rank), and the age of the newest "
                        "checkpoint.",
                    ),
                ],
            ],
        ),
        (
            "Scaling efficiency across runs",
            [
                [
                    merged_table(
                        "Scaling efficiency",
                        [
                            (scaling.efficiency, "percentunit", "scaling efficiency"),
                            (scaling.throughput, "short", "global tokens/s"),
                        ],
                        "E(N) = tokens/s at N / (N/N0 x tokens/s at N0) over the runs in the time range that share a "
                        "model and sharding strategy; N0 is the smallest world size among them (docs/scaling.md).",
                        ("run_id", "model", "sharding_strategy", "world_size"),
                        s.datasource_type,
                    ),
                ]
            ],
        ),
        (
            "The run's GPUs (dcgm-exporter, joined on GPU UUID and node)",
            [
                [
                    timeseries(
                        f"Step time: the {k} slowest ranks",
                        [target(slowest(t(c.TRAIN_WINDOW_STEP_SECONDS)), rank + " · {{node}} {{gpu_uuid}}")],
                        "s",
                        "Mean step time of each rank over its last log window, the slowest ranks: set it beside the "
                        "GPU panels to trace a slow rank to its GPU.",
                    ),
                    timeseries(
                        "Graphics engine active of the run's GPUs",
                        [target(worst_of_run(f.DCGM_GR_ENGINE_ACTIVE, bottom=True), gpu_legend)],
                        "percentunit",
                        f"{f.DCGM_GR_ENGINE_ACTIVE} of the least busy GPUs the run's ranks use (MIG-safe).",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "SM clock of the run's GPUs",
                        [target(worst_of_run(f.DCGM_SM_CLOCK, " * 1e6", bottom=True), gpu_legend)],
                        "hertz",
                        f"{f.DCGM_SM_CLOCK} of the run's GPUs with the lowest clocks: a throttled GPU makes its rank a "
                        "straggler.",
                    ),
                ],
                [
                    timeseries(
                        "GPU power of the run's GPUs",
                        [target(worst_of_run(f.DCGM_POWER_USAGE, bottom=True), gpu_legend)],
                        "watt",
                        f"{f.DCGM_POWER_USAGE} of the run's GPUs drawing least.",
                    ),
                    timeseries(
                        "GPU temperature of the run's GPUs",
                        [target(worst_of_run(f.DCGM_GPU_TEMP), gpu_legend)],
                        "celsius",
                        f"{f.DCGM_GPU_TEMP} of the run's hottest GPUs.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                    merged_table(
                        "XIDs on the run's GPUs",
                        [(xid_dcgm, "none", "last XID (dcgm-exporter)"), (xid_agent, "none", "XIDs counted (agent)")],
                        f"The last XID dcgm-exporter holds ({f.DCGM_XID_ERRORS}) and the agent's XID counts "
                        f"({c.GPU_XID_ERRORS.name}) for the GPUs the run's ranks use. Empty: none of them had one.",
                        ("namespace", "run_id", "rank", "node", "gpu_uuid", "err_code", "err_msg", "xid"),
                        s.datasource_type,
                    ),
                ],
            ],
        ),
    ]
    info = s.trainer(c.TRAIN_INFO.name)
    templates = [
        variable("namespace", "Namespace", f"label_values({info}, namespace)", ALL_ANY, s.datasource_type),
        variable(
            "run_id",
            "Run",
            f"label_values({s.trainer(c.TRAIN_INFO.name, m[0])}, run_id)",
            ALL_PRESENT,
            s.datasource_type,
        ),
        variable(
            "node",
            "Node",
            f"label_values({s.trainer(c.TRAIN_INFO.name, *m[:2])}, node)",
            ALL_PRESENT,
            s.datasource_type,
        ),
    ]
    return (
        "One or more FSDP fine-tunes: loss, throughput, MFU, step time (the slowest ranks, a worst-ranks table), "
        "memory, where wall time goes, scaling efficiency, and the runs' GPUs from dcgm-exporter.",
        templates,
        layout(sections),
    )
