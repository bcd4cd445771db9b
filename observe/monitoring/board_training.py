"""The training-run dashboard (uid ``fsdp-training-run``): one or more FSDP runs, from the ranks'
own metrics and their GPUs in the canonical DCGM records (joined on GPU UUID and node). A list of
panels; the queries are ``observe.monitoring.queries.TrainingQueries``.

Readable at 8,192 ranks: no panel draws one line per rank. Per-rank panels draw the ``top_n``
slowest ranks over the range and the run's median (``observe.monitoring.scale``); the "Worst
ranks" table names them; heatmaps repeat per run (one panel per selected ``run_id``) and the phase
stack per run and namespace (the hidden ``run`` variable, ``<namespace>/<run_id>``), so runs never
share a stack or interleave their rows, and heatmap rows are named by the rank number alone, which
Grafana sorts numerically (rank 2 before rank 10).
"""

from __future__ import annotations

import grafanalib.core as g

from observe import catalog as c
from observe.monitoring import dialects as d
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
from observe.monitoring.queries import ALL_ANY, ALL_PRESENT, TrainingQueries
from observe.monitoring.settings import Settings


def training_run(s: Settings) -> tuple[str, list[g.Template], list[g.Panel]]:
    """Description, variables and panels of the training-run dashboard."""
    q = TrainingQueries(s)
    k = s.top_n
    ds = s.datasource_type
    rank = "{{run_id}} rank {{rank}}"
    gpu_legend = "{{run_id}} rank {{rank}} · {{node}} GPU {{gpu}}"
    memory = [
        (c.TRAIN_DEVICE_MEMORY_ALLOCATED, "allocated"),
        (c.TRAIN_DEVICE_MEMORY_RESERVED, "reserved"),
        (c.TRAIN_DEVICE_MEMORY_PEAK, "peak allocated"),
    ]
    memory_targets = [
        target(q.max_over_ranks(metric), f"{{{{run_id}}}} {name}, max over ranks", chr(65 + 2 * i))
        for i, (metric, name) in enumerate(memory)
    ]
    memory_targets += [
        target(q.median_rank(metric), f"{{{{run_id}}}} {name}, median rank", chr(66 + 2 * i))
        for i, (metric, name) in enumerate(memory)
    ]
    memory_targets.append(
        target(q.max_over_ranks(c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK), "{{run_id}} host RSS peak, max over ranks", "G")
    )
    sections = [
        (
            "Progress",
            [
                [
                    timeseries(
                        "Loss",
                        [
                            target(q.loss, "{{run_id}} training"),
                            target(q.validation_loss, "{{run_id}} validation", "B"),
                        ],
                        "none",
                        "Cross-entropy in nats per token: token-weighted over all ranks per log window, and on "
                        "the held-out split at each evaluation.",
                    ),
                    timeseries(
                        "Global tokens/s",
                        [target(q.global_tokens, "{{run_id}}")],
                        "short",
                        "Labelled tokens per second over all data-parallel ranks, per log window: rank 0's "
                        "global figure where the run exports one (our trainer), else the sum of the ranks' "
                        "own (runs instrumented without collectives).",
                    ),
                    stat(
                        "Progress",
                        [target(q.progress, "{{run_id}}")],
                        "percentunit",
                        "Last completed optimizer step over the steps the run is configured to reach. "
                        "No data: no rank of the selected runs is scraped.",
                    ),
                ],
                [
                    timeseries(
                        f"Tokens/s: the {k} slowest ranks and the median",
                        [
                            target(q.slowest_tokens, rank + " ({{node}})"),
                            target(q.median_tokens, "{{run_id}} median rank", "B"),
                        ],
                        "short",
                        "Labelled tokens per second of the ranks that were slowest over the range, beside the run's "
                        "median rank.",
                    ),
                    timeseries(
                        f"MFU: the {k} lowest ranks and the median",
                        [
                            target(q.lowest_mfu, rank),
                            target(q.median_mfu, "{{run_id}} median rank", "B"),
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
                        "Step-time distribution (local rank 0 of each node)",
                        [target(q.step_buckets, "{{le}}", plugin=ds, heatmap=True)],
                        "s",
                        "How many steps fell in each step-time bucket per interval (one panel per run), "
                        "counted on local rank 0 of each node: synchronous FSDP ranks share one step time, "
                        "so the other ranks would add series, not information. A second band above the "
                        "main one is a slow phase (evaluation, checkpoints) or a slow period; the "
                        "straggler panels name a slow rank by its compute time.",
                        repeat=repeat_by("run_id", 2),
                        plugin=ds,
                    ),
                    heatmap(
                        RowsHeatmap,
                        f"Mean step time of the {k} slowest ranks, by rank",
                        [target(q.slowest_step_mean, "{{rank}}", plugin=ds)],
                        "s",
                        "Each row is one rank (numbered in order), coloured by its mean step time over 5 minutes; the "
                        "ranks "
                        "are the slowest over the range (one panel per run).",
                        repeat=repeat_by("run_id", 2),
                        plugin=ds,
                    ),
                ],
                [
                    timeseries(
                        "Compute per step vs the run's median rank",
                        [target(q.slowest_compute_ratio, rank)],
                        "none",
                        f"Compute time per step (5m: step time less data wait and collective wait) over the run's "
                        f"lower median rank's, for the {k} ranks furthest above it. Step time cannot show a "
                        f"straggler: synchronous FSDP ranks share one step time, the fast ones waiting in "
                        f"collectives. FsdpStragglerRank fires above {s.straggler_ratio:g} when the excess is "
                        f"also over {s.straggler_share:.0%} of the median step time and {s.straggler_min_excess}, "
                        f"for {s.straggler_for}.",
                        thresholds=threshold_steps((s.straggler_ratio, "orange")),
                        soft_min=0.5,
                        soft_max=max(2.0, s.straggler_ratio * 1.25),
                    ),
                    merged_table(
                        f"Worst {k} ranks",
                        [
                            (q.worst_ratio, "none", "x median step time"),
                            (q.worst_step_mean, "s", "mean step time (5m)"),
                            (q.worst_data_wait, "percentunit", "data-wait share (5m)"),
                        ],
                        "The ranks furthest above their run's median step time now, with where they run and how much "
                        "of "
                        "their step time is waiting for data.",
                        ("namespace", "run_id", "rank", "node", "gpu_uuid"),
                        ds,
                    ),
                    timeseries(
                        f"Data-wait share: the {k} highest ranks",
                        [target(q.highest_data_wait, rank)],
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
                        [target(q.alloc_retries, rank)],
                        "none",
                        f"{c.TRAIN_DEVICE_ALLOC_RETRIES.name}: allocations that had to free cached blocks and retry, "
                        "since the rank started, of the ranks that added the most in the range (memory pressure; a "
                        "rank that keeps retrying is slow and close to out-of-memory).",
                        min_=0,
                    ),
                    timeseries(
                        "Gradient norm",
                        [target(q.grad_norm, "{{run_id}}")],
                        "none",
                        "Global L2 norm of the gradients before clipping, at each log step.",
                    ),
                    timeseries(
                        "Learning rate",
                        [target(q.learning_rate, "{{run_id}} {{optimizer}} {{param_group}}")],
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
                        [target(q.phase_share, "{{run}} {{phase}}")],
                        "percentunit",
                        "Share of the ranks' wall time in each phase (one stack per run and namespace): loading "
                        "weights, restarting, training, validating, checkpointing, finished.",
                        stack=True,
                        min_=0,
                        max_=1,
                        repeat=repeat_by("run", 2),
                    ),
                    state_timeline(
                        "Phase of each run",
                        [target(q.phase_ranks, "{{run_id}} {{phase}}")],
                        "When each run's ranks were in each phase (a row per run and phase; the value is how many "
                        "ranks "
                        "were in it).",
                        states={1: ("ranks in phase", "blue")},
                        plugin=ds,
                    ),
                ],
                [
                    timeseries(
                        "Goodput",
                        [target(q.goodput, "{{run_id}}")],
                        "percentunit",
                        "Productive step time over wall time since the run's first start, across restarts.",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "Restarts",
                        [target(q.restarts, "{{run_id}}")],
                        "none",
                        "Times torchrun restarted the run's worker group.",
                    ),
                    timeseries(
                        "Checkpoints",
                        [
                            target(q.checkpoint_save, "{{run_id}} mean save time"),
                            target(q.checkpoint_age, "{{run_id}} since the last checkpoint", "B"),
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
                            (q.scaling.efficiency, "percentunit", "scaling efficiency"),
                            (q.scaling.throughput, "short", "global tokens/s"),
                        ],
                        "E(N) = tokens/s at N / (N/N0 x tokens/s at N0) over the runs in the time range that share a "
                        "model and sharding strategy; N0 is the smallest world size among them (docs/scaling.md).",
                        ("run_id", "model", "sharding_strategy", "world_size"),
                        ds,
                    ),
                ]
            ],
        ),
        (
            "The run's GPUs (dcgm-exporter or the agent, joined on GPU UUID and node)",
            [
                [
                    timeseries(
                        f"Step time: the {k} slowest ranks",
                        [target(q.window_step_slowest, rank + " · {{node}} {{gpu_uuid}}")],
                        "s",
                        "Mean step time of each rank over its last log window, the slowest ranks: set it beside the "
                        "GPU panels to trace a slow rank to its GPU.",
                    ),
                    timeseries(
                        "Graphics engine active of the run's GPUs",
                        [target(q.run_engine, gpu_legend)],
                        "percentunit",
                        "Graphics-engine activity (a DCGM profiling field) of the least busy GPUs the run's ranks use "
                        "(MIG-safe).",
                        min_=0,
                        max_=1,
                    ),
                    timeseries(
                        "SM clock of the run's GPUs",
                        [target(q.run_sm_clock, gpu_legend)],
                        "hertz",
                        "SM clock of the run's GPUs with the lowest clocks: a throttled GPU makes its rank a "
                        "straggler.",
                    ),
                ],
                [
                    timeseries(
                        "GPU power of the run's GPUs",
                        [target(q.run_power, gpu_legend)],
                        "watt",
                        "Board power of the run's GPUs drawing least.",
                    ),
                    timeseries(
                        "GPU temperature of the run's GPUs",
                        [target(q.run_temperature, gpu_legend)],
                        "celsius",
                        "Temperature of the run's hottest GPUs.",
                        thresholds=temperature_thresholds(s),
                        soft_max=temperature_soft_max(s),
                    ),
                    merged_table(
                        "XIDs on the run's GPUs",
                        [
                            (q.run_xids_dcgm, "none", "last XID (dcgm-exporter)"),
                            (q.run_xids_agent, "none", "XIDs counted (agent)"),
                        ],
                        f"The last XID dcgm-exporter holds ({d.LAST_XID.record}) and the agent's XID counts "
                        f"({c.GPU_XID_ERRORS.name}) for the GPUs the run's ranks use. Empty: none of them had one.",
                        ("namespace", "run_id", "rank", "node", "gpu_uuid", "xid"),
                        ds,
                    ),
                ],
            ],
        ),
    ]
    run = variable("run", "Run in namespace", q.runs, ".+", ds)
    run.hide = 2  # the phase stack's repeat: one value per namespace and run_id, never picked by hand
    templates = [
        variable("namespace", "Namespace", q.namespaces, ALL_ANY, ds),
        variable("run_id", "Run", q.run_ids, ALL_PRESENT, ds),
        variable("node", "Node", q.nodes, ALL_PRESENT, ds),
        run,
    ]
    return (
        "One or more FSDP fine-tunes: loss, throughput, MFU, step time (the slowest ranks, a worst-ranks table), "
        "memory, where wall time goes, scaling efficiency, and the runs' GPUs (dcgm-exporter or the agent).",
        templates,
        layout(sections),
    )
