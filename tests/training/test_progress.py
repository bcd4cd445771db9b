"""Rank 0's progress pushes to Kubeflow Trainer's status endpoint (``observe.training.progress``).

The endpoint is a stand-in over real HTTPS (``tests/support/progress_server.py``: a CA made with
``openssl``, the token file checked at each request, each body checked against the TrainJob CRD's
``trainerStatus`` schema); the client is the real one.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from observe.ports import free_port
from observe.training import progress
from observe.training.api import TrainingMetrics
from observe.training.progress import Progress, Pusher, trainer_status
from tests.support.progress_server import ProgressServer, metrics_of


@pytest.fixture
def endpoint(tmp_path: Path):
    server = ProgressServer(tmp_path)
    yield server
    server.close()


def pusher_for(server: ProgressServer, **kwargs) -> Pusher:
    return Pusher(server.url, str(server.ca_file), str(server.token_file), **kwargs)


def final(step: int = 100) -> Progress:
    return Progress(step, 100, 0.5, {"loss": 1.25})


def test_a_status_says_progress_eta_and_figures_as_the_crd_takes_them() -> None:
    from datetime import datetime, timezone

    status = trainer_status(
        Progress(40, 200, 0.75, {"loss": 2.3456789, "tokens_per_second": 123456.7, "mfu": None}),
        now=datetime(2026, 8, 30, 10, 30, 45, 500000, tzinfo=timezone.utc),
    )
    assert status == {
        "trainerStatus": {
            "progressPercentage": 20,
            "estimatedRemainingSeconds": 120,  # (200 - 40) steps x 0.75 s
            "metrics": [
                {"name": "currentStep", "value": "40"},
                {"name": "totalSteps", "value": "200"},
                {"name": "loss", "value": "2.34568"},
                {"name": "tokens_per_second", "value": "123457"},
            ],
            "lastUpdatedTime": "2026-08-30T10:30:45Z",
        }
    }
    unknown_end = trainer_status(Progress(7, None, 0.5))["trainerStatus"]
    assert "progressPercentage" not in unknown_end and "estimatedRemainingSeconds" not in unknown_end
    warm_up = trainer_status(Progress(1, 100, None))["trainerStatus"]  # step 1's window: no steady step yet
    assert warm_up["progressPercentage"] == 1 and "estimatedRemainingSeconds" not in warm_up


def test_a_push_reaches_the_endpoint_trusting_only_its_ca(endpoint: ProgressServer) -> None:
    pusher = pusher_for(endpoint)
    assert pusher.offer(final())  # the last step's push waits for its answer
    (status,) = endpoint.accepted()
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == 0
    assert metrics_of(status) == {"currentStep": "100", "totalSteps": "100", "loss": "1.25"}
    assert (pusher.sent, pusher.failed) == (1, 0)


def test_pushes_come_at_most_every_interval_and_the_last_step_always(endpoint: ProgressServer) -> None:
    now = [0.0]
    pusher = pusher_for(endpoint, interval=30.0, clock=lambda: now[0])
    taken = []
    for t, step in ((0.0, 10), (10.0, 20), (29.9, 30), (30.0, 40), (45.0, 50), (59.0, 60), (61.0, 70), (62.0, 100)):
        now[0] = t
        if pusher.offer(Progress(step, 100, 0.1)):
            taken.append(step)
    assert taken == [10, 40, 70, 100]  # 0 s, 30 s, 61 s, and the final step 1 s later


def test_a_push_never_holds_the_step_up(endpoint: ProgressServer) -> None:
    """The endpoint holds every request; an offer returns all the same, and the push lands later."""
    endpoint.open_gate.clear()
    pusher = pusher_for(endpoint, interval=0.0)
    assert pusher.offer(Progress(10, 100, 0.1))
    until(lambda: endpoint.waiting == 1)  # the request is at the endpoint, unanswered ...
    assert pusher.offer(Progress(20, 100, 0.1))  # ... and the next window's offer returns anyway
    endpoint.open_gate.set()
    until(lambda: len(endpoint.accepted()) == 2)
    assert [metrics_of(s)["currentStep"] for s in endpoint.accepted()] == ["10", "20"]


def test_the_token_is_read_again_for_every_push(endpoint: ProgressServer) -> None:
    pusher = pusher_for(endpoint, interval=0.0)
    pusher.offer(final(99))  # not final: 99 of 100
    until(lambda: len(endpoint.pushes) == 1)
    endpoint.issue("token-2-rotated")  # the kubelet rotates the projected token; token-1 is refused now
    pusher.offer(final())
    assert [(p.token, p.status) for p in endpoint.pushes] == [("token-1", 200), ("token-2-rotated", 200)]


def test_a_failed_push_is_one_line_and_training_goes_on(endpoint: ProgressServer) -> None:
    said: list[str] = []
    pusher = pusher_for(endpoint, interval=0.0, say=said.append)
    endpoint.token_file.write_text("a-token-the-pod-does-not-have\n")
    for step in (10, 20, 30):
        pusher.offer(Progress(step, 100, 0.1))
        until(lambda step=step: len(endpoint.pushes) == step // 10)
    until(lambda: pusher.failed == 3)
    assert len(said) == 1  # three refusals, one line
    assert said[0].startswith(
        f"progress push to {endpoint.url} failed: HTTP 403 Forbidden: Forbidden; training goes on"
    )
    assert "token-1" not in said[0] and "a-token" not in said[0]
    endpoint.issue("token-3")
    pusher.offer(final())
    assert said[1:] == [f"progress push to {endpoint.url} works again"]


def test_an_endpoint_that_is_not_there_or_not_trusted_is_one_line(endpoint: ProgressServer, tmp_path: Path) -> None:
    said: list[str] = []
    gone = Pusher(
        f"https://127.0.0.1:{free_port()}/status", str(endpoint.ca_file), str(endpoint.token_file), say=said.append
    )
    gone.offer(final())
    untrusted = Pusher(endpoint.url, None, str(endpoint.token_file), say=said.append)  # the system CAs only
    untrusted.offer(final())
    no_token = Pusher(endpoint.url, str(endpoint.ca_file), str(tmp_path / "no-token"), say=said.append)
    no_token.offer(final())
    assert len(said) == 3 and all("failed:" in line and "training goes on" in line for line in said), said
    assert "Connection refused" in said[0] or "connection refused" in said[0].lower()
    assert "CERTIFICATE_VERIFY_FAILED" in said[1]
    assert "cannot read" in said[2] and "no-token" in said[2]
    assert endpoint.pushes == []


def test_without_the_variables_nothing_happens_and_nothing_is_printed(monkeypatch, capsys) -> None:
    for name in (progress.URL_ENV, progress.CA_CERT_ENV, progress.TOKEN_ENV):
        monkeypatch.delenv(name, raising=False)
    assert progress.pusher_from_env(0) is None
    threads = threading.active_count()
    run_api(steps=12, log_every=4, monkeypatch=monkeypatch)
    assert threading.active_count() == threads and capsys.readouterr().err == ""


def test_the_api_pushes_each_window_of_rank_0_only(endpoint: ProgressServer, monkeypatch) -> None:
    """A user's own loop (the public API): every closed window is offered; rank 1 pushes nothing."""
    for name, value in endpoint.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(progress.INTERVAL_ENV, "0")
    monkeypatch.setenv("RANK", "1")
    run_api(steps=12, log_every=4, monkeypatch=monkeypatch)
    assert endpoint.pushes == []
    monkeypatch.setenv("RANK", "0")
    run_api(steps=12, log_every=4, monkeypatch=monkeypatch)
    steps = [int(metrics_of(s)["currentStep"]) for s in endpoint.accepted()]
    # the log windows are steps 1, 4, 8, 12; a window offered while the previous push is still on
    # its way replaces it, and the last step's push is always made (and waited for)
    assert steps[-1] == 12 and set(steps) <= {1, 4, 8, 12} and steps == sorted(steps)
    assert [s["progressPercentage"] for s in endpoint.accepted()] == [100 * n // 12 for n in steps]
    last = endpoint.accepted()[-1]
    assert last["estimatedRemainingSeconds"] == 0 and float(metrics_of(last)["loss"]) == pytest.approx(0.5)


@pytest.mark.parametrize("transformers_pushes", [True, False])
def test_the_hugging_face_callback_pushes_unless_transformers_does(
    transformers_pushes, endpoint, monkeypatch, tmp_path, capsys
):
    """The callback entry point pushes its windows. transformers adds its own KubeflowCallback to
    ``report_to`` whenever Trainer's URL is set (unless ``DISABLE_KUBEFLOW_INTEGRATION=TRUE``); the
    callback then leaves the pushes to it (one line says so) rather than overwrite its figures."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from observe.training.hf import FsdpObserveCallback

    for name, value in endpoint.env().items():
        monkeypatch.setenv(name, value)
    if not transformers_pushes:
        monkeypatch.setenv("DISABLE_KUBEFLOW_INTEGRATION", "TRUE")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):  # one process: rank 0 (Hugging Face would start a group)
        monkeypatch.delenv(name, raising=False)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", logging_steps=5, max_steps=10)
    assert ("kubeflow" in args.report_to) == transformers_pushes
    callback, state = FsdpObserveCallback(serve=False), TrainerState(max_steps=10)
    try:
        callback.on_train_begin(args, state, TrainerControl())
        assert callback.metrics is not None
        for step in range(1, 11):
            callback.on_step_begin(args, state, TrainerControl())
            state.global_step = step
            callback.on_step_end(args, state, TrainerControl())
            if step % 5 == 0:
                callback.on_log(args, state, TrainerControl(), logs={"loss": 3.0 - step / 10})
        callback.metrics.close(linger_seconds=0)
    finally:
        progress.leave_to(None, 0)
    err = capsys.readouterr().err
    if transformers_pushes:
        assert endpoint.pushes == []
        assert "progress reaches Kubeflow Trainer through transformers' KubeflowCallback" in err
    else:
        last = endpoint.accepted()[-1]  # the last step's push is always made
        assert metrics_of(last)["currentStep"] == "10" and last["progressPercentage"] == 100
        assert float(metrics_of(last)["loss"]) == pytest.approx(2.0)
        assert "KubeflowCallback" not in err


def run_api(steps: int, log_every: int, monkeypatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    metrics = TrainingMetrics(planned_steps=steps, log_every=log_every, serve=False, run_id="progress-test")
    for _ in range(steps):
        with metrics.step() as step:
            step.loss(0.5)
    metrics.close(linger_seconds=0)


def until(condition, seconds: float = 30.0) -> None:
    """Poll ``condition`` until true (generous: the machine may be loaded)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)
