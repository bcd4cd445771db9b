"""``trainer.launcher.run_status``: the launcher's exit status after torchrun stopped its ranks on a signal."""

from __future__ import annotations

import signal

from trainer.launcher import describe, run_status

TERM, INT = signal.SIGTERM, signal.SIGINT


def test_ranks_that_stopped_cleanly_give_their_own_status() -> None:
    assert run_status(TERM, {0: 143, 1: 143}) == (143, None)
    assert run_status(INT, {0: 130, 1: 130}) == (130, None)
    assert run_status(TERM, {0: 0, 1: 143}) == (143, None)  # one had finished already


def test_no_ranks_yet_or_all_finished() -> None:
    assert run_status(INT, {}) == (130, None)  # stopped during the rendezvous
    assert run_status(TERM, {0: 0, 1: 0}) == (0, None)


def test_a_rank_that_died_of_the_stop_signal_itself_stopped_all_the_same() -> None:
    assert run_status(TERM, {0: -15, 1: 143}) == (143, None)


def test_a_rank_that_did_not_stop_cleanly_is_named_and_gives_the_status() -> None:
    status, line = run_status(TERM, {0: 143, 1: -9})
    assert status == 137 and line == "torchrun: SIGTERM: local rank 1 was killed by SIGKILL"
    status, line = run_status(INT, {0: 1, 1: 130})
    assert status == 1 and line == "torchrun: SIGINT: local rank 0 exited with status 1"
    assert run_status(TERM, {0: None})[0] == 1 and describe(None) == "did not exit"
