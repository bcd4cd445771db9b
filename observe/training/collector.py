"""The training-metrics collector: plain host-side state, turned into ``fsdp_train_*`` at scrape time.

The training loop updates Python numbers (``on_step`` every step, ``on_window`` on log steps);
a custom collector turns the latest values into metric families when Prometheus scrapes.
Nothing here touches a device, so the exporter adds no host-device synchronisation, and a
failure while collecting is logged once and counted, never raised into training.
Names, kinds and help texts come from ``observe.catalog``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from observe import catalog as c
from observe.logonce import OnceLog
from observe.training.flops import mfu
from observe.training.histogram import Histogram
from observe.training.phases import Goodput, PhaseClock
from observe.training.window import WindowStats

log = logging.getLogger(__name__)


def process_resident_memory_peak_bytes(status_path: str = "/proc/self/status") -> int | None:
    """This process's peak resident set size in bytes, or ``None`` where it cannot be read.

    Reads the kernel's high-water mark ``VmHWM`` (kB) from ``status_path`` (Linux ``proc(5)``),
    so the figure is the true peak, not a sample. ``getrusage``'s ``ru_maxrss`` is not used: it
    survives ``execve``, so in a rank started by torchrun it reports torchrun's own peak when
    that is higher (measured here: 227 MB for a rank whose real peak was 11 MB).
    """
    try:
        with open(status_path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass
class DeviceMemory:
    """CUDA caching-allocator figures read on a log step (bytes; retries is a count)."""

    allocated: int
    reserved: int
    peak_allocated: int
    alloc_retries: int


class TrainerMetrics(Collector):
    """Per-rank training state exported as ``fsdp_train_*`` series.

    A value an entry point cannot know is ``None`` and its series is absent, never 0: planned
    steps without a configured end, FLOPs per token without a model, labelled tokens and samples
    before (or without) a counted batch, data wait without a watched data iterator, checkpoint
    times where no checkpoint is watched (``tracks_checkpoints``).

    Args:
        labels: constant labels on every series: ``run_id``, ``rank``, ``local_rank``, ``node``
            and, on CUDA, ``gpu_uuid`` (``observe.catalog.TRAINER_LABELS``).
        info: values of ``fsdp_train_info``'s extra labels (model, sharding_strategy, ...); may
            be changed later (the next scrape shows the new set).
        planned_steps: the step the run is configured to reach, or ``None``.
        flops_per_token: model FLOPs per token (``observe.training.flops.flops_per_token``), or ``None``.
        peak_flops: the device's dense BF16 peak FLOP/s, or ``None`` (then MFU is absent).
        export_global: export the run-wide series (global tokens/s); rank 0 only.
        phases: the rank's ``PhaseClock`` (phase state series and seconds per phase).
        goodput: the run's ``Goodput`` (read at scrape time).
        restarts: torchrun's restart count of this worker group.
        tracks_checkpoints: the entry point sees checkpoint saves and loads, so their histograms
            are exported (empty until the first one) rather than absent.
    """

    def __init__(
        self,
        labels: dict[str, str],
        info: dict[str, str],
        planned_steps: int | None,
        flops_per_token: int | None,
        peak_flops: float | None,
        export_global: bool,
        phases: PhaseClock | None = None,
        goodput: Goodput | None = None,
        restarts: int = 0,
        tracks_checkpoints: bool = True,
    ) -> None:
        self.labels = dict(labels)
        self.info = dict(info)
        self.planned_steps = planned_steps
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.export_global = export_global
        self.steps_total = 0
        self.labelled_tokens_total: int | None = None
        self.samples_total: int | None = None
        self.step = 0
        self.last_step_timestamp: float | None = None
        self.step_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
        self.data_wait_seconds: Histogram | None = None
        self.learning_rate: float | None = None
        self.window: WindowStats | None = None
        self.loss: float | None = None
        self.grad_norm: float | None = None
        self.global_tokens_per_second: float | None = None
        self.memory: DeviceMemory | None = None
        self.phases = phases
        self.goodput = goodput
        self.restarts = restarts
        self.tracks_checkpoints = tracks_checkpoints
        self.problems: dict[str, str] = {}
        self.checkpoint_save_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
        self.checkpoint_load_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
        self.last_checkpoint_step: int | None = None
        self.last_checkpoint_timestamp: float | None = None
        self.validation_loss: float | None = None
        self.validation_perplexity: float | None = None
        self._once = OnceLog(log)

    # -- updates from the training loop (host values only) ------------------------------------

    def on_step(
        self,
        step: int,
        step_seconds: float,
        data_wait_seconds: float | None,
        labelled_tokens: int | None,
        samples: int | None,
        learning_rate: float | None,
    ) -> None:
        """Record one completed optimizer step. Host floats and ints only; ``None`` = not known
        for this step (the series stays absent until some step knows it)."""
        self.steps_total += 1
        if labelled_tokens is not None:
            self.add_labelled_tokens(labelled_tokens)
        if samples is not None:
            self.samples_total = (self.samples_total or 0) + samples
        self.step = step
        self.step_seconds.observe(step_seconds)
        if data_wait_seconds is not None:
            if self.data_wait_seconds is None:
                self.data_wait_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
            self.data_wait_seconds.observe(data_wait_seconds)
        if learning_rate is not None:
            self.learning_rate = learning_rate
        self.last_step_timestamp = time.time()

    def add_labelled_tokens(self, tokens: int) -> None:
        """Count labelled tokens that were known only later (read from the device on a log step)."""
        self.labelled_tokens_total = (self.labelled_tokens_total or 0) + tokens

    def on_window(
        self,
        window: WindowStats,
        loss: float | None,
        grad_norm: float | None,
        global_tokens_per_second: float | None,
        memory: DeviceMemory | None,
    ) -> None:
        """Record the figures of a closed log window (after the log step's all-reduce)."""
        self.window = window
        self.loss = loss
        self.grad_norm = grad_norm
        self.global_tokens_per_second = global_tokens_per_second
        self.memory = memory

    def on_checkpoint_saved(self, step: int, seconds: float, saved_at: float) -> None:
        """Record a completed save of step ``step`` that took ``seconds`` on this rank."""
        self.checkpoint_save_seconds.observe(seconds)
        self.last_checkpoint_step, self.last_checkpoint_timestamp = step, saved_at

    def on_checkpoint_loaded(self, step: int, seconds: float, saved_at: float) -> None:
        """Record resuming from the checkpoint of ``step`` (saved at Unix time ``saved_at``)."""
        self.checkpoint_load_seconds.observe(seconds)
        self.last_checkpoint_step, self.last_checkpoint_timestamp = step, saved_at
        self.step = step

    def on_validation(self, loss: float, perplexity: float) -> None:
        """Record an evaluation on the held-out split."""
        self.validation_loss, self.validation_perplexity = loss, perplexity

    @property
    def mfu(self) -> float | None:
        """MFU of the last window, or ``None`` (no window yet, no FLOPs per token, no token count,
        or no known peak)."""
        if self.window is None or self.flops_per_token is None or self.window.tokens_per_second is None:
            return None
        return mfu(self.flops_per_token, self.window.tokens_per_second, self.peak_flops)

    # -- scrape-time collection ----------------------------------------------------------------

    def collect(self) -> Iterator:
        """Yield metric families; never raises (an error is logged once and counted)."""
        try:
            families = list(self._families())
        except Exception:  # noqa: BLE001 - metrics never crash training
            self._once.report(
                "exporter",
                "metrics exporter failed; training continues (logged once)",
                level=logging.ERROR,
                exc_info=True,
            )
            families = []
        families.append(self._counter(c.TRAIN_EXPORTER_ERRORS, self.exporter_errors))
        return iter(families)

    @property
    def exporter_errors(self) -> int:
        """Scrapes whose collection failed (``fsdp_train_exporter_errors_total``)."""
        return self._once.counts["exporter"]

    def _families(self) -> Iterator:
        names, values = list(self.labels), list(self.labels.values())
        info = GaugeMetricFamily(c.TRAIN_INFO.name, c.TRAIN_INFO.help, labels=names + list(self.info))
        info.add_metric(values + list(self.info.values()), 1)
        yield info
        yield self._counter(c.TRAIN_STEPS, self.steps_total)
        if self.labelled_tokens_total is not None:
            yield self._counter(c.TRAIN_LABELLED_TOKENS, self.labelled_tokens_total)
        if self.samples_total is not None:
            yield self._counter(c.TRAIN_SAMPLES, self.samples_total)
        yield self._histogram(c.TRAIN_STEP_SECONDS, self.step_seconds)
        if self.data_wait_seconds is not None:
            yield self._histogram(c.TRAIN_DATA_WAIT_SECONDS, self.data_wait_seconds)
        yield self._gauge(c.TRAIN_STEP, self.step)
        yield self._counter(c.TRAIN_RESTARTS, self.restarts)
        saves, loads = self.checkpoint_save_seconds, self.checkpoint_load_seconds
        if self.tracks_checkpoints or any(saves.counts) or any(loads.counts):
            yield self._histogram(c.TRAIN_CHECKPOINT_SAVE_SECONDS, saves)
            yield self._histogram(c.TRAIN_CHECKPOINT_LOAD_SECONDS, loads)
        if self.problems:
            yield self._problem_family()
        if self.phases is not None:
            yield from self._phase_families(self.phases)
        optional = {
            c.TRAIN_PLANNED_STEPS: self.planned_steps,
            c.TRAIN_FLOPS_PER_TOKEN: self.flops_per_token,
            c.TRAIN_LAST_STEP_TIMESTAMP: self.last_step_timestamp,
            c.TRAIN_LEARNING_RATE: self.learning_rate,
            c.TRAIN_LOSS: self.loss,
            c.TRAIN_GRAD_NORM: self.grad_norm,
            c.TRAIN_MFU: self.mfu,
            c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK: process_resident_memory_peak_bytes(),
        }
        if self.window is not None:
            optional[c.TRAIN_WINDOW_STEP_SECONDS] = self.window.step_seconds
            optional[c.TRAIN_WINDOW_DATA_WAIT_RATIO] = self.window.data_wait_ratio
            optional[c.TRAIN_TOKENS_PER_SECOND] = self.window.tokens_per_second
        if self.export_global:
            optional[c.TRAIN_GLOBAL_TOKENS_PER_SECOND] = self.global_tokens_per_second
        if self.memory is not None:
            optional[c.TRAIN_DEVICE_MEMORY_ALLOCATED] = self.memory.allocated
            optional[c.TRAIN_DEVICE_MEMORY_RESERVED] = self.memory.reserved
            optional[c.TRAIN_DEVICE_MEMORY_PEAK] = self.memory.peak_allocated
        optional.update(
            {
                c.TRAIN_GOODPUT: None if self.goodput is None else self.goodput.ratio(),
                c.TRAIN_LAST_CHECKPOINT_STEP: self.last_checkpoint_step,
                c.TRAIN_LAST_CHECKPOINT_TIMESTAMP: self.last_checkpoint_timestamp,
                c.TRAIN_VALIDATION_LOSS: self.validation_loss,
                c.TRAIN_VALIDATION_PERPLEXITY: self.validation_perplexity,
            }
        )
        for metric, value in optional.items():
            if value is not None:  # absent, never 0, when unknown
                yield self._gauge(metric, value)
        if self.memory is not None:
            yield self._counter(c.TRAIN_DEVICE_ALLOC_RETRIES, self.memory.alloc_retries)

    def _problem_family(self) -> GaugeMetricFamily:
        metric = c.TRAIN_INSTRUMENTATION_PROBLEM
        family = GaugeMetricFamily(metric.name, metric.help, labels=list(self.labels) + ["problem"])
        for problem in sorted(self.problems):
            family.add_metric(list(self.labels.values()) + [problem], 1)
        return family

    def _phase_families(self, phases: PhaseClock) -> Iterator:
        names, values = list(self.labels) + ["phase"], list(self.labels.values())
        state = GaugeMetricFamily(c.TRAIN_PHASE.name, c.TRAIN_PHASE.help, labels=names)
        seconds = CounterMetricFamily(c.TRAIN_PHASE_SECONDS.family, c.TRAIN_PHASE_SECONDS.help, labels=names)
        current = phases.current
        for phase, total in phases.seconds().items():
            state.add_metric(values + [phase], 1 if phase == current else 0)
            seconds.add_metric(values + [phase], total)
        yield state
        yield seconds

    def _gauge(self, metric: c.Metric, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(metric.name, metric.help, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def _counter(self, metric: c.Metric, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(metric.family, metric.help, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def _histogram(self, metric: c.Metric, hist: Histogram) -> HistogramMetricFamily:
        family = HistogramMetricFamily(metric.name, metric.help, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), hist.buckets(), hist.sum)
        return family
