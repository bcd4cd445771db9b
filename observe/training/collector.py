"""The training-metrics collector: plain host-side state, turned into ``fsdp_train_*`` at scrape time.

The training loop's recorder updates Python numbers through ``TrainingCollector``'s methods
(``on_step`` every step, ``on_window`` on log steps, ...); a custom collector turns the latest
values into metric families when Prometheus scrapes, with the families any ``FamilyProvider``
adds.
Nothing here touches a device, so the exporter adds no host-device synchronisation, and a
failure while collecting is logged once and counted, never raised into training.
Names, kinds and help texts come from ``observe.catalog``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily
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


#: Adds series to a ``TrainingCollector``'s scrape: called at every scrape with the collector (whose
#: ``gauge``, ``counter`` and ``histogram`` give families with the rank's constant labels); yields
#: families of ``observe.catalog`` metrics. A per-step component (e.g. a tracker of collectives)
#: publishes its figures this way, without the collector knowing it.
FamilyProvider = Callable[["TrainingCollector"], Iterable[MetricFamily]]


class TrainingCollector(Collector):
    """Per-rank training state exported as ``fsdp_train_*`` series at scrape time.

    The training loop's side (``observe.training.recorder.StepRecorder``) only calls the methods
    below; the state they set is read by ``collect`` alone. A value an entry point cannot know is
    ``None`` and its series is absent, never 0: planned steps without a configured end, FLOPs per
    token without a model, labelled tokens and samples before (or without) a counted batch, data
    wait without a watched data iterator, checkpoint times where no checkpoint is watched
    (``track_checkpoints``).

    Args:
        labels: constant labels on every series: ``run_id``, ``rank``, ``local_rank``, ``node``
            and, on CUDA, ``gpu_uuid`` (``observe.catalog.TRAINER_LABELS``).
        info: values of ``fsdp_train_info``'s extra labels (model, sharding_strategy, ...);
            changed later with ``set_info`` (the next scrape shows the new set).
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
        self._labels = dict(labels)
        self._info = dict(info)
        self._planned_steps = planned_steps
        self._flops_per_token = flops_per_token
        self._peak_flops = peak_flops
        self._export_global = export_global
        self._steps_total = 0
        self._labelled_tokens_total: int | None = None
        self._samples_total: int | None = None
        self._step = 0
        self._last_step_timestamp: float | None = None
        self._step_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
        self._data_wait_seconds: Histogram | None = None
        self._learning_rate: float | None = None
        self._learning_rates: dict[tuple[str, str], float] = {}  # (optimizer, param group) -> lr
        self._window: WindowStats | None = None
        self._loss: float | None = None
        self._grad_norm: float | None = None
        self._global_tokens_per_second: float | None = None
        self._memory: DeviceMemory | None = None
        self._phases = phases
        self._goodput = goodput
        self._restarts = restarts
        self._tracks_checkpoints = tracks_checkpoints
        self._problems: dict[str, str] = {}
        self._checkpoint_save_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
        self._checkpoint_load_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
        self._last_checkpoint_step: int | None = None
        self._last_checkpoint_timestamp: float | None = None
        self._validation_loss: float | None = None
        self._validation_perplexity: float | None = None
        self._providers: list[FamilyProvider] = []
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
        self._steps_total += 1
        if labelled_tokens is not None:
            self.add_labelled_tokens(labelled_tokens)
        if samples is not None:
            self._samples_total = (self._samples_total or 0) + samples
        self._step = step
        self._step_seconds.observe(step_seconds)
        if data_wait_seconds is not None:
            if self._data_wait_seconds is None:
                self._data_wait_seconds = Histogram(c.STEP_SECONDS_BUCKETS)
            self._data_wait_seconds.observe(data_wait_seconds)
        if learning_rate is not None:
            self._learning_rate = learning_rate
        self._last_step_timestamp = time.time()

    def set_learning_rate(self, optimizer: str, param_group: str, value: float) -> None:
        """The learning rate of one optimizer's param group (``fsdp_train_learning_rate``'s labels);
        once any is set, these series replace the bare number ``on_step`` gives."""
        self._learning_rates[(optimizer, param_group)] = value

    def add_labelled_tokens(self, tokens: int) -> None:
        """Count labelled tokens that were known only later (read from the device on a log step)."""
        self._labelled_tokens_total = (self._labelled_tokens_total or 0) + tokens

    def on_window(
        self,
        window: WindowStats,
        loss: float | None,
        grad_norm: float | None,
        global_tokens_per_second: float | None,
        memory: DeviceMemory | None,
        learning_rate: float | None = None,
    ) -> None:
        """Record the figures of a closed log window (after the log step's all-reduce); a
        ``learning_rate`` read only now (a device tensor) replaces the last step's."""
        self._window = window
        self._loss = loss
        self._grad_norm = grad_norm
        self._global_tokens_per_second = global_tokens_per_second
        self._memory = memory
        if learning_rate is not None:
            self._learning_rate = learning_rate

    def on_figures(self, loss: float | None, grad_norm: float | None) -> None:
        """Show a loss and gradient norm a framework logged with no step since the last window
        (``None`` keeps the one shown)."""
        if loss is not None:
            self._loss = loss
        if grad_norm is not None:
            self._grad_norm = grad_norm

    def on_checkpoint_saved(self, step: int, seconds: float, saved_at: float) -> None:
        """Record a completed save of step ``step`` that took ``seconds`` on this rank (its
        histograms are exported from now on)."""
        self._checkpoint_save_seconds.observe(seconds)
        self._last_checkpoint_step, self._last_checkpoint_timestamp = step, saved_at

    def on_checkpoint_loaded(self, step: int, seconds: float, saved_at: float) -> None:
        """Record resuming from the checkpoint of ``step`` (saved at Unix time ``saved_at``)."""
        self._checkpoint_load_seconds.observe(seconds)
        self._last_checkpoint_step, self._last_checkpoint_timestamp = step, saved_at
        self._step = step

    def on_validation(self, loss: float, perplexity: float) -> None:
        """Record an evaluation on the held-out split."""
        self._validation_loss, self._validation_perplexity = loss, perplexity

    def set_info(self, **labels: str | None) -> None:
        """Set (or with ``None`` drop) ``fsdp_train_info`` labels. Cheap when nothing changes (entry
        points call it every step); a change swaps in a new dict, so a scrape in another thread
        sees all of it or none of it."""
        for key, value in labels.items():
            if self._info.get(key) != value:
                break
        else:
            return
        self._info = {k: v for k, v in {**self._info, **labels}.items() if v is not None}

    def set_label(self, key: str, value: str) -> None:
        """Set one ``fsdp_train_info`` label: ``set_info`` for the per-step path (no keyword
        arguments to pack)."""
        if self._info.get(key) != value:
            self._info = {**self._info, key: value}

    def report_problem(self, name: str, message: str) -> bool:
        """Export ``fsdp_train_instrumentation_problem{problem=name}``; ``True`` the first time
        (the caller says ``message`` once), ``False`` when it was already reported."""
        if name in self._problems:
            return False
        self._problems[name] = message
        return True

    def set_flops_per_token(self, flops: int) -> None:
        """Model FLOPs per token (``observe.training.flops``), for that series and MFU."""
        self._flops_per_token = flops

    def track_checkpoints(self) -> None:
        """Export the checkpoint histograms from now on, empty until the first save or load."""
        self._tracks_checkpoints = True

    def add_families(self, provider: FamilyProvider) -> None:
        """Add ``provider``'s families to every scrape, after the core series. A provider that
        raises loses only its own families (logged once, counted in
        ``fsdp_train_exporter_errors_total``)."""
        self._providers.append(provider)

    @property
    def mfu(self) -> float | None:
        """MFU of the last window, or ``None`` (no window yet, no FLOPs per token, no token count,
        or no known peak)."""
        if self._window is None or self._flops_per_token is None or self._window.tokens_per_second is None:
            return None
        return mfu(self._flops_per_token, self._window.tokens_per_second, self._peak_flops)

    # -- scrape-time collection ----------------------------------------------------------------

    def collect(self) -> Iterator[MetricFamily]:
        """Yield metric families; never raises (an error is logged once and counted)."""
        try:
            families = list(self._families())
        except Exception:  # noqa: BLE001 - metrics never crash training
            self._failed()
            families = []
        for provider in self._providers:
            try:
                families.extend(provider(self))
            except Exception:  # noqa: BLE001 - an added family never costs the core series
                self._failed()
        families.append(self.counter(c.TRAIN_EXPORTER_ERRORS, self.exporter_errors))
        return iter(families)

    def _failed(self) -> None:
        self._once.report(
            "exporter", "metrics exporter failed; training continues (logged once)", level=logging.ERROR, exc_info=True
        )

    @property
    def exporter_errors(self) -> int:
        """Collections that failed (``fsdp_train_exporter_errors_total``)."""
        return self._once.counts["exporter"]

    def _families(self) -> Iterator[MetricFamily]:
        names, values = list(self._labels), list(self._labels.values())
        info = GaugeMetricFamily(c.TRAIN_INFO.name, c.TRAIN_INFO.help, labels=names + list(self._info))
        info.add_metric(values + list(self._info.values()), 1)
        yield info
        yield self.counter(c.TRAIN_STEPS, self._steps_total)
        if self._labelled_tokens_total is not None:
            yield self.counter(c.TRAIN_LABELLED_TOKENS, self._labelled_tokens_total)
        if self._samples_total is not None:
            yield self.counter(c.TRAIN_SAMPLES, self._samples_total)
        yield self.histogram(c.TRAIN_STEP_SECONDS, self._step_seconds)
        if self._data_wait_seconds is not None:
            yield self.histogram(c.TRAIN_DATA_WAIT_SECONDS, self._data_wait_seconds)
        yield self.gauge(c.TRAIN_STEP, self._step)
        yield self.counter(c.TRAIN_RESTARTS, self._restarts)
        saves, loads = self._checkpoint_save_seconds, self._checkpoint_load_seconds
        if self._tracks_checkpoints or any(saves.counts) or any(loads.counts):
            yield self.histogram(c.TRAIN_CHECKPOINT_SAVE_SECONDS, saves)
            yield self.histogram(c.TRAIN_CHECKPOINT_LOAD_SECONDS, loads)
        if self._problems:
            yield self._problem_family()
        if self._phases is not None:
            yield from self._phase_families(self._phases)
        optional = {
            c.TRAIN_PLANNED_STEPS: self._planned_steps,
            c.TRAIN_FLOPS_PER_TOKEN: self._flops_per_token,
            c.TRAIN_LAST_STEP_TIMESTAMP: self._last_step_timestamp,
            c.TRAIN_LOSS: self._loss,
            c.TRAIN_GRAD_NORM: self._grad_norm,
            c.TRAIN_MFU: self.mfu,
            c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK: process_resident_memory_peak_bytes(),
        }
        if self._window is not None:
            optional[c.TRAIN_WINDOW_STEP_SECONDS] = self._window.step_seconds
            optional[c.TRAIN_WINDOW_DATA_WAIT_RATIO] = self._window.data_wait_ratio
            optional[c.TRAIN_TOKENS_PER_SECOND] = self._window.tokens_per_second
        if self._export_global:
            optional[c.TRAIN_GLOBAL_TOKENS_PER_SECOND] = self._global_tokens_per_second
        if self._memory is not None:
            optional[c.TRAIN_DEVICE_MEMORY_ALLOCATED] = self._memory.allocated
            optional[c.TRAIN_DEVICE_MEMORY_RESERVED] = self._memory.reserved
            optional[c.TRAIN_DEVICE_MEMORY_PEAK] = self._memory.peak_allocated
        optional.update(
            {
                c.TRAIN_GOODPUT: None if self._goodput is None else self._goodput.ratio(),
                c.TRAIN_LAST_CHECKPOINT_STEP: self._last_checkpoint_step,
                c.TRAIN_LAST_CHECKPOINT_TIMESTAMP: self._last_checkpoint_timestamp,
                c.TRAIN_VALIDATION_LOSS: self._validation_loss,
                c.TRAIN_VALIDATION_PERPLEXITY: self._validation_perplexity,
            }
        )
        for metric, value in optional.items():
            if value is not None:  # absent, never 0, when unknown
                yield self.gauge(metric, value)
        if self._memory is not None:
            yield self.counter(c.TRAIN_DEVICE_ALLOC_RETRIES, self._memory.alloc_retries)
        rates = self._learning_rates or ({("", ""): self._learning_rate} if self._learning_rate is not None else {})
        if rates:
            metric = c.TRAIN_LEARNING_RATE
            family = GaugeMetricFamily(metric.name, metric.help, labels=list(self._labels) + list(metric.labels))
            for (optimizer, group), value in sorted(rates.items()):
                family.add_metric([*self._labels.values(), optimizer, group], value)
            yield family

    def _problem_family(self) -> GaugeMetricFamily:
        metric = c.TRAIN_INSTRUMENTATION_PROBLEM
        family = GaugeMetricFamily(metric.name, metric.help, labels=list(self._labels) + ["problem"])
        for problem in sorted(self._problems):
            family.add_metric(list(self._labels.values()) + [problem], 1)
        return family

    def _phase_families(self, phases: PhaseClock) -> Iterator[MetricFamily]:
        names, values = list(self._labels) + ["phase"], list(self._labels.values())
        state = GaugeMetricFamily(c.TRAIN_PHASE.name, c.TRAIN_PHASE.help, labels=names)
        seconds = CounterMetricFamily(c.TRAIN_PHASE_SECONDS.family, c.TRAIN_PHASE_SECONDS.help, labels=names)
        current = phases.current
        for phase, total in phases.seconds().items():
            state.add_metric(values + [phase], 1 if phase == current else 0)
            seconds.add_metric(values + [phase], total)
        yield state
        yield seconds

    # -- families with the rank's constant labels (also for a FamilyProvider) ------------------

    @property
    def labels(self) -> dict[str, str]:
        """The rank's constant labels (a copy): ``run_id``, ``rank``, ``local_rank``, ``node``..."""
        return dict(self._labels)

    def gauge(self, metric: c.Metric, value: float) -> GaugeMetricFamily:
        """A gauge family of ``metric`` with one sample: the rank's labels, ``value``."""
        family = GaugeMetricFamily(metric.name, metric.help, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), value)
        return family

    def counter(self, metric: c.Metric, value: float) -> CounterMetricFamily:
        """A counter family of ``metric`` (named with ``_total``) with one sample: ``value``."""
        family = CounterMetricFamily(metric.family, metric.help, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), value)
        return family

    def histogram(self, metric: c.Metric, hist: Histogram) -> HistogramMetricFamily:
        """A histogram family of ``metric`` from ``hist``'s buckets and sum."""
        family = HistogramMetricFamily(metric.name, metric.help, labels=list(self._labels))
        family.add_metric(list(self._labels.values()), hist.buckets(), hist.sum)
        return family
