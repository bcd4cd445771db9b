"""Every metric fsdp-observe exports: name, kind, unit, help text and label set.

This module is the one source of metric names. The trainer's exporter, the node agent, the
generated dashboards and rules, and the TUI all take names from here; nothing else spells a
metric name. It imports nothing outside the standard library, so any process may use it.

Conventions (https://prometheus.io/docs/practices/naming/): snake_case, base units in the name
(``_seconds``, ``_bytes``, ``_celsius``, ``_watts``, ``_hertz``, ``_ratio`` for 0..1), counters
end in ``_total``, one ``*_info`` gauge per process for static facts. Trainer series start with
``fsdp_train_``, agent series with ``fsdp_node_`` (host) and ``fsdp_gpu_`` (GPU). DCGM's own
``DCGM_FI_*`` names are never reused for our series.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricKind = Literal["counter", "gauge", "histogram"]

#: Default ports, in one place. A trainer rank serves on ``TRAINER_PORT_BASE + LOCAL_RANK``.
TRAINER_PORT_BASE = 9500
AGENT_PORT = 9401

#: Labels on every trainer series. ``gpu_uuid`` (the ``GPU-…`` string NVML and DCGM print) is
#: added on CUDA ranks so trainer series join with DCGM's by GPU.
TRAINER_LABELS: tuple[str, ...] = ("run_id", "rank", "local_rank", "node")

#: Upper bounds (seconds) of the step-time and data-wait histograms: roughly three per decade
#: (1, 1.5, 2, 3, 5, 7.5) so quantiles of sub-second steps are not coarse, reaching 600 s so a
#: step that stalls on a slow collective or a checkpoint still lands in a finite bucket.
STEP_SECONDS_BUCKETS: tuple[float, ...] = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    3.0,
    5.0,
    7.5,
    10.0,
    15.0,
    20.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


@dataclass(frozen=True)
class Metric:
    """One exported metric family.

    Attributes:
        name: the name as it appears in the exposition and in PromQL (counters include
            ``_total``; histograms are the base name of ``_bucket``/``_sum``/``_count``).
        kind: ``counter``, ``gauge`` or ``histogram``.
        help: the HELP text.
        labels: label names beyond the process's constant labels (e.g. ``TRAINER_LABELS``).
    """

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """The family name prometheus_client expects (a counter without its ``_total``)."""
        return self.name[: -len("_total")] if self.kind == "counter" else self.name


# --- trainer (one set per rank; constant labels TRAINER_LABELS, and gpu_uuid on CUDA) ---------

#: Values of ``fsdp_train_info``'s ``instrumentation`` label: which entry point drives the steps.
#: ``trainer``: the reference trainer (``trainer/``); ``api``: a user's loop through
#: ``observe.training.TrainingMetrics``; ``hf``: the Hugging Face ``TrainerCallback``;
#: ``lightning``: the Lightning ``Callback``; ``auto``: zero-code injection (``fsdp-observe run``,
#: or the ``.pth`` switched on by ``INSTRUMENT_ENV``), steps counted from optimizer hooks.
INSTRUMENTATIONS: tuple[str, ...] = ("trainer", "api", "hf", "lightning", "auto")
#: Environment variable that switches zero-code instrumentation on (``1``) in every Python process
#: that inherits it; the Lightning callback's entry point is active only while it is set.
INSTRUMENT_ENV = "FSDP_OBSERVE_INSTRUMENT"

TRAIN_INFO = Metric(
    "fsdp_train_info",
    "gauge",
    "Static facts of this training process (value 1). instrumentation: the entry point that feeds "
    "the series (trainer, api, hf, lightning, auto); loss_source, grad_norm_source, tokens_source: "
    "how the loss, gradient norm and token count were obtained (values ending in _heuristic were "
    "captured without the loop's help); a label is absent when its value is unknown.",
    (
        "model",
        "sharding_strategy",
        "mixed_precision",
        "world_size",
        "device_type",
        "backend",
        "activation_checkpointing",
        "mesh",
        "instrumentation",
        "loss_source",
        "grad_norm_source",
        "tokens_source",
    ),
)
TRAIN_STEPS = Metric("fsdp_train_steps_total", "counter", "Optimizer steps completed by this rank.")
TRAIN_LABELLED_TOKENS = Metric(
    "fsdp_train_labelled_tokens_total",
    "counter",
    "Tokens that carried a training label (padding and -100 excluded) processed by this rank "
    "(how they were counted: fsdp_train_info's tokens_source).",
)
TRAIN_SAMPLES = Metric("fsdp_train_samples_total", "counter", "Sequences processed by this rank.")
TRAIN_STEP_SECONDS = Metric(
    "fsdp_train_step_seconds",
    "histogram",
    "Wall time of one training step on this rank's host, data wait included.",
)
TRAIN_DATA_WAIT_SECONDS = Metric(
    "fsdp_train_data_wait_seconds",
    "histogram",
    "Time this rank waited for the next batch from the data iterator.",
)
TRAIN_STEP = Metric("fsdp_train_step", "gauge", "Index of the last completed optimizer step.")
TRAIN_PLANNED_STEPS = Metric("fsdp_train_planned_steps", "gauge", "Steps this run is configured to reach.")
TRAIN_LAST_STEP_TIMESTAMP = Metric(
    "fsdp_train_last_step_timestamp_seconds",
    "gauge",
    "Unix time at which this rank completed its last step.",
)
TRAIN_WINDOW_STEP_SECONDS = Metric(
    "fsdp_train_window_step_seconds",
    "gauge",
    "Mean step time over the last log window: window wall time / steps really in the window.",
)
TRAIN_WINDOW_DATA_WAIT_RATIO = Metric(
    "fsdp_train_window_data_wait_ratio",
    "gauge",
    "Share of the last log window's wall time spent waiting for data (0..1).",
)
TRAIN_TOKENS_PER_SECOND = Metric(
    "fsdp_train_tokens_per_second",
    "gauge",
    "Labelled tokens per second on this rank (device) over the last log window.",
)
TRAIN_GLOBAL_TOKENS_PER_SECOND = Metric(
    "fsdp_train_global_tokens_per_second",
    "gauge",
    "Labelled tokens per second summed over all data-parallel ranks, last log window "
    "(exported by rank 0 only, so sum() over ranks never double counts).",
)
TRAIN_LOSS = Metric(
    "fsdp_train_loss",
    "gauge",
    "Training loss (cross-entropy, nats per token) over the last log window. How it is averaged is "
    "fsdp_train_info's loss_source: global_token_mean (the trainer: token-weighted over all ranks), "
    "rank_token_mean, rank_mean (this rank only), hf_logged (Hugging Face's logged loss: mean of the "
    "ranks' means), backward_heuristic (the scalars passed to backward(), this rank).",
)
TRAIN_GRAD_NORM = Metric(
    "fsdp_train_grad_norm",
    "gauge",
    "Global L2 norm of the gradients before clipping, last log step.",
)
TRAIN_LEARNING_RATE = Metric(
    "fsdp_train_learning_rate",
    "gauge",
    "Learning rate of the last step, one series per optimizer and param group: optimizer is its "
    "class (AdamW, then AdamW#2 for a second AdamW, in the order they first step), param_group the "
    "group's index; both empty when the entry point was given a bare number.",
    ("optimizer", "param_group"),
)
TRAIN_FLOPS_PER_TOKEN = Metric(
    "fsdp_train_model_flops_per_token",
    "gauge",
    "Model FLOPs per token, 6*N_matmul + 12*L*d_model*T (PaLM appendix B, as torchtitan); T is the "
    "sequence length trained at when the entry point knows it, else the model's context length.",
)
TRAIN_MFU = Metric(
    "fsdp_train_mfu_ratio",
    "gauge",
    "Model FLOPs utilisation over the last log window (0..1); absent when the device's peak is "
    "unknown (CPU, unlisted GPU).",
)
TRAIN_DEVICE_MEMORY_ALLOCATED = Metric(
    "fsdp_train_device_memory_allocated_bytes",
    "gauge",
    "CUDA caching allocator: bytes currently allocated to tensors (absent on CPU).",
)
TRAIN_DEVICE_MEMORY_RESERVED = Metric(
    "fsdp_train_device_memory_reserved_bytes",
    "gauge",
    "CUDA caching allocator: bytes reserved from the driver (absent on CPU).",
)
TRAIN_DEVICE_MEMORY_PEAK = Metric(
    "fsdp_train_device_memory_peak_allocated_bytes",
    "gauge",
    "CUDA caching allocator: peak bytes allocated since start (absent on CPU).",
)
TRAIN_PROCESS_RESIDENT_MEMORY_PEAK = Metric(
    "fsdp_train_process_resident_memory_peak_bytes",
    "gauge",
    "Peak resident set size of this rank's process since it started (the kernel's high-water "
    "mark, VmHWM in /proc/self/status), bytes; absent where the kernel does not report it.",
)
TRAIN_DEVICE_ALLOC_RETRIES = Metric(
    "fsdp_train_device_alloc_retries_total",
    "counter",
    "CUDA caching allocator: allocations that had to free cached blocks and retry (absent on CPU).",
)
TRAIN_EXPORTER_ERRORS = Metric(
    "fsdp_train_exporter_errors_total",
    "counter",
    "Errors inside the metrics exporter (logged once; training continues).",
)
#: Values of ``fsdp_train_instrumentation_problem``'s ``problem`` label.
#: ``port_taken``: the rank's port was held by another process, so it serves on a port the kernel
#: chose (logged once; a PodMonitor does not find it there); ``no_local_rank``: the launcher set no
#: ``LOCAL_RANK``, so the port and ``local_rank`` label come from the global rank;
#: ``setting_ignored``: an ``FSDP_OBSERVE_*`` setting was not used as given (not a valid value, or
#: one the framework decides, e.g. Hugging Face's windows follow its ``logging_steps``).
INSTRUMENTATION_PROBLEMS: tuple[str, ...] = ("port_taken", "no_local_rank", "setting_ignored")
TRAIN_INSTRUMENTATION_PROBLEM = Metric(
    "fsdp_train_instrumentation_problem",
    "gauge",
    "1 for each problem the instrumentation of this process met (port_taken: serving on a fallback "
    "port; no_local_rank: the launcher set no LOCAL_RANK; setting_ignored: an FSDP_OBSERVE_* "
    "setting was not used as given); absent when there is none.",
    ("problem",),
)

# --- trainer: where wall time goes (phases, restarts, checkpoints, goodput, validation) ------

#: Values of the ``phase`` label, in the order a run passes through them. ``loading_weights``:
#: building the model and filling it (seeded init or a from_pretrained checkpoint, shard by
#: shard); ``restarting``: the same start-up when the process continues a run (an elastic
#: restart or a resume), including loading the checkpoint and re-deriving the data position;
#: ``training``: optimizer steps; ``validating``: held-out evaluation; ``checkpointing``: saving;
#: ``finished``: the run is over and the process only lingers for a final scrape.
TRAIN_PHASES: tuple[str, ...] = (
    "loading_weights",
    "restarting",
    "training",
    "validating",
    "checkpointing",
    "finished",
)
TRAIN_PHASE = Metric(
    "fsdp_train_phase",
    "gauge",
    "State series: 1 for the phase this rank is in now, 0 for every other phase (one series per "
    "phase, as kube-state-metrics exports pod phases).",
    ("phase",),
)
TRAIN_PHASE_SECONDS = Metric(
    "fsdp_train_phase_seconds_total",
    "counter",
    "Wall time this process has spent in each phase (the current one counted up to the scrape).",
    ("phase",),
)
TRAIN_RESTARTS = Metric(
    "fsdp_train_restarts_total",
    "counter",
    "Times torchrun restarted this worker group (TORCHELASTIC_RESTART_COUNT).",
)
TRAIN_STEPS_REDONE = Metric(
    "fsdp_train_steps_redone_total",
    "counter",
    "Optimizer steps run again after restarts: steps an earlier attempt had completed past the checkpoint "
    "the next one resumed from (the reference trainer's rank 0, from its checkpoint directory).",
)
TRAIN_GOODPUT = Metric(
    "fsdp_train_goodput_ratio",
    "gauge",
    "Productive step time over wall time since the run's first start (0..1), across restarts: "
    "steps redone after a restart, start-up, restarts, checkpoints and validation count as lost.",
)
TRAIN_CHECKPOINT_SAVE_SECONDS = Metric(
    "fsdp_train_checkpoint_save_seconds",
    "histogram",
    "Wall time of one sharded checkpoint save (torch.distributed.checkpoint) on this rank.",
)
TRAIN_CHECKPOINT_LOAD_SECONDS = Metric(
    "fsdp_train_checkpoint_load_seconds",
    "histogram",
    "Wall time of loading a sharded checkpoint to resume, on this rank.",
)
TRAIN_LAST_CHECKPOINT_STEP = Metric(
    "fsdp_train_last_checkpoint_step",
    "gauge",
    "Step of the newest complete checkpoint this process saved or resumed from.",
)
TRAIN_LAST_CHECKPOINT_TIMESTAMP = Metric(
    "fsdp_train_last_checkpoint_timestamp_seconds",
    "gauge",
    "Unix time at which that checkpoint was saved.",
)
TRAIN_VALIDATION_LOSS = Metric(
    "fsdp_train_validation_loss",
    "gauge",
    "Held-out loss (cross-entropy, nats per token), token-weighted over all ranks, last evaluation.",
)
TRAIN_VALIDATION_PERPLEXITY = Metric(
    "fsdp_train_validation_perplexity",
    "gauge",
    "exp(validation loss) of the last evaluation.",
)

# --- trainer: which rank is stuck, which is slow (collectives, compute vs wait, stalls) -------

#: Values of ``fsdp_train_state``'s ``state`` label: what the rank's training thread does now.
#: ``computing``: running the loop's own code (forward, backward, optimizer, user code);
#: ``collective``: blocked in a collective's wait (gloo; on NCCL the host rarely blocks there);
#: ``data``: waiting for the next batch; ``phase``: outside the training steps, in the phase
#: ``fsdp_train_phase`` names (loading, validating, checkpointing, finished).
TRAIN_STATES: tuple[str, ...] = ("computing", "collective", "data", "phase")
TRAIN_STATE = Metric(
    "fsdp_train_state",
    "gauge",
    "State series: 1 for what this rank's training thread does now (computing, collective: blocked "
    "in a collective's wait, data: waiting for a batch, phase: outside the steps), 0 for the others.",
    ("state",),
)
TRAIN_COLLECTIVES_ENQUEUED = Metric(
    "fsdp_train_collectives_enqueued_total",
    "counter",
    "Collectives this rank issued on each process group: the sequence number of its last one "
    "(Flight Recorder's last_enqueued_collective where it answers, else counted by fsdp-observe).",
    ("pg",),
)
TRAIN_COLLECTIVES_COMPLETED = Metric(
    "fsdp_train_collectives_completed_total",
    "counter",
    "Collectives of each process group that completed on this rank (sequence number of the last).",
    ("pg",),
)
TRAIN_COLLECTIVE_BLOCKED_SECONDS = Metric(
    "fsdp_train_collective_blocked_seconds",
    "gauge",
    "Seconds this rank's training thread has been blocked in its current collective's wait, 0 when "
    "it is not waiting (host side: on NCCL the host seldom blocks in a collective).",
)
TRAIN_COLLECTIVE_WAITING = Metric(
    "fsdp_train_collective_waiting",
    "gauge",
    "Sequence number of the collective this rank's training thread is blocked in, labelled with its "
    "process group and op; absent when it is not waiting.",
    ("pg", "op"),
)
TRAIN_COMPUTE_SECONDS = Metric(
    "fsdp_train_compute_seconds_total",
    "counter",
    "Step time this rank spent neither waiting for data nor blocked in a collective (host side): "
    "the straggler signal, since synchronous ranks share one step time.",
)
TRAIN_COLLECTIVE_WAIT_SECONDS = Metric(
    "fsdp_train_collective_wait_seconds_total",
    "counter",
    "Step time this rank's training thread spent blocked in collectives' waits (host side).",
)
TRAIN_WINDOW_COMPUTE_SECONDS = Metric(
    "fsdp_train_window_compute_seconds",
    "gauge",
    "Mean compute time per step over the last log window (step time - data wait - collective wait).",
)
TRAIN_WINDOW_COLLECTIVE_WAIT_SECONDS = Metric(
    "fsdp_train_window_collective_wait_seconds",
    "gauge",
    "Mean collective wait per step over the last log window.",
)
TRAIN_STALLED = Metric(
    "fsdp_train_stalled",
    "gauge",
    "1 while this rank's stall watchdog sees no progress (no step, no completed collective, no batch) "
    "for longer than fsdp_train_stall_threshold_seconds, else 0.",
)
TRAIN_STALL_THRESHOLD = Metric(
    "fsdp_train_stall_threshold_seconds",
    "gauge",
    "The stall watchdog's threshold: max(floor, k x this rank's median step time), k = 3, floor 30 s.",
)

#: Which rank is stuck and which is slow.
TRAINER_FORENSICS_METRICS: tuple[Metric, ...] = (
    TRAIN_STATE,
    TRAIN_COLLECTIVES_ENQUEUED,
    TRAIN_COLLECTIVES_COMPLETED,
    TRAIN_COLLECTIVE_BLOCKED_SECONDS,
    TRAIN_COLLECTIVE_WAITING,
    TRAIN_COMPUTE_SECONDS,
    TRAIN_COLLECTIVE_WAIT_SECONDS,
    TRAIN_WINDOW_COMPUTE_SECONDS,
    TRAIN_WINDOW_COLLECTIVE_WAIT_SECONDS,
    TRAIN_STALLED,
    TRAIN_STALL_THRESHOLD,
)

#: Where wall time goes: phases, restarts, checkpoints, goodput, validation.
TRAINER_RUN_METRICS: tuple[Metric, ...] = (
    TRAIN_PHASE,
    TRAIN_PHASE_SECONDS,
    TRAIN_RESTARTS,
    TRAIN_STEPS_REDONE,
    TRAIN_GOODPUT,
    TRAIN_CHECKPOINT_SAVE_SECONDS,
    TRAIN_CHECKPOINT_LOAD_SECONDS,
    TRAIN_LAST_CHECKPOINT_STEP,
    TRAIN_LAST_CHECKPOINT_TIMESTAMP,
    TRAIN_VALIDATION_LOSS,
    TRAIN_VALIDATION_PERPLEXITY,
)

TRAINER_METRICS: tuple[Metric, ...] = (
    *TRAINER_RUN_METRICS,
    *TRAINER_FORENSICS_METRICS,
    TRAIN_INFO,
    TRAIN_STEPS,
    TRAIN_LABELLED_TOKENS,
    TRAIN_SAMPLES,
    TRAIN_STEP_SECONDS,
    TRAIN_DATA_WAIT_SECONDS,
    TRAIN_STEP,
    TRAIN_PLANNED_STEPS,
    TRAIN_LAST_STEP_TIMESTAMP,
    TRAIN_WINDOW_STEP_SECONDS,
    TRAIN_WINDOW_DATA_WAIT_RATIO,
    TRAIN_TOKENS_PER_SECOND,
    TRAIN_GLOBAL_TOKENS_PER_SECOND,
    TRAIN_LOSS,
    TRAIN_GRAD_NORM,
    TRAIN_LEARNING_RATE,
    TRAIN_FLOPS_PER_TOKEN,
    TRAIN_MFU,
    TRAIN_DEVICE_MEMORY_ALLOCATED,
    TRAIN_DEVICE_MEMORY_RESERVED,
    TRAIN_DEVICE_MEMORY_PEAK,
    TRAIN_PROCESS_RESIDENT_MEMORY_PEAK,
    TRAIN_DEVICE_ALLOC_RETRIES,
    TRAIN_EXPORTER_ERRORS,
    TRAIN_INSTRUMENTATION_PROBLEM,
)


# --- node agent (one per node; every series carries AGENT_LABELS) -----------------------------
#
# Host series start with ``fsdp_node_``, GPU series with ``fsdp_gpu_`` and carry AGENT_GPU_LABELS
# (the GPU's index and its ``GPU-…`` UUID, the join key with DCGM). The agent's own health is
# ``fsdp_node_agent_*``. A value the agent cannot read is absent, never 0.

#: Labels on every agent series: the Kubernetes node name (or host name in local mode).
AGENT_LABELS: tuple[str, ...] = ("node",)
#: Labels on every agent GPU series.
AGENT_GPU_LABELS: tuple[str, ...] = ("node", "gpu", "gpu_uuid")

NODE_CPU_BUSY = Metric(
    "fsdp_node_cpu_busy_ratio",
    "gauge",
    "Share of all CPU time that was not idle or iowait over the last collection interval (0..1).",
)
NODE_CPU_CORE_BUSY = Metric(
    "fsdp_node_cpu_core_busy_ratio",
    "gauge",
    "Share of one logical CPU's time that was not idle or iowait over the last collection interval (0..1).",
    ("cpu",),
)
NODE_MEMORY_TOTAL = Metric("fsdp_node_memory_total_bytes", "gauge", "Physical memory (MemTotal).")
NODE_MEMORY_USED = Metric(
    "fsdp_node_memory_used_bytes",
    "gauge",
    "Memory in use by processes and the kernel: total - available (as free and psutil count it).",
)
NODE_MEMORY_AVAILABLE = Metric(
    "fsdp_node_memory_available_bytes",
    "gauge",
    "Memory available for new work without swapping (MemAvailable).",
)
NODE_MEMORY_BUFFERS = Metric("fsdp_node_memory_buffers_bytes", "gauge", "Kernel buffers (Buffers).")
NODE_MEMORY_CACHED = Metric(
    "fsdp_node_memory_cached_bytes",
    "gauge",
    "Page cache and reclaimable slab (Cached + SReclaimable).",
)
NODE_SWAP_TOTAL = Metric("fsdp_node_swap_total_bytes", "gauge", "Swap space configured.")
NODE_SWAP_USED = Metric("fsdp_node_swap_used_bytes", "gauge", "Swap space in use.")
NODE_LOAD1 = Metric("fsdp_node_load1", "gauge", "Load average over 1 minute.")
NODE_LOAD5 = Metric("fsdp_node_load5", "gauge", "Load average over 5 minutes.")
NODE_LOAD15 = Metric("fsdp_node_load15", "gauge", "Load average over 15 minutes.")
NODE_UPTIME = Metric("fsdp_node_uptime_seconds", "gauge", "Seconds since the node booted.")
NODE_PROCESSES = Metric(
    "fsdp_node_processes",
    "gauge",
    "Processes on the node by state (running, sleeping, disk_sleep, stopped, zombie, idle, other).",
    ("state",),
)
NODE_THREADS = Metric("fsdp_node_threads", "gauge", "Threads of all processes on the node.")
NODE_GPUS = Metric(
    "fsdp_node_gpus",
    "gauge",
    "GPUs NVML reports on the node (absent when NVML is unavailable).",
)
NODE_PROCESS_INFO = Metric(
    "fsdp_node_process_info",
    "gauge",
    "One of the node's busiest processes, or one using a GPU (value 1). The command line is "
    "redacted and cut (docs/agent.md).",
    ("pid", "ppid", "user", "name", "command", "pod_uid", "container_id"),
)
NODE_PROCESS_CPU_SECONDS = Metric(
    "fsdp_node_process_cpu_seconds_total",
    "counter",
    "CPU time (user + system) this process has used since it started.",
    ("pid",),
)
NODE_PROCESS_RESIDENT_MEMORY = Metric(
    "fsdp_node_process_resident_memory_bytes",
    "gauge",
    "Resident set size of this process.",
    ("pid",),
)

GPU_INFO = Metric(
    "fsdp_gpu_info",
    "gauge",
    "Static facts of one GPU (value 1).",
    ("name", "pci_bus", "driver_version"),
)
GPU_LOST = Metric(
    "fsdp_gpu_lost",
    "gauge",
    "1 when NVML reports the GPU lost (fallen off the bus; reset or reboot needed), else 0.",
)
GPU_READING_STALE = Metric(
    "fsdp_gpu_reading_stale",
    "gauge",
    "1 when the agent's NVML reading of this GPU did not finish within its deadline (a driver call "
    "that hangs): the GPU's figures are left out of this scrape, not repeated; else 0.",
)
GPU_UNREADABLE = Metric(
    "fsdp_gpu_unreadable",
    "gauge",
    "1 when the agent's NVML reading of this GPU finished without a single figure because its calls "
    "failed with errors other than lost (a failing board's Unknown Error, a refused handle, a GPU gone "
    "from NVML's device count), else 0; the reason is in /snapshot.",
)
GPU_READING_AGE = Metric(
    "fsdp_gpu_reading_age_seconds",
    "gauge",
    "Seconds since the agent's last complete NVML reading of this GPU (grows while it is stale or lost).",
)
GPU_UTILIZATION = Metric(
    "fsdp_gpu_utilization_ratio",
    "gauge",
    "Share of the last sample period in which a kernel ran on the GPU (0..1; absent under MIG).",
)
GPU_MEMORY_UTILIZATION = Metric(
    "fsdp_gpu_memory_utilization_ratio",
    "gauge",
    "Share of the last sample period in which device memory was read or written (0..1).",
)
GPU_MEMORY_TOTAL = Metric("fsdp_gpu_memory_total_bytes", "gauge", "Device memory installed.")
GPU_MEMORY_USED = Metric("fsdp_gpu_memory_used_bytes", "gauge", "Device memory allocated by processes.")
GPU_MEMORY_RESERVED = Metric(
    "fsdp_gpu_memory_reserved_bytes",
    "gauge",
    "Device memory reserved by the driver and firmware.",
)
GPU_TEMPERATURE = Metric("fsdp_gpu_temperature_celsius", "gauge", "GPU core temperature.")
GPU_POWER = Metric("fsdp_gpu_power_watts", "gauge", "Power drawn by the board.")
GPU_POWER_LIMIT = Metric("fsdp_gpu_power_limit_watts", "gauge", "Power limit the driver enforces.")
GPU_SM_CLOCK = Metric("fsdp_gpu_sm_clock_hertz", "gauge", "Current SM clock.")
GPU_MEMORY_CLOCK = Metric("fsdp_gpu_memory_clock_hertz", "gauge", "Current memory clock.")
GPU_FAN_SPEED = Metric(
    "fsdp_gpu_fan_speed_ratio",
    "gauge",
    "Intended fan speed as a share of the maximum (0..1; absent on passively cooled GPUs).",
)
GPU_PCIE_RX = Metric(
    "fsdp_gpu_pcie_rx_bytes_per_second",
    "gauge",
    "PCIe receive throughput over NVML's 20 ms sample.",
)
GPU_PCIE_TX = Metric(
    "fsdp_gpu_pcie_tx_bytes_per_second",
    "gauge",
    "PCIe transmit throughput over NVML's 20 ms sample.",
)
GPU_ENCODER_UTILIZATION = Metric(
    "fsdp_gpu_encoder_utilization_ratio",
    "gauge",
    "Video encoder busy share (0..1).",
)
GPU_DECODER_UTILIZATION = Metric(
    "fsdp_gpu_decoder_utilization_ratio",
    "gauge",
    "Video decoder busy share (0..1).",
)
GPU_ECC_ERRORS = Metric(
    "fsdp_gpu_ecc_errors_total",
    "counter",
    "ECC errors in device memory since the driver loaded (NVML volatile counters), by type (corrected, uncorrected).",
    ("type",),
)
GPU_CLOCK_THROTTLE = Metric(
    "fsdp_gpu_clock_throttle_reason",
    "gauge",
    "1 when this reason is holding the GPU's clocks down now, else 0 (NVML clock event reasons).",
    ("reason",),
)
GPU_MIG_MODE = Metric("fsdp_gpu_mig_mode", "gauge", "1 when MIG mode is enabled on the GPU, else 0.")
GPU_MIG_MEMORY_TOTAL = Metric(
    "fsdp_gpu_mig_memory_total_bytes",
    "gauge",
    "Device memory of one MIG instance.",
    ("mig_uuid", "gpu_instance", "compute_instance"),
)
GPU_MIG_MEMORY_USED = Metric(
    "fsdp_gpu_mig_memory_used_bytes",
    "gauge",
    "Device memory in use in one MIG instance.",
    ("mig_uuid", "gpu_instance", "compute_instance"),
)
GPU_PROCESS_MEMORY = Metric(
    "fsdp_gpu_process_memory_bytes",
    "gauge",
    "Device memory used by one process on this GPU (join fsdp_node_process_info on pid).",
    ("pid",),
)
GPU_PROCESS_SM_UTILIZATION = Metric(
    "fsdp_gpu_process_sm_utilization_ratio",
    "gauge",
    "Share of the GPU's SM time used by one process over NVML's last sample (0..1).",
    ("pid",),
)
GPU_XID_ERRORS = Metric(
    "fsdp_gpu_xid_errors_total",
    "counter",
    "XID errors the driver reported for this GPU (kernel log, or NVML events when the kernel log "
    "cannot be read), by code and severity class (observe.xid). Each report counts once.",
    ("pci_bus", "xid", "severity"),
)
GPU_XID_LAST_TIME = Metric(
    "fsdp_gpu_xid_last_timestamp_seconds",
    "gauge",
    "Unix time of the latest XID of this code on this GPU: the kernel log record's own timestamp "
    "(the ring buffer's time since boot plus the boot time), or when the agent received it (NVML "
    "events, lines appended to a followed file). Absent where that time is not known. The XID "
    "alerts page on a recent one even before Prometheus has a window of the agent's history.",
    ("pci_bus", "xid", "severity"),
)

AGENT_UP = Metric(
    "fsdp_node_agent_source_up",
    "gauge",
    "1 when the agent can read this source (procfs, nvml, kernel_log), else 0.",
    ("source",),
)
AGENT_COLLECTION_SECONDS = Metric(
    "fsdp_node_agent_collection_seconds",
    "gauge",
    "Wall time of the agent's last collection.",
)
AGENT_COLLECTIONS = Metric("fsdp_node_agent_collections_total", "counter", "Collections completed.")
AGENT_LAST_COLLECTION = Metric(
    "fsdp_node_agent_last_collection_timestamp_seconds",
    "gauge",
    "Unix time at which the snapshot being served was taken.",
)
AGENT_ERRORS = Metric(
    "fsdp_node_agent_errors_total",
    "counter",
    "Errors while collecting, by kind (each kind is logged once; collection goes on).",
    ("kind",),
)
AGENT_DROPPED = Metric(
    "fsdp_node_agent_dropped_readings_total",
    "counter",
    "Readings dropped as implausible, by kind (e.g. temperature above 150 C, pid above pid_max).",
    ("kind",),
)

AGENT_CPU_SECONDS = Metric(
    "fsdp_node_agent_cpu_seconds_total",
    "counter",
    "CPU time (user + system) the agent has used.",
)
AGENT_RESIDENT_MEMORY = Metric("fsdp_node_agent_resident_memory_bytes", "gauge", "Resident set size of the agent.")

AGENT_METRICS: tuple[Metric, ...] = (
    NODE_CPU_BUSY,
    NODE_CPU_CORE_BUSY,
    NODE_MEMORY_TOTAL,
    NODE_MEMORY_USED,
    NODE_MEMORY_AVAILABLE,
    NODE_MEMORY_BUFFERS,
    NODE_MEMORY_CACHED,
    NODE_SWAP_TOTAL,
    NODE_SWAP_USED,
    NODE_LOAD1,
    NODE_LOAD5,
    NODE_LOAD15,
    NODE_UPTIME,
    NODE_PROCESSES,
    NODE_THREADS,
    NODE_GPUS,
    NODE_PROCESS_INFO,
    NODE_PROCESS_CPU_SECONDS,
    NODE_PROCESS_RESIDENT_MEMORY,
    GPU_INFO,
    GPU_LOST,
    GPU_READING_STALE,
    GPU_UNREADABLE,
    GPU_READING_AGE,
    GPU_UTILIZATION,
    GPU_MEMORY_UTILIZATION,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_MEMORY_RESERVED,
    GPU_TEMPERATURE,
    GPU_POWER,
    GPU_POWER_LIMIT,
    GPU_SM_CLOCK,
    GPU_MEMORY_CLOCK,
    GPU_FAN_SPEED,
    GPU_PCIE_RX,
    GPU_PCIE_TX,
    GPU_ENCODER_UTILIZATION,
    GPU_DECODER_UTILIZATION,
    GPU_ECC_ERRORS,
    GPU_CLOCK_THROTTLE,
    GPU_MIG_MODE,
    GPU_MIG_MEMORY_TOTAL,
    GPU_MIG_MEMORY_USED,
    GPU_PROCESS_MEMORY,
    GPU_PROCESS_SM_UTILIZATION,
    GPU_XID_ERRORS,
    GPU_XID_LAST_TIME,
    AGENT_UP,
    AGENT_COLLECTION_SECONDS,
    AGENT_COLLECTIONS,
    AGENT_LAST_COLLECTION,
    AGENT_ERRORS,
    AGENT_DROPPED,
    AGENT_CPU_SECONDS,
    AGENT_RESIDENT_MEMORY,
)
