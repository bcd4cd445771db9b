"""The exporter's run-state series: phases, restarts, goodput, checkpoints, validation."""

from __future__ import annotations

import pytest

from observe import catalog as c
from observe.training.collector import TrainingCollector
from observe.training.phases import Goodput, PhaseClock
from tests.support.collector import INFO, LABELS, scrape, value


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_phase_is_a_state_series_with_seconds_per_phase() -> None:
    clock = FakeClock(50.0)
    phases = PhaseClock("restarting", clock=clock)
    clock.now += 4
    phases.enter("training")
    clock.now += 6
    s = scrape(TrainingCollector(LABELS, INFO, 100, 1, None, True, phases=phases, restarts=2))
    states = {dict(k)["phase"]: v for k, v in s[c.TRAIN_PHASE.name].items()}
    assert set(states) == set(c.TRAIN_PHASES)
    assert states["training"] == 1 and sum(states.values()) == 1
    assert value(s, c.TRAIN_PHASE_SECONDS.name, phase="restarting") == 4
    assert value(s, c.TRAIN_PHASE_SECONDS.name, phase="training") == 6  # the running phase, up to the scrape
    assert value(s, c.TRAIN_RESTARTS.name) == 2


def test_checkpoint_goodput_and_validation_series() -> None:
    goodput = Goodput(run_started=0.0, productive_seconds=30.0, clock=FakeClock(40.0))
    m = TrainingCollector(LABELS, INFO, 100, 1, None, True, goodput=goodput)
    before = scrape(m)
    for metric in (c.TRAIN_VALIDATION_LOSS, c.TRAIN_VALIDATION_PERPLEXITY, c.TRAIN_LAST_CHECKPOINT_STEP):
        assert metric.name not in before  # absent until known, never 0
    assert value(before, c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + "_count") == 0
    m.on_checkpoint_loaded(step=40, seconds=0.5, saved_at=1234.0)
    m.on_checkpoint_saved(step=50, seconds=0.4, saved_at=2345.0)
    m.on_validation(loss=2.0, perplexity=7.389)
    s = scrape(m)
    assert value(s, c.TRAIN_GOODPUT.name) == pytest.approx(0.75)
    assert value(s, c.TRAIN_CHECKPOINT_LOAD_SECONDS.name + "_sum") == 0.5
    assert value(s, c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + "_bucket", le="0.1") == 0
    assert value(s, c.TRAIN_CHECKPOINT_SAVE_SECONDS.name + "_bucket", le="0.5") == 1
    assert value(s, c.TRAIN_LAST_CHECKPOINT_STEP.name) == 50
    assert value(s, c.TRAIN_LAST_CHECKPOINT_TIMESTAMP.name) == 2345.0
    assert value(s, c.TRAIN_VALIDATION_LOSS.name) == 2.0
    assert value(s, c.TRAIN_VALIDATION_PERPLEXITY.name) == pytest.approx(7.389)
