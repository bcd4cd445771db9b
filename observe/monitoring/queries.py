"""Every panel's PromQL, in one place (the monitoring-mixin way): the boards
(``observe.monitoring.board_*``) are lists of panels that take their queries from here.

One class per dashboard builds its queries from ``Settings`` (selectors, ``top_n``, thresholds):
``TrainingQueries``, ``GpuHealthQueries``, ``NodeQueries``; ``scaling_queries`` builds the
scaling-efficiency table's. DCGM figures are read only from the canonical layer's records
(``observe.monitoring.dialects``): one series per GPU in base units whatever dcgm-exporter dialect
the node speaks, filled from the agent's NVML readings where no exporter reports the GPU.
Per-GPU, per-rank and per-node panels draw the ``top_n`` worst over the dashboard's range
(``observe.monitoring.scale``), so no query returns one series per GPU or rank of a large fleet.

Scaling efficiency across runs, the same definition as ``fsdp-observe scaling`` reports::

    E(N) = tokens/s at N / (N/N0 x tokens/s at N0)

over every run in the queried range that shares a ``model`` and ``sharding_strategy``, N0 being
the smallest world size among them (runs tied at N0 are averaged). PromQL has no variables, so
the builder writes the shared sub-expressions out in full. Every result series is one run,
labelled ``run_id``, ``model``, ``sharding_strategy`` and ``world_size``.

- ranks of a run: distinct ``rank`` labels of ``fsdp_train_info`` (a number, unlike the
  ``world_size`` label, which PromQL cannot compute with). The dashboard reads them from the
  recording rule ``rules.RUN_RANKS`` (the most seen at once over the range): the expression
  repeats the count six times, each a pass over every rank's info series (8,192 at scale).
- throughput of a run: the ``quantile``-th value (median by default) of rank 0's
  ``fsdp_train_global_tokens_per_second`` over the range. A median of the per-window figure is
  robust to warm-up windows, so it is close to, but not the same estimator as, the report's
  Δtokens/Δtime after a fixed warm-up.

Series of finished runs are read with ``last_over_time``/``quantile_over_time`` over the range,
so the panel must be an *instant* query (Grafana: Options → Type: Instant) whose range is the
dashboard's (``$__range``). Needs Prometheus 2.26 or newer (``last_over_time``, ``group``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from observe import catalog as c
from observe.monitoring import dialects as d
from observe.monitoring import fields as f
from observe.monitoring import hangs, rules
from observe.monitoring.scale import count_or_zero, spread, stable_top
from observe.monitoring.settings import Settings
from observe.monitoring.xid_table import XID_ACTION, XID_MEANING

_RANGE = re.compile(r"^(\$__range|\$\{__range\}|\d+(ms|s|m|h|d|w|y))$")


@dataclass(frozen=True)
class ScalingQueries:
    """Instant-query expressions; each returns one series per run.

    Attributes:
        ranks: the run's number of ranks (N).
        throughput: the run's global tokens/s (tokens per second).
        efficiency: the run's scaling efficiency (ratio, 1.0 at N0; Grafana unit ``percentunit``).
    """

    ranks: str
    throughput: str
    efficiency: str


def scaling_queries(
    matchers: str = "",
    info_matchers: str = "",
    range_: str = "$__range",
    quantile: float = 0.5,
    ranks_record: str | None = None,
) -> ScalingQueries:
    """Build the expressions.

    Args:
        matchers: label matchers every trainer series carries, applied to every selector, e.g.
            ``'namespace=~"$namespace"'`` (no braces). Never ``model`` or
            ``sharding_strategy``: only ``fsdp_train_info`` carries those; use ``info_matchers``.
        info_matchers: further matchers for ``fsdp_train_info`` alone, e.g.
            ``'model=~"$model",sharding_strategy=~"$strategy"'``; runs they exclude drop out.
        range_: the range to read runs from: ``$__range`` in a dashboard, or a duration (``6h``).
        quantile: which quantile over the range stands for a run's throughput (0 < q <= 1).
        ranks_record: the name of ``rules.RUN_RANKS`` where Prometheus evaluates the generated
            rules: the ranks (and the run's model, strategy and world size) are read from it,
            not counted from every rank's ``fsdp_train_info``; ``None`` (the CLI, against any
            Prometheus) counts them.

    Raises:
        ValueError: braces in the matchers, a malformed range, a quantile out of range.
    """
    for name, value in (("matchers", matchers), ("info_matchers", info_matchers)):
        if any(ch in value for ch in "{}"):
            raise ValueError(f"{name}: give label matchers without braces, got {value!r}")
    if not _RANGE.match(range_):
        raise ValueError(f"range_: {range_!r} is neither $__range nor a duration like 6h")
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")

    def sel(name: str, *extra: str) -> str:
        inner = ",".join(m for m in (matchers, *extra) if m)
        return f"{name}{{{inner}}}"

    keys = "run_id, model, sharding_strategy, world_size"
    if ranks_record is None:
        info = f"last_over_time({sel(c.TRAIN_INFO.name, info_matchers)}[{range_}])"
        ranks = f"count by ({keys}) (count by ({keys}, rank) ({info}))"
    else:
        info = f"max_over_time({sel(ranks_record, info_matchers)}[{range_}])"
        ranks = f"max by ({keys}) ({info})"
    rank0 = sel(c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name, 'rank="0"')
    tps = f"max by (run_id) (quantile_over_time({quantile:g}, {rank0}[{range_}]))"
    throughput = f"{tps} * on (run_id) group_left (model, sharding_strategy, world_size) group by ({keys}) ({info})"
    per_rank = f"({throughput}) / ({ranks})"
    smallest = f"({ranks}) == on (model, sharding_strategy) group_left min by (model, sharding_strategy) ({ranks})"
    baseline = f"avg by (model, sharding_strategy) (({per_rank}) and ({smallest}))"
    # No parenthesis right after group_left: PromQL would read it as group_left's label list.
    efficiency = f"({per_rank}) / on (model, sharding_strategy) group_left {baseline}"
    return ScalingQueries(ranks=ranks, throughput=throughput, efficiency=efficiency)


# --- the training-run dashboard -------------------------------------------------------------------

RUN = "namespace, run_id"
RANK_ID = "namespace, run_id, rank"
#: What "All" stands for: namespace may be absent (local runs carry none); run_id and node are
#: always present.
ALL_ANY, ALL_PRESENT = ".*", ".+"


class TrainingQueries:
    """The training-run dashboard's queries (attributes are PromQL strings, methods build the
    per-metric ones). Variables: ``$namespace``, ``$run_id``, ``$node``, and ``$run`` (one
    ``<namespace>/<run_id>`` per run, the phase stack's repeat)."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        k = self.k = s.top_n
        m = self.m = ('namespace=~"$namespace"', 'run_id=~"$run_id"', 'node=~"$node"')
        t = self.t
        step_mean = t(rules.STEP_MEAN)
        median = s.trainer(rules.STEP_MEDIAN, *m[:2])  # recorded per run: no node label
        ratio = f"{step_mean}\n/ on ({RUN}) group_left\n{median}"
        self.loss = f"max by ({RUN}) ({t(c.TRAIN_LOSS)})"
        self.validation_loss = f"max by ({RUN}) ({t(c.TRAIN_VALIDATION_LOSS)})"
        self.global_tokens = (
            f"max by ({RUN}) ({t(c.TRAIN_GLOBAL_TOKENS_PER_SECOND)})\nor\n"
            f"sum by ({RUN}) ({t(c.TRAIN_TOKENS_PER_SECOND)})"
        )
        self.progress = f"max by ({RUN}) ({t(c.TRAIN_STEP)}) / max by ({RUN}) ({t(c.TRAIN_PLANNED_STEPS)})"
        self.slowest_tokens = self.slowest(t(c.TRAIN_TOKENS_PER_SECOND), bottom=True)
        self.median_tokens = self.median_rank(c.TRAIN_TOKENS_PER_SECOND)
        self.lowest_mfu = self.slowest(t(c.TRAIN_MFU), bottom=True)
        self.median_mfu = self.median_rank(c.TRAIN_MFU)
        self.step_buckets = f"sum by (le) ({s.trainer(rules.STEP_BUCKET_RATE, *m[:2])})"
        self.slowest_step_mean = self.slowest(step_mean)
        # The slowest ranks, chosen on the recorded mean, then divided by their run's median: the
        # division runs on top_n series per step, not on 8,192.
        self.slowest_ratio = f"({stable_top(k, step_mean, RANK_ID)})\n/ on ({RUN}) group_left\n{median}"
        # The same for compute per step (step time less data wait and collective wait): what names a
        # straggler, since synchronous ranks share one step time (FsdpStragglerRank reads it too).
        compute = t(hangs.COMPUTE_PER_STEP)
        compute_median = s.trainer(hangs.COMPUTE_MEDIAN, *m[:2])  # recorded per run: no node label
        self.slowest_compute_ratio = f"({stable_top(k, compute, RANK_ID)})\n/ on ({RUN}) group_left\n{compute_median}"
        data_wait = t(rules.DATA_WAIT_SHARE)
        worst_ratio = f"topk({k}, {ratio})"
        self.worst_ratio = worst_ratio
        self.worst_step_mean = f"{step_mean}\nand on ({RANK_ID})\n{worst_ratio}"
        self.worst_data_wait = f"({data_wait})\nand on ({RANK_ID})\n{worst_ratio}"
        self.highest_data_wait = stable_top(k, data_wait, RANK_ID)
        self.alloc_retries = stable_top(k, t(c.TRAIN_DEVICE_ALLOC_RETRIES), RANK_ID, reducer="increase")
        self.grad_norm = f"max by ({RUN}) ({t(c.TRAIN_GRAD_NORM)})"
        self.learning_rate = f"max by ({RUN}, optimizer, param_group) ({t(c.TRAIN_LEARNING_RATE)})"
        # One stack per run (``$run`` is ``<namespace>/<run_id>``): the same run_id in two
        # namespaces is two stacks, each summing to 1.
        phases = s.trainer(rules.PHASE_SHARE, *m[:2], 'run=~"$run"')  # recorded per run and phase
        self.phase_share = f"{phases}\n/ on (run) group_left\nsum by (run) ({phases})"
        self.phase_ranks = f"{s.trainer(rules.PHASE_RANKS, *m[:2])} > 0"
        self.goodput = f"min by ({RUN}) ({t(c.TRAIN_GOODPUT)})"
        self.restarts = f"max by ({RUN}) ({t(c.TRAIN_RESTARTS)})"
        save = c.TRAIN_CHECKPOINT_SAVE_SECONDS.name
        self.checkpoint_save = f"max by ({RUN}) ({t(save + '_sum')}\n/\n({t(save + '_count')} > 0))"
        self.checkpoint_age = f"time() - max by ({RUN}) ({t(c.TRAIN_LAST_CHECKPOINT_TIMESTAMP)})"
        self.scaling = scaling_queries(
            matchers=",".join(filter(None, (s.trainer_selector, 'namespace=~"$namespace"'))),
            ranks_record=rules.RUN_RANKS,
        )
        self.window_step_slowest = self.slowest(t(c.TRAIN_WINDOW_STEP_SECONDS))
        run_gpus = self.run_gpus = t(rules.RUN_GPUS)  # recorded: the CUDA ranks' GPUs
        self.run_engine = self.worst_of_run(d.GRAPHICS_ENGINE_ACTIVE, bottom=True)
        self.run_sm_clock = self.worst_of_run(d.SM_CLOCK, bottom=True)
        self.run_power = self.worst_of_run(d.POWER, bottom=True)
        self.run_temperature = self.worst_of_run(d.TEMPERATURE)
        last_xid = f'{d.LAST_XID.record}{{node=~"$node",xid!="0"}}'
        self.run_xids_dcgm = (
            f"max by ({RUN}, rank, node, gpu_uuid, xid) (\n{last_xid}\n"
            f"* on (node, gpu_uuid) group_left ({RUN}, rank)\n{run_gpus}\n)"
        )
        agent_xids = s.agent(c.GPU_XID_ERRORS.name, m[2])
        self.run_xids_agent = (
            f"max by ({RUN}, rank, node, gpu_uuid, xid) ({agent_xids}\n"
            f"* on (node, gpu_uuid) group_left ({RUN}, rank)\ngroup by (node, gpu_uuid, {RUN}, rank) "
            f"({run_gpus}))"
        )
        info = s.trainer(c.TRAIN_INFO.name)
        self.namespaces = f"label_values({info}, namespace)"
        self.run_ids = f"label_values({s.trainer(c.TRAIN_INFO.name, m[0])}, run_id)"
        self.nodes = f"label_values({s.trainer(c.TRAIN_INFO.name, *m[:2])}, node)"
        self.runs = f"label_values({s.trainer(rules.PHASE_SHARE, *m[:2])}, run)"

    def t(self, metric: c.Metric | str, *extra: str) -> str:
        """A trainer series (or a recorded one) with the dashboard's run, namespace and node matchers."""
        return self.s.trainer(metric if isinstance(metric, str) else metric.name, *self.m, *extra)

    def slowest(self, expr: str, bottom: bool = False) -> str:
        """The ``top_n`` ranks of ``expr`` over the range (``bottom``: the lowest)."""
        return stable_top(self.k, expr, RANK_ID, bottom=bottom)

    def median_rank(self, metric: c.Metric) -> str:
        """Each run's median rank of ``metric``."""
        return f"quantile by ({RUN}) (0.5, {self.t(metric)})"

    def max_over_ranks(self, metric: c.Metric) -> str:
        """Each run's largest rank of ``metric``."""
        return f"max by ({RUN}) ({self.t(metric)})"

    def worst_of_run(self, figure: d.Figure, bottom: bool = False) -> str:
        """The ``top_n`` worst of the runs' GPUs for one canonical DCGM figure, chosen once over the
        range, and joined to their ranks (by node and GPU UUID) only after the choice: a join of
        ``top_n`` series per step."""
        series = f'{figure.record}{{node=~"$node"}}'

        def joined(expr: str, run_gpus: str) -> str:
            return f"{expr}\n* on (node, gpu_uuid) group_left ({RUN}, rank)\n{run_gpus}"

        rank_by = joined(f"avg_over_time({series}[$__range] @ end())", f"({self.run_gpus} @ end())")
        picked = stable_top(self.k, series, "node, gpu_uuid", bottom=bottom, rank_by=rank_by)
        return joined(f"({picked})", self.run_gpus)


# --- the GPU-health dashboard ----------------------------------------------------------------------


class GpuHealthQueries:
    """The GPU-health dashboard's queries, from the canonical DCGM records and the agent's series.
    Variables: ``$node`` and ``$gpu`` (listed from the temperature record, which every GPU and MIG
    instance has, from dcgm-exporter or the agent)."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        k = self.k = s.top_n
        a = ('node=~"$node"', 'gpu=~"$gpu"')
        self.legend = "{{node}} GPU {{gpu}} {{mig_profile}} ({{model}})"

        def agent(metric: c.Metric, *extra: str) -> str:
            return s.agent(metric.name, *a, *extra)

        self.gpus_reporting = f"count({self.of(d.TEMPERATURE)})"
        lost = agent(c.GPU_LOST)
        self.lost_count = count_or_zero(f"{lost} == 1", lost)
        temp = self.of(d.TEMPERATURE)
        self.hot_count = count_or_zero(f"{temp} >= {s.gpu_temperature_warning_celsius:g}", temp)
        free, used = self.of(d.FRAMEBUFFER_FREE), self.of(d.FRAMEBUFFER_USED)
        self.low_memory_count = count_or_zero(f"{free} / ({used} + {free}) < 0.1", free)
        failed = self.of(d.ROW_REMAP_FAILED)
        self.remap_failed_count = count_or_zero(f"{failed} == 1", failed)
        self.engine_spread = spread(self.of(d.GRAPHICS_ENGINE_ACTIVE))
        self.temperature_spread = spread(temp)
        self.engine = self.worst(d.GRAPHICS_ENGINE_ACTIVE, bottom=True)
        self.tensor = self.worst(d.TENSOR_ACTIVE, bottom=True)
        self.dram = self.worst(d.DRAM_ACTIVE, bottom=True)
        self.utilization = self.worst(d.UTILIZATION, bottom=True)
        self.memory_copy = self.worst(d.MEMORY_COPY_UTILIZATION)
        self.framebuffer_used = self.worst(d.FRAMEBUFFER_USED)
        self.sm_clock = self.worst(d.SM_CLOCK, bottom=True)
        self.temperature = self.worst(d.TEMPERATURE)
        self.power = self.worst(d.POWER)
        self.nvlink = self.worst(d.NVLINK)
        self.pcie_transmit = self.worst(d.PCIE_TRANSMIT)
        self.pcie_receive = self.worst(d.PCIE_RECEIVE)
        self.pcie_replays = self.worst(d.PCIE_REPLAYS, reducer="increase")
        gpu = "node, gpu, gpu_uuid"
        uncorrected = agent(c.GPU_ECC_ERRORS, 'type="uncorrected"')
        #: (expr, unit, column) of the memory and PCIe errors table.
        self.errors_table = [
            (
                f"topk({k}, max by ({gpu}) ({self.of(d.ROWS_REMAPPED_UNCORRECTABLE)}) > 0)",
                "none",
                "uncorrectable remapped rows",
            ),
            (
                f"topk({k}, max by ({gpu}) ({self.of(d.ROWS_REMAPPED_CORRECTABLE)}) > 0)",
                "none",
                "correctable remapped rows",
            ),
            (f"max by ({gpu}) ({failed}) == 1", "none", "remapping failed"),
            (
                f"topk({k}, sum by ({gpu}) (increase({self.of(d.PCIE_REPLAYS)}[$__range])) > 0)",
                "none",
                "PCIe replays in the range",
            ),
            (
                f"topk({k}, sum by ({gpu}) (increase({uncorrected}[$__range])) > 0)",
                "none",
                "uncorrected ECC errors in the range (agent)",
            ),
        ]
        self.ecc_agent = stable_top(k, agent(c.GPU_ECC_ERRORS), "node, gpu, type", reducer="increase")
        had_one = self.of(d.LAST_XID, 'xid!="0"')  # GPUs whose last XID is 0 never had one
        self.last_xid = f'label_replace(max by ({gpu}, xid) ({had_one}), "{XID_MEANING}", "$1", "xid", "(.+)")'
        xid_count = (
            f"max by (node, gpu, gpu_uuid, pci_bus, xid, severity) "
            f"(last_over_time({agent(c.GPU_XID_ERRORS)}[$__range]))"
        )
        for column in (XID_MEANING, XID_ACTION):
            xid_count = f'label_replace({xid_count}, "{column}", "$1", "xid", "(.+)")'
        self.agent_xids = xid_count
        self.xid_window = f"{self.of(d.XID_WINDOW)} > 0"
        self.lost_timeline = f"{lost}\nand on (node, gpu)\n(max_over_time({lost}[$__range] @ end()) == 1)"
        self.throttled_counts = s.agent(rules.THROTTLED)
        held = f'{rules.THROTTLE_HELD}{{node=~"$node",gpu=~"$gpu"}}'
        self.throttle_reasons = stable_top(k, held, "node, gpu, reason", reducer="count")
        processes = (
            f"topk({k}, sum by (node, gpu, pid) ({agent(c.GPU_PROCESS_MEMORY)}))\n"
            f"* on (node, pid) group_left (user, name, command)\n"
            f"max by (node, pid, user, name, command) ({s.agent(c.NODE_PROCESS_INFO.name, a[0])})"
        )
        self.processes = processes
        # The latest sample within 2 minutes: NVML reports a process's SM share only in the
        # collections that read a fresh utilisation sample.
        self.process_sm = (
            f"last_over_time({agent(c.GPU_PROCESS_SM_UTILIZATION)}[2m])\nand on (node, gpu, pid)\n({processes})"
        )
        # Nodes per dialect: a few rows at any fleet size (a row per node would be 1,024).
        per_node = f'count by (node, dialect, driver_version) ({d.DIALECT}{{node=~"$node"}})'
        self.dialects = f"count by (dialect, driver_version) ({per_node})"
        self.nodes = f"label_values({d.TEMPERATURE.record}, node)"
        self.gpus = f'label_values({d.TEMPERATURE.record}{{node=~"$node"}}, gpu)'

    @staticmethod
    def of(figure: d.Figure, *matchers: str) -> str:
        """A canonical figure of the selected GPUs (and ``matchers``)."""
        inner = ",".join(('node=~"$node"', 'gpu=~"$gpu"', *matchers))
        return f"{figure.record}{{{inner}}}"

    def worst(self, figure: d.Figure, bottom: bool = False, reducer: str = "avg") -> str:
        """The ``top_n`` worst GPUs of one canonical figure over the range."""
        return stable_top(self.k, self.of(figure), d.GPU_IDENTITY, bottom=bottom, reducer=reducer)


# --- the Nodes dashboard ---------------------------------------------------------------------------


class NodeQueries:
    """The Nodes dashboard's queries: node-exporter (through the recording rules) and the agent.
    Variables: ``$node`` and ``$core_node`` (the one node whose cores are shown)."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        k = self.k = s.top_n
        n = 'node=~"$node"'

        def a(metric: c.Metric, *extra: str) -> str:
            return s.agent(metric.name, n, *extra)

        def recorded(rule: str) -> str:
            return self.busiest(f"{rule}{{{n}}}")

        self.cpu_busy_node_exporter = recorded(rules.NODE_CPU_BUSY)
        self.network_receive = recorded(rules.NODE_NETWORK_RECEIVE)
        self.network_transmit = recorded(rules.NODE_NETWORK_TRANSMIT)
        self.disk_read = recorded(rules.NODE_DISK_READ)
        self.disk_written = recorded(rules.NODE_DISK_WRITTEN)
        self.disk_busy = recorded(rules.NODE_DISK_BUSY)
        self.cpu_busy = self.busiest(a(c.NODE_CPU_BUSY))
        # The busiest cores of one node: a 192-core node would otherwise draw 192 rows.
        self.busiest_cores = stable_top(
            k, s.agent(c.NODE_CPU_CORE_BUSY.name, 'node="$core_node"'), "node, cpu", reducer="avg"
        )
        self.load = [self.busiest(a(metric)) for metric in (c.NODE_LOAD1, c.NODE_LOAD5, c.NODE_LOAD15)]
        self.memory_used = stable_top(
            k, f"{a(c.NODE_MEMORY_USED)} / {a(c.NODE_MEMORY_TOTAL)}", "node", pick_from=a(c.NODE_MEMORY_USED)
        )
        self.memory_available = self.busiest(a(c.NODE_MEMORY_AVAILABLE), bottom=True)
        self.swap_used = self.busiest(a(c.NODE_SWAP_USED))
        self.processes_by_state = f"sum by (state) ({a(c.NODE_PROCESSES)})"
        self.threads = f"sum({a(c.NODE_THREADS)})"
        top_processes = f"topk({k}, rate({a(c.NODE_PROCESS_CPU_SECONDS)}[5m]))"
        self.busiest_processes_cpu = (
            f"{top_processes}\n* on (node, pid) group_left (name, user, command)\n{a(c.NODE_PROCESS_INFO)}"
        )
        self.busiest_processes_memory = f"{a(c.NODE_PROCESS_RESIDENT_MEMORY)}\nand on (node, pid)\n{top_processes}"
        self.gpu_utilization = stable_top(k, a(c.GPU_UTILIZATION), "node, gpu", bottom=True)
        self.gpu_memory_used = stable_top(k, a(c.GPU_MEMORY_USED), "node, gpu")
        self.gpu_temperature = stable_top(k, a(c.GPU_TEMPERATURE), "node, gpu")
        self.gpu_power = stable_top(k, a(c.GPU_POWER), "node, gpu")
        self.agents_reporting = f"count({a(c.AGENT_COLLECTIONS)})"
        sources = a(c.AGENT_UP)
        self.sources_unreadable = f"{sources}\nand on (node, source)\n(min_over_time({sources}[$__range] @ end()) == 0)"
        self.collection_time = self.busiest(a(c.AGENT_COLLECTION_SECONDS))
        node_sources = (
            f"count by (node) ({s.node_exporter(f.NODE_UNAME, s.node_exporter_node('.+'))}) "
            f"or count by (node) ({s.agent(c.AGENT_COLLECTIONS.name)})"
        )
        self.nodes = f"query_result({node_sources})"
        # the per-node series of the same reading: label_values over every core is 64-192 times more
        self.core_nodes = f"label_values({s.agent(c.NODE_CPU_BUSY.name, n)}, node)"

    def busiest(self, expr: str, bottom: bool = False) -> str:
        """The ``top_n`` nodes of ``expr`` over the range."""
        return stable_top(self.k, expr, "node", bottom=bottom)
