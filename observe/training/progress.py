"""Rank 0's progress in ``kubectl get trainjob``: pushes to Kubeflow Trainer's status endpoint.

Kubeflow Trainer v2 (feature gate ``TrainJobStatus``) gives every container of a TrainJob's trainer
pods three variables: ``KUBEFLOW_TRAINER_SERVER_URL`` (the HTTPS URL of its controller's status
endpoint for this TrainJob), ``KUBEFLOW_TRAINER_SERVER_CA_CERT`` (the path of the CA that signs the
endpoint's certificate) and ``KUBEFLOW_TRAINER_SERVER_TOKEN`` (the path of a projected
service-account token: a JWT that rotates, so it is read again for every push, never kept). The
endpoint takes a ``POST`` of ``{"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds",
"metrics": [{"name", "value"}], "lastUpdatedTime"}}`` with ``Authorization: Bearer <token>`` and
answers 200, or a Kubernetes ``Status`` object on error (kubeflow/trainer
``docs/proposals/2779-trainjob-progress``, ``pkg/statusserver``; field limits from the TrainJob CRD:
percentage 0..100, seconds >= 0, names and values at most 64 characters, at most 256 metrics).

``window_closed`` is called once where every entry point closes a log window. On rank 0, when the
URL is set and no framework pushes itself (``leave_to``: a Hugging Face Trainer whose ``report_to``
holds transformers' ``KubeflowCallback``), it turns the window's figures into a status and hands it
to a background thread that sends it, at most every ``FSDP_OBSERVE_PROGRESS_SECONDS`` (30 s by
default) and once more for the last step; a step never waits for the network. Without the URL
nothing happens and nothing is printed. A push that fails is one line on stderr (the same failure
again is not printed again, and a push that works after failures says so once); training goes on
either way. The last push waits for its answer, at most ``TIMEOUT_SECONDS``, so the 100% reaches
the controller before the process ends.

Standard library only (``urllib`` and ``ssl``), like the rest of the core's start-up path.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
#: Seconds between two pushes (the last step's push aside): Trainer's own SDK and proposal poll
#: and push every 30 s (``ProgressionProbeIntervalSeconds``), and its endpoint rate-limits per pod.
INTERVAL_ENV = "FSDP_OBSERVE_PROGRESS_SECONDS"
DEFAULT_INTERVAL_SECONDS = 30.0
#: Seconds one push may take (connect and answer), and the longest the last step waits for it.
TIMEOUT_SECONDS = 5.0
#: The CRD's ``maxLength`` of a metric's name and of its value.
METRIC_TEXT_MAX = 64


class Stats(Protocol):
    """What ``window_closed`` reads of a window's host figures (``observe.training.window.WindowStats``)."""

    @property
    def steady_step_seconds(self) -> float | None: ...
    @property
    def tokens_per_second(self) -> float | None: ...


class Window(Protocol):
    """What ``window_closed`` reads of a closed log window (``observe.training.api.WindowReport``)."""

    @property
    def step(self) -> int: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def loss(self) -> float | None: ...
    @property
    def global_tokens_per_second(self) -> float | None: ...


@dataclass(frozen=True)
class Progress:
    """Where the run is, as one push says it.

    Attributes:
        step: the last step done (1-based). planned_steps: the step the run ends at, ``None`` when
            unknown (then no percentage and no ETA are pushed).
        steady_step_seconds: the window's mean step time without the warm-up step (what the ETA
            multiplies the steps left by), ``None`` when the window held only that step.
        figures: ``{metric name: value}``; ``None`` values are left out.
    """

    step: int
    planned_steps: int | None
    steady_step_seconds: float | None
    figures: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        """The last planned step is done."""
        return self.planned_steps is not None and self.step >= self.planned_steps

    @property
    def percentage(self) -> int | None:
        """``floor(100 * step / planned_steps)``, within 0..100; ``None`` without planned steps."""
        if not self.planned_steps:
            return None
        return max(0, min(100, 100 * self.step // self.planned_steps))

    @property
    def remaining_seconds(self) -> int | None:
        """``(planned_steps - step) * steady_step_seconds``, rounded, at least 0 (the ETA the
        reference trainer prints); ``None`` when either is unknown."""
        if self.planned_steps is None or self.steady_step_seconds is None:
            return None
        return max(0, round((self.planned_steps - self.step) * self.steady_step_seconds))


def trainer_status(progress: Progress, now: datetime | None = None) -> dict[str, Any]:
    """The body of one push: ``{"trainerStatus": {...}}`` (module docstring), known fields only.

    Metrics are ``currentStep``, ``totalSteps`` and each figure, values as strings (``%.6g``).
    """
    metrics = [{"name": "currentStep", "value": str(progress.step)}]
    if progress.planned_steps is not None:
        metrics.append({"name": "totalSteps", "value": str(progress.planned_steps)})
    metrics += [
        {"name": name[:METRIC_TEXT_MAX], "value": f"{value:.6g}"[:METRIC_TEXT_MAX]}
        for name, value in progress.figures.items()
        if value is not None
    ]
    status: dict[str, Any] = {}
    if (percentage := progress.percentage) is not None:
        status["progressPercentage"] = percentage
    if (remaining := progress.remaining_seconds) is not None:
        status["estimatedRemainingSeconds"] = remaining
    status["metrics"] = metrics
    when = now or datetime.now(timezone.utc)
    status["lastUpdatedTime"] = when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


class PushFailed(Exception):
    """A push that did not get a 200; the message is one line, without the token."""


def post(url: str, ca_file: str | None, token_file: str | None, body: dict[str, Any], timeout: float) -> None:
    """POST ``body`` as JSON to ``url`` with the bearer token read from ``token_file`` now, trusting
    the CA in ``ca_file`` (the system's when ``None``).

    Raises:
        PushFailed: no token, an unreadable file, a refused TLS handshake, no answer within
            ``timeout`` seconds, or an answer other than 200 (its ``Status`` message named).
    """
    if not token_file:
        raise PushFailed(f"{TOKEN_ENV} is not set")
    try:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        context = ssl.create_default_context(cafile=ca_file or None)
    except OSError as exc:
        raise PushFailed(f"cannot read {exc.filename} ({exc.strerror})") from None
    except ssl.SSLError as exc:
        raise PushFailed(f"the CA in {ca_file} does not load ({exc.reason or exc})") from None
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
            answer.read()
    except urllib.error.HTTPError as exc:
        raise PushFailed(f"HTTP {exc.code} {exc.reason}{_status_message(exc)}") from None
    except urllib.error.URLError as exc:
        raise PushFailed(_short(exc.reason)) from None
    except (OSError, ValueError) as exc:  # a timeout mid-answer, a malformed URL
        raise PushFailed(_short(exc)) from None


def _status_message(exc: urllib.error.HTTPError) -> str:
    """``: <message>`` of a Kubernetes ``Status`` answer, else nothing."""
    try:
        status = json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        return ""
    message = status.get("message") if isinstance(status, dict) else None
    return f": {_short(message)}" if message else ""


def _short(reason: object) -> str:
    text = str(reason).splitlines()[0] if str(reason) else type(reason).__name__
    return text[:200]


def _say(line: str) -> None:
    print(f"fsdp-observe: rank 0: {line}", file=sys.stderr, flush=True)


class Pusher:
    """Sends ``Progress`` to one endpoint from a background thread, the latest first.

    Args:
        url, ca_file, token_file: the endpoint, its CA file and the token file (module docstring).
        interval: seconds an offer waits after the last one taken (the final one never waits).
        timeout: seconds one push may take; the final offer waits that long at most.
        clock: a monotonic clock (seconds). say: prints one line (a failure, a recovery).
    """

    def __init__(
        self,
        url: str,
        ca_file: str | None,
        token_file: str | None,
        interval: float = DEFAULT_INTERVAL_SECONDS,
        timeout: float = TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] = _say,
    ) -> None:
        self.url, self.ca_file, self.token_file = url, ca_file, token_file
        self.interval, self.timeout, self._clock, self._say = interval, timeout, clock, say
        self._cond = threading.Condition()
        self._pending: tuple[dict[str, Any], threading.Event | None] | None = None
        self._last_taken: float | None = None
        self._thread: threading.Thread | None = None
        self._failure: str | None = None  # the failure printed last, until a push works
        #: Pushes answered 200, and pushes that failed.
        self.sent = 0
        self.failed = 0

    def offer(self, progress: Progress) -> bool:
        """Take ``progress`` when ``interval`` has passed since the last one taken, or when it is
        the final step's; return whether it was taken. Never waits for the network, except for a
        final step's, up to ``timeout``."""
        now = self._clock()
        if not progress.final and self._last_taken is not None and now - self._last_taken < self.interval:
            return False
        self._last_taken = now
        done = threading.Event() if progress.final else None
        with self._cond:
            self._pending = (trainer_status(progress), done)  # an older one not yet sent is replaced
            self._cond.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fsdp-observe-progress", daemon=True)
                self._thread.start()
        if done is not None:
            done.wait(self.timeout + 1.0)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None:
                    self._cond.wait()
                body, done = self._pending
                self._pending = None
            try:
                post(self.url, self.ca_file, self.token_file, body, self.timeout)
            except PushFailed as exc:
                self.failed += 1
                if str(exc) != self._failure:
                    self._failure = str(exc)
                    self._say(
                        f"progress push to {self.url} failed: {exc}; training goes on "
                        "(the same failure again is not printed)"
                    )
            except Exception as exc:  # noqa: BLE001 - a push must never end the thread or the run
                self.failed += 1
                self._failure = f"{type(exc).__name__}: {exc}"
                self._say(f"progress push to {self.url} failed: {_short(self._failure)}; training goes on")
            else:
                self.sent += 1
                if self._failure is not None:
                    self._failure = None
                    self._say(f"progress push to {self.url} works again")
            finally:
                if done is not None:
                    done.set()


_lock = threading.Lock()
#: This process's pushers, by endpoint (one in a pod; tests point runs at several).
_pushers: dict[tuple[str, str | None, str | None, float], Pusher] = {}
#: Who else pushes this process's progress (then it is left to them), or ``None``.
_left_to: str | None = None


def leave_to(other: str | None, rank: int) -> None:
    """Leave this process's pushes to ``other``, a pusher the training framework runs itself
    (transformers' ``KubeflowCallback``): two writers would overwrite each other's figures. Says so
    once, on rank 0 with Trainer's variables set. ``None`` takes the pushes back."""
    global _left_to
    if other is not None and _left_to is None and rank == 0 and os.environ.get(URL_ENV):
        _say(f"progress reaches Kubeflow Trainer through {other}; fsdp-observe does not push it too")
    _left_to = other


def pusher_from_env(rank: int, env: Mapping[str, str] | None = None) -> Pusher | None:
    """This process's ``Pusher`` for the endpoint Trainer's variables name (made on first use), on
    rank 0 when ``KUBEFLOW_TRAINER_SERVER_URL`` is set; else ``None``."""
    env = os.environ if env is None else env
    url = env.get(URL_ENV, "").strip()
    if rank != 0 or not url:
        return None
    try:
        interval = max(0.0, float(env.get(INTERVAL_ENV, "") or DEFAULT_INTERVAL_SECONDS))
    except ValueError:
        interval = DEFAULT_INTERVAL_SECONDS
    key = (url, env.get(CA_CERT_ENV) or None, env.get(TOKEN_ENV) or None, interval)
    with _lock:
        if key not in _pushers:
            _pushers[key] = Pusher(*key[:3], interval=interval)
        return _pushers[key]


def window_closed(rank: int, window: Window, planned_steps: int | None, mfu: float | None) -> None:
    """Where a log window closes (every entry point): on rank 0, with Trainer's variables set,
    offer its progress (step, planned steps, ETA, loss, tokens/s, MFU) to this process's pusher.

    Args:
        rank: this process's global rank.
        window: the closed window (``observe.training.api.WindowReport``).
        planned_steps: the step the run ends at, or ``None``.
        mfu: this rank's model FLOPs utilisation over the window (0..1), or ``None``.

    Never raises and never waits for the network (but for the last step's push, see ``Pusher``).
    """
    if rank != 0 or _left_to is not None or not os.environ.get(URL_ENV):
        return
    try:
        pusher = pusher_from_env(rank)
        if pusher is None:
            return
        tokens = window.global_tokens_per_second
        figures = {
            "loss": window.loss,
            "tokens_per_second": tokens,  # every rank's, summed
            "rank0_tokens_per_second": window.stats.tokens_per_second if tokens is None else None,
            "mfu": mfu,
        }
        pusher.offer(Progress(window.step, planned_steps, window.stats.steady_step_seconds, figures))
    except Exception as exc:  # noqa: BLE001 - progress never stops training
        _say(f"progress push skipped ({type(exc).__name__}: {_short(exc)})")
