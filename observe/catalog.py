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
#: NVIDIA dcgm-exporter's default port (not ours; named so dashboards and docs agree).
DCGM_EXPORTER_PORT = 9400

#: Labels on every trainer series. ``gpu_uuid`` (the ``GPU-…`` string NVML and DCGM print) is
#: added on CUDA ranks so trainer series join with DCGM's by GPU.
TRAINER_LABELS: tuple[str, ...] = ("run_id", "rank", "local_rank", "node")
TRAINER_CUDA_LABELS: tuple[str, ...] = TRAINER_LABELS + ("gpu_uuid",)

#: Upper bounds (seconds) of the step-time and data-wait histograms. They reach 600 s so a step
#: that stalls on a slow collective or a checkpoint still lands in a finite bucket.
STEP_SECONDS_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
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


# --- trainer (one set per rank; constant labels TRAINER_LABELS / TRAINER_CUDA_LABELS) --------

TRAIN_INFO = Metric(
    "fsdp_train_info", "gauge",
    "Static facts of this training process (value 1).",
    ("model", "sharding_strategy", "mixed_precision", "world_size", "device_type", "backend",
     "activation_checkpointing", "mesh"),
)
TRAIN_STEPS = Metric("fsdp_train_steps_total", "counter", "Optimizer steps completed by this rank.")
TRAIN_LABELLED_TOKENS = Metric(
    "fsdp_train_labelled_tokens_total", "counter",
    "Tokens that carried a training label (padding and -100 excluded) processed by this rank.",
)
TRAIN_SAMPLES = Metric("fsdp_train_samples_total", "counter", "Sequences processed by this rank.")
TRAIN_STEP_SECONDS = Metric(
    "fsdp_train_step_seconds", "histogram",
    "Wall time of one training step on this rank's host, data wait included.",
)
TRAIN_DATA_WAIT_SECONDS = Metric(
    "fsdp_train_data_wait_seconds", "histogram",
    "Time this rank waited for the next batch from the data iterator.",
)
TRAIN_STEP = Metric("fsdp_train_step", "gauge", "Index of the last completed optimizer step.")
TRAIN_PLANNED_STEPS = Metric("fsdp_train_planned_steps", "gauge", "Steps this run is configured to reach.")
TRAIN_LAST_STEP_TIMESTAMP = Metric(
    "fsdp_train_last_step_timestamp_seconds", "gauge",
    "Unix time at which this rank completed its last step.",
)
TRAIN_WINDOW_STEP_SECONDS = Metric(
    "fsdp_train_window_step_seconds", "gauge",
    "Mean step time over the last log window: window wall time / steps really in the window.",
)
TRAIN_WINDOW_DATA_WAIT_RATIO = Metric(
    "fsdp_train_window_data_wait_ratio", "gauge",
    "Share of the last log window's wall time spent waiting for data (0..1).",
)
TRAIN_TOKENS_PER_SECOND = Metric(
    "fsdp_train_tokens_per_second", "gauge",
    "Labelled tokens per second on this rank (device) over the last log window.",
)
TRAIN_GLOBAL_TOKENS_PER_SECOND = Metric(
    "fsdp_train_global_tokens_per_second", "gauge",
    "Labelled tokens per second summed over all data-parallel ranks, last log window "
    "(exported by rank 0 only, so sum() over ranks never double counts).",
)
TRAIN_LOSS = Metric(
    "fsdp_train_loss", "gauge",
    "Training loss (cross-entropy, nats per token), token-weighted mean over all ranks and the "
    "last log window.",
)
TRAIN_GRAD_NORM = Metric(
    "fsdp_train_grad_norm", "gauge", "Global L2 norm of the gradients before clipping, last log step.",
)
TRAIN_LEARNING_RATE = Metric("fsdp_train_learning_rate", "gauge", "Learning rate of the last step.")
TRAIN_FLOPS_PER_TOKEN = Metric(
    "fsdp_train_model_flops_per_token", "gauge",
    "Model FLOPs per token, 6*N_matmul + 12*L*d_model*T (PaLM appendix B, as torchtitan).",
)
TRAIN_MFU = Metric(
    "fsdp_train_mfu_ratio", "gauge",
    "Model FLOPs utilisation over the last log window (0..1); absent when the device's peak is "
    "unknown (CPU, unlisted GPU).",
)
TRAIN_DEVICE_MEMORY_ALLOCATED = Metric(
    "fsdp_train_device_memory_allocated_bytes", "gauge",
    "CUDA caching allocator: bytes currently allocated to tensors (absent on CPU).",
)
TRAIN_DEVICE_MEMORY_RESERVED = Metric(
    "fsdp_train_device_memory_reserved_bytes", "gauge",
    "CUDA caching allocator: bytes reserved from the driver (absent on CPU).",
)
TRAIN_DEVICE_MEMORY_PEAK = Metric(
    "fsdp_train_device_memory_peak_allocated_bytes", "gauge",
    "CUDA caching allocator: peak bytes allocated since start (absent on CPU).",
)
TRAIN_DEVICE_ALLOC_RETRIES = Metric(
    "fsdp_train_device_alloc_retries_total", "counter",
    "CUDA caching allocator: allocations that had to free cached blocks and retry (absent on CPU).",
)
TRAIN_EXPORTER_ERRORS = Metric(
    "fsdp_train_exporter_errors_total", "counter",
    "Errors inside the metrics exporter (logged once; training continues).",
)

# --- trainer: where wall time goes (phases, restarts, checkpoints, goodput, validation) ------

#: Values of the ``phase`` label, in the order a run passes through them. ``loading_weights``:
#: building the model and filling it (seeded init or a from_pretrained checkpoint, shard by
#: shard); ``restarting``: the same start-up when the process continues a run (an elastic
#: restart or a resume), including loading the checkpoint and re-deriving the data position;
#: ``training``: optimizer steps; ``validating``: held-out evaluation; ``checkpointing``: saving;
#: ``finished``: the run is over and the process only lingers for a final scrape.
TRAIN_PHASES: tuple[str, ...] = (
    "loading_weights", "restarting", "training", "validating", "checkpointing", "finished",
)
TRAIN_PHASE = Metric(
    "fsdp_train_phase", "gauge",
    "State series: 1 for the phase this rank is in now, 0 for every other phase (one series per "
    "phase, as kube-state-metrics exports pod phases).",
    ("phase",),
)
TRAIN_PHASE_SECONDS = Metric(
    "fsdp_train_phase_seconds_total", "counter",
    "Wall time this process has spent in each phase (the current one counted up to the scrape).",
    ("phase",),
)
TRAIN_RESTARTS = Metric(
    "fsdp_train_restarts_total", "counter",
    "Times torchrun restarted this worker group (TORCHELASTIC_RESTART_COUNT).",
)
TRAIN_GOODPUT = Metric(
    "fsdp_train_goodput_ratio", "gauge",
    "Productive step time over wall time since the run's first start (0..1), across restarts: "
    "steps redone after a restart, start-up, restarts, checkpoints and validation count as lost.",
)
TRAIN_CHECKPOINT_SAVE_SECONDS = Metric(
    "fsdp_train_checkpoint_save_seconds", "histogram",
    "Wall time of one sharded checkpoint save (torch.distributed.checkpoint) on this rank.",
)
TRAIN_CHECKPOINT_LOAD_SECONDS = Metric(
    "fsdp_train_checkpoint_load_seconds", "histogram",
    "Wall time of loading a sharded checkpoint to resume, on this rank.",
)
TRAIN_LAST_CHECKPOINT_STEP = Metric(
    "fsdp_train_last_checkpoint_step", "gauge",
    "Step of the newest complete checkpoint this process saved or resumed from.",
)
TRAIN_LAST_CHECKPOINT_TIMESTAMP = Metric(
    "fsdp_train_last_checkpoint_timestamp_seconds", "gauge",
    "Unix time at which that checkpoint was saved.",
)
TRAIN_VALIDATION_LOSS = Metric(
    "fsdp_train_validation_loss", "gauge",
    "Held-out loss (cross-entropy, nats per token), token-weighted over all ranks, last evaluation.",
)
TRAIN_VALIDATION_PERPLEXITY = Metric(
    "fsdp_train_validation_perplexity", "gauge",
    "exp(validation loss) of the last evaluation.",
)

#: Where wall time goes: phases, restarts, checkpoints, goodput, validation.
TRAINER_RUN_METRICS: tuple[Metric, ...] = (
    TRAIN_PHASE, TRAIN_PHASE_SECONDS, TRAIN_RESTARTS, TRAIN_GOODPUT, TRAIN_CHECKPOINT_SAVE_SECONDS,
    TRAIN_CHECKPOINT_LOAD_SECONDS, TRAIN_LAST_CHECKPOINT_STEP, TRAIN_LAST_CHECKPOINT_TIMESTAMP,
    TRAIN_VALIDATION_LOSS, TRAIN_VALIDATION_PERPLEXITY,
)

TRAINER_METRICS: tuple[Metric, ...] = (
    *TRAINER_RUN_METRICS,
    TRAIN_INFO, TRAIN_STEPS, TRAIN_LABELLED_TOKENS, TRAIN_SAMPLES, TRAIN_STEP_SECONDS,
    TRAIN_DATA_WAIT_SECONDS, TRAIN_STEP, TRAIN_PLANNED_STEPS, TRAIN_LAST_STEP_TIMESTAMP,
    TRAIN_WINDOW_STEP_SECONDS, TRAIN_WINDOW_DATA_WAIT_RATIO, TRAIN_TOKENS_PER_SECOND,
    TRAIN_GLOBAL_TOKENS_PER_SECOND, TRAIN_LOSS, TRAIN_GRAD_NORM, TRAIN_LEARNING_RATE,
    TRAIN_FLOPS_PER_TOKEN, TRAIN_MFU, TRAIN_DEVICE_MEMORY_ALLOCATED, TRAIN_DEVICE_MEMORY_RESERVED,
    TRAIN_DEVICE_MEMORY_PEAK, TRAIN_DEVICE_ALLOC_RETRIES, TRAIN_EXPORTER_ERRORS,
)
