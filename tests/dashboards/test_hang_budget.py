"""The minute from a hang to its alert, from the shipped pieces themselves: the rank's stall watchdog
(floor, k, how often it looks), the trainer PodMonitor's scrape interval, and the hang rule group's
evaluation interval and ``for`` in the generated rule file and PrometheusRule."""

from __future__ import annotations

from pathlib import Path

import yaml

from observe.monitoring import rules
from observe.monitoring.settings import Settings
from observe.promql import duration_seconds
from observe.training import watchdog

REPO = Path(__file__).resolve().parents[2]
HANG_ALERTS = {"FsdpCollectiveHang", "FsdpCollectiveMismatch", "FsdpRankGone"}


def hang_group(doc: dict) -> dict:
    (group,) = [g for g in doc["groups"] if g["name"] == "fsdp-observe.hang"]
    return group


def test_a_hang_fires_within_a_minute_with_the_shipped_intervals() -> None:
    podmonitor = yaml.safe_load((REPO / "daemonsets" / "trainer-podmonitor.yaml").read_text())
    scrapes = {duration_seconds(e["interval"]) for e in podmonitor["spec"]["podMetricsEndpoints"]}
    assert scrapes == {15.0}
    committed = yaml.safe_load((REPO / "dashboards" / rules.RULES_FILE).read_text())
    kube = yaml.safe_load((REPO / "daemonsets" / "generated" / "prometheusrule.yaml").read_text())["spec"]
    for doc in (committed, kube):
        group = hang_group(doc)
        assert {r["alert"] for r in group["rules"] if "alert" in r} == HANG_ALERTS
        evaluation = duration_seconds(group["interval"])
        waits = {duration_seconds(r["for"]) for r in group["rules"] if "alert" in r}
        # a median step under 10 s keeps the threshold at the floor
        threshold = max(watchdog.FLOOR_SECONDS, watchdog.K * 10.0)
        # the watchdog notes the last progress at its next look and flags at the first look past the threshold
        flagged = threshold + 2 * watchdog.TICK_SECONDS
        assert flagged + 15.0 + evaluation + max(waits) <= 60.0, (flagged, evaluation, waits)
    assert hang_group(rules.rule_file())["interval"] == Settings().hang_interval == "10s"


def test_the_hang_interval_setting_reaches_the_group() -> None:
    assert hang_group(rules.rule_file(Settings(hang_interval="5s", hang_for="2s")))["interval"] == "5s"
    assert {r["for"] for r in hang_group(rules.rule_file(Settings(hang_for="2s")))["rules"] if "alert" in r} == {"2s"}
