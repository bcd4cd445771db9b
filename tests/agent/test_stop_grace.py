"""The agent's documented stop grace period and the DaemonSet's terminationGracePeriodSeconds agree."""

from __future__ import annotations

import inspect

import yaml

from observe.agent.run import SERVER_POLL_SECONDS, STOP_JOIN_SECONDS
from observe.agent.xid_watch import KernelLogWatcher
from observe.cli.agent import FORCED_EXIT_SECONDS, STOP_GRACE_SECONDS
from tests.support.processes import REPO


def test_the_daemonset_gives_the_agent_exactly_its_grace_period() -> None:
    daemonset = yaml.safe_load((REPO / "daemonsets" / "agent-daemonset.yaml").read_text())
    assert daemonset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == STOP_GRACE_SECONDS


def test_a_clean_stop_fits_well_inside_the_forced_exit_and_that_inside_the_grace_period() -> None:
    watcher_poll = inspect.signature(KernelLogWatcher).parameters["poll_seconds"].default
    assert SERVER_POLL_SECONDS + STOP_JOIN_SECONDS + watcher_poll < FORCED_EXIT_SECONDS < STOP_GRACE_SECONDS
