"""The exporter's linger: after the last step, serve until every recent scraper has scraped once more.

Real HTTP: ``observe.training.server.serve`` on a free loopback port, scraped with httpx under
distinct ``User-Agent``s (as Prometheus, ``fsdp-observe top`` and the demo's poller differ).
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from observe import catalog as c
from observe.promtext import parse
from observe.training.collector import TrainingCollector
from observe.training.phases import PhaseClock
from observe.training.server import Served, serve

#: Each test times the linger to within a second or less.
pytestmark = pytest.mark.serial("times waits to within a second")


@pytest.fixture
def served():
    phases = PhaseClock("training")
    metrics = TrainingCollector(
        {"run_id": "r", "rank": "0", "local_rank": "0", "node": "n"},
        {},
        3,
        None,
        None,
        export_global=False,
        phases=phases,
    )
    s = serve(metrics, "127.0.0.1", 0)
    s.metrics, s.phases = metrics, phases  # type: ignore[attr-defined]
    yield s
    s.shutdown()


def get(s: Served, agent: str) -> list:
    text = httpx.get(f"http://127.0.0.1:{s.port}/metrics", headers={"User-Agent": agent}, timeout=5).text
    return parse(text)


def test_nobody_watching_means_no_wait(served: Served) -> None:
    started = time.monotonic()
    assert served.linger(time.monotonic(), 5.0) == "unwatched"
    assert time.monotonic() - started < 0.5
    assert served.linger(time.monotonic(), 0.3, until_scraped=False) == "timeout"  # a fixed linger waits anyway
    assert 0.25 < time.monotonic() - started < 1.5


def test_it_ends_once_every_recent_scraper_came_back(served: Served) -> None:
    get(served, "Prometheus/2.42")
    get(served, "fsdp-observe-top")
    served.metrics.on_step(3, 0.1, None, None, None, None)  # type: ignore[attr-defined]
    served.phases.enter("finished")  # type: ignore[attr-defined]
    ended = time.monotonic()
    seen: list[list] = []

    def scrapers() -> None:  # the TUI comes back after 0.2 s, Prometheus after 0.6 s
        time.sleep(0.2)
        seen.append(get(served, "fsdp-observe-top"))
        time.sleep(0.4)
        seen.append(get(served, "Prometheus/2.42"))

    thread = threading.Thread(target=scrapers)
    thread.start()
    waited: list[int] = []
    assert served.linger(ended, 10.0, on_wait=waited.append) == "scraped"
    took = time.monotonic() - ended
    thread.join()
    assert waited == [2] and 0.5 < took < 3.0
    for samples in seen:  # both saw the end: the finished phase and the last step
        assert {(s.name, s.labels.get("phase")) for s in samples if s.name == c.TRAIN_PHASE.name and s.value == 1} == {
            (c.TRAIN_PHASE.name, "finished")
        }
        assert [s.value for s in samples if s.name == c.TRAIN_STEP.name] == [3]


def test_a_scraper_that_never_comes_back_is_waited_for_at_most_the_linger(served: Served) -> None:
    get(served, "Prometheus/2.42")
    ended = time.monotonic()
    assert served.linger(ended, 0.4) == "timeout"
    assert 0.35 < time.monotonic() - ended < 1.5


def test_a_scraper_seen_before_the_linger_window_is_not_waited_for(served: Served) -> None:
    get(served, "python-httpx")
    time.sleep(0.3)
    assert served.linger(time.monotonic(), 0.2) == "unwatched"


def test_a_stop_signal_ends_the_linger(served: Served) -> None:
    get(served, "Prometheus/2.42")
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    ended = time.monotonic()
    assert served.linger(ended, 10.0, sleep=stop.wait) == "stopped"
    assert time.monotonic() - ended < 2.0


def test_the_trainer_and_the_api_linger_alike() -> None:
    from observe.training.rankenv import DEFAULT_LINGER_SECONDS
    from trainer.runspec.config import DEFAULT_LINGER_SECONDS as TRAINER_DEFAULT
    from trainer.runspec.config import MetricsConfig

    assert TRAINER_DEFAULT == DEFAULT_LINGER_SECONDS == 20.0
    assert MetricsConfig().linger_seconds is None  # the trainer's default: until scraped, at most 20 s
