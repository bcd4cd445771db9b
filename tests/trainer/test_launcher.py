"""``trainer.launcher``: the launcher's exit status after torchrun stopped its ranks on a signal (``run_status``), and after a rank failed (``failed_rank``)."""

from __future__ import annotations

import signal

from trainer.launcher import describe, failed_rank, run_status

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


class _Failure:
    """What ``ProcessFailure`` carries that ``failed_rank`` reads."""

    def __init__(self, local_rank: int, exitcode: int, timestamp: int, message: object = "") -> None:
        self.local_rank, self.exitcode, self.timestamp, self.message = local_rank, exitcode, timestamp, message


def test_a_rank_killed_from_outside_is_the_failing_one_not_the_peer_that_reported_first() -> None:
    """rank 1 SIGKILLed; rank 0 then failed on the dead connection and reported first."""
    status, line = failed_rank(
        {
            0: _Failure(
                0, 1, 100, {"message": "RuntimeError: Connection reset by peer\nTraceback ...", "extraInfo": {}}
            ),
            1: _Failure(1, -9, 101, "Signal 9 (SIGKILL) received by PID 7"),
        }
    )
    assert status == 137
    assert line == "torchrun: rank 1 (local rank 1) was killed by SIGKILL; rank 0 stopped after it"


def test_otherwise_the_first_failure_with_its_first_error_line() -> None:
    status, line = failed_rank(
        {
            3: _Failure(1, -15, 50),  # stopped by torchrun after rank 2 failed
            2: _Failure(0, 2, 40, {"message": "ValueError: bad batch\n  at step 7", "extraInfo": {}}),
        }
    )
    assert (
        status == 2
        and line
        == "torchrun: rank 2 (local rank 0) exited with status 2: ValueError: bad batch; rank 3 stopped after it"
    )
    _, line = failed_rank(
        {0: _Failure(0, 1, 1, "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")}
    )
    assert line == "torchrun: rank 0 (local rank 0) exited with status 1 (its own output above says why)"
