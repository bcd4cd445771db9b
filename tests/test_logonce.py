"""``OnceLog``: every fault counted, the first of each kind logged; what the agent and the exporter use."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from observe.logonce import OnceLog


def test_first_of_each_kind_is_logged_and_every_one_counted(caplog: pytest.LogCaptureFixture) -> None:
    errors: Counter[str] = Counter({"earlier": 2})
    once = OnceLog(logging.getLogger("t"), errors)
    with caplog.at_level(logging.INFO, logger="t"):
        assert once.report("proc_unreadable", "cannot read %s", "/proc/1/stat")
        assert not once.report("proc_unreadable", "cannot read %s", "/proc/2/stat")
        assert once.report("vanished", "process %d exited", 7, level=logging.INFO, count=False)
        assert not once.report("vanished", "process %d exited", 8, level=logging.INFO, count=False)
    assert [r.getMessage() for r in caplog.records] == ["cannot read /proc/1/stat", "process 7 exited"]
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]
    assert errors == Counter({"earlier": 2, "proc_unreadable": 2}) and once.counts is errors


def test_the_training_exporter_logs_a_failing_scrape_once_and_counts_each(caplog, monkeypatch) -> None:
    from observe.training.collector import TrainingCollector

    m = TrainingCollector({"run_id": "r", "rank": "0", "local_rank": "0", "node": "n"}, {}, 10, 1, None, True)

    def broken():
        raise RuntimeError("boom")
        yield  # a generator, as _families is

    monkeypatch.setattr(m, "_families", broken)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            families = list(m.collect())
    assert m.exporter_errors == 3 and len(families) == 1 and families[0].samples[0].value == 3
    assert sum("metrics exporter failed" in r.getMessage() for r in caplog.records) == 1
