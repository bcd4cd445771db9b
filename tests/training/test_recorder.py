"""``StepRecorder``'s seams for another per-step component: step and window events heard in one
place whatever drives them, and families added to the collector's scrape.

Driven through the real API and the recorder as the callbacks drive it; series read through a
real registry (``tests.support.collector.scrape``).
"""

from __future__ import annotations

import logging

import pytest

from observe import catalog as c
from observe.training import TrainingMetrics, session
from observe.training.collector import TrainingCollector
from observe.training.window import WindowReport
from tests.support.collector import LABELS, make, scrape, value

#: A metric for these tests only (the package's own come from observe.catalog).
PER_STEP = c.Metric("fsdp_train_test_component_seconds", "gauge", "A figure a test component publishes.")


class Heard:
    """A listener that writes down what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def step_began(self, step: int, at: float) -> None:
        self.events.append(("began", step))

    def step_ended(self, step: int, started: float, ended: float, data_wait: float | None) -> None:
        assert ended >= started
        assert data_wait is None or data_wait >= 0
        self.events.append(("ended", step))

    def window_closed(self, report: WindowReport) -> None:
        self.events.append(("window", report.step, report.stats.steps))


@pytest.fixture(autouse=True)
def one_rank(monkeypatch) -> None:
    for key, value_ in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(key, value_)
    yield
    m = session.current()
    if m is not None:
        m.close(linger_seconds=0)


def test_a_loop_of_its_own_is_heard_once_per_step_and_per_window() -> None:
    """Two batches per step, the first fetched before a phase: still one begin and one end per step."""
    m = TrainingMetrics(planned_steps=4, log_every=2, serve=False)
    heard = Heard()
    m.recorder.attach(heard)
    batches = m.batches([{"input_ids": [[1, 2]]}] * 8)
    for _ in range(4):
        next(batches)
        with m.phase("validating"):
            pass
        with m.step() as s:
            next(batches)
            s.loss(1.0)
    assert heard.events == [
        ("began", 1),
        ("ended", 1),
        ("window", 1, 1),
        ("began", 2),
        ("ended", 2),
        ("window", 2, 1),
        ("began", 3),
        ("ended", 3),
        ("began", 4),
        ("ended", 4),
        ("window", 4, 2),
    ]


def test_a_framework_that_reduces_its_own_windows_is_heard_at_its_log() -> None:
    """As the Hugging Face callback drives it: steps end in end_step, windows in record_window;
    a step with no sign of its start still begins before it ends."""
    m = TrainingMetrics(planned_steps=10, log_every=2, serve=False, instrumentation="hf")
    r = m.recorder
    r.windows_at_log_steps = False
    heard = Heard()
    r.attach(heard)
    r.begin_step(1.0)
    r.end_step(2.0)
    r.end_step(3.0)
    r.record_window(loss=2.5, grad_norm=0.5, learning_rate=1e-3)
    r.record_window(loss=2.0)  # no step since: the figures change, no window is heard
    assert heard.events == [("began", 1), ("ended", 1), ("began", 2), ("ended", 2), ("window", 2, 2)]
    got = scrape(r.collector)
    assert next(iter(got[c.TRAIN_LOSS.name].values())) == 2.0


def test_added_families_carry_the_rank_labels_and_a_failing_one_costs_only_itself(caplog) -> None:
    collector = make()
    collector.add_families(lambda col: [col.gauge(PER_STEP, 0.25)])
    assert value(scrape(collector), PER_STEP.name) == 0.25

    def broken(col: TrainingCollector) -> list:
        raise RuntimeError("a bug in an added component")

    collector.add_families(broken)
    with caplog.at_level(logging.ERROR):
        first, second = scrape(collector), scrape(collector)
    for got in (first, second):
        assert value(got, PER_STEP.name) == 0.25 and value(got, c.TRAIN_STEPS.name) == 0  # the rest is there
    assert value(second, c.TRAIN_EXPORTER_ERRORS.name) == 2  # counted every time, logged once
    assert sum("metrics exporter failed" in r.getMessage() for r in caplog.records) == 1
    assert dict(next(iter(first[PER_STEP.name]))) == LABELS
