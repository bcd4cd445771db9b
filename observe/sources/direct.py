"""Pull node agents' ``/snapshot`` and trainer ranks' ``/metrics`` directly: the bounded fan-in.

One refresh (``DirectSource.cycle``) sends every request through ``HttpFetcher`` from a fixed
pool of workers (at most ``concurrency`` in flight, each with its own timeout), decodes each
answer as it arrives (small
pieces: about 0.2 ms for a summary snapshot), and stops at the refresh's deadline: whatever has
not answered by then keeps its previous data and is marked ``slow``. Agents are asked for their
summary view (``/snapshot?view=summary``, no process lists); only the node in focus (the one the
Node screen shows) is asked for its full snapshot. A failed pull never throws away a node's last
good data: the node shows it with its age and the reason.

The source is stateful (the last good data per endpoint, the loss history per run) and must be
used from one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from urllib.parse import urlsplit

from observe.diagnosis import Unreached
from observe.errors import UserError
from observe.model import NodeSnapshot
from observe.sources.http import FetchError, HttpFetcher
from observe.sources.summary import read_summary
from observe.sources.trainer import parse_exposition, ranks_from_samples
from observe.sources.verdicts import REASONS, GpuIndex, run_verdict
from observe.sources.view import DEADLINE_MISSED, ClusterSnapshot, NodeStatus, RankStatus, RunStatus, node_status

#: Points of loss history kept per run.
LOSS_HISTORY_POINTS = 600


@dataclass(frozen=True)
class Endpoint:
    """Where to pull one agent or one trainer rank.

    Attributes:
        url: base URL (``http://10.0.3.7:9401``); for a trainer, its ``/metrics`` URL or base URL.
        node: the node name when known beforehand (Kubernetes discovery), else ``None``.
    """

    url: str
    node: str | None = None


#: A host name or IPv4 address (RFC 1123 labels), or an IPv6 address (urlsplit drops its brackets).
_HOST = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?"
    r"|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.%A-Za-z]*"
)
#: Names of this machine's loopback interface, one of which stands for all when URLs are compared.
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})


def check_url(url: str, flag: str, where: str = "") -> None:
    """Refuse what cannot be an agent or trainer address.

    Args:
        url: what was given. flag: the flag it came with (the error's field).
        where: where it came from, for the message (``nodes.txt line 3: ``).

    Raises:
        UserError: not ``host:port`` or an ``http(s)://`` URL with a host name or IP address.
    """
    try:  # urlsplit itself refuses an unclosed IPv6 bracket ("http://[bad")
        parts = urlsplit(url if "://" in url else f"http://{url}")
    except ValueError:
        raise UserError(flag, f"{where}{url!r} is not an address", "give host:port or http://host:port") from None
    try:
        port_ok = parts.port is None or 0 < parts.port < 65536
    except ValueError:
        port_ok = False
    host_ok = bool(parts.hostname) and _HOST.fullmatch(parts.hostname or "") is not None
    if parts.scheme not in ("http", "https") or not host_ok or not port_ok:
        raise UserError(flag, f"{where}{url!r} is not an address", "give host:port or http://host:port")


def same_endpoint_key(url: str) -> tuple[str, str, int | None, str]:
    """What two spellings of one endpoint share: scheme, host (lower case; every loopback name
    as ``127.0.0.1``), port (the scheme's default filled in) and path without a trailing ``/``.
    ``localhost:9401`` and ``http://127.0.0.1:9401/`` have the same key."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    host = (parts.hostname or "").lower().rstrip(".")
    host = "127.0.0.1" if host in _LOOPBACK else host
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        port = None
    return parts.scheme, host, port, parts.path.rstrip("/")


def normalise_url(url: str, path: str) -> str:
    """``url`` with ``http://`` added when it has no scheme, and ``path`` appended unless present."""
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    base = url.rstrip("/")
    return base if base.endswith(path) else base + path


class LossHistory:
    """``(step, loss)`` points per run: one per log window, whatever the refresh rate.

    The loss gauge changes only when a log window closes, so a point is added when the window's
    figures (``RankStatus.window_key``) differ from the last point's, at the run's step then.
    """

    def __init__(self, points: int = LOSS_HISTORY_POINTS) -> None:
        self._runs: dict[str, deque[tuple[float, float]]] = {}
        self._keys: dict[str, tuple[object, ...]] = {}
        self._points = points

    def add(
        self, run_id: str, step: float | None, loss: float | None, window: tuple[object, ...] | None = None
    ) -> tuple[tuple[float, float], ...]:
        """Record the run's loss at ``step`` if ``window`` (default: the loss itself) is new since
        the last point and the step moved on; return the history, oldest first."""
        history = self._runs.setdefault(run_id, deque(maxlen=self._points))
        key = (loss,) if window is None else window
        if (
            step is not None
            and loss is not None
            and (not history or (history[-1][0] < step and self._keys.get(run_id) != key))
        ):
            history.append((step, loss))
            self._keys[run_id] = key
        return tuple(history)


#: Seconds of step observations the ETA's rate is taken over (``StepRate``).
STEP_RATE_SECONDS = 120.0


class StepRate:
    """The seconds per step each run has been making, from the steps it reported and when they ended.

    Each refresh adds the run's step and that step's end time (``fsdp_train_last_step_timestamp_seconds``
    of the slowest rank); the rate is the time between the oldest and the newest point of the
    last ``STEP_RATE_SECONDS`` divided by the steps between them. The first point is the end of a
    step, so the warm-up of the process's first step (seconds on a CPU, minutes with compilation)
    never enters the rate, as it did when the ETA was read off the step-1 log window (an ETA of
    8:39 for a 97 s run). A step that goes backwards (a restart resuming from a checkpoint) starts over.
    """

    def __init__(self, seconds: float = STEP_RATE_SECONDS) -> None:
        self._runs: dict[str, deque[tuple[float, float]]] = {}
        self._seconds = seconds

    def add(self, run_id: str, step: float | None, ended_unix: float | None) -> float | None:
        """Record that ``run_id`` had finished ``step`` at ``ended_unix``; return its seconds per
        step (``None`` until two different steps were seen)."""
        points = self._runs.setdefault(run_id, deque())
        if step is not None and ended_unix is not None:
            if points and step < points[-1][0]:
                points.clear()
            if not points or step > points[-1][0]:
                points.append((step, ended_unix))
            while len(points) > 2 and points[-1][1] - points[1][1] >= self._seconds:
                points.popleft()
        if len(points) < 2:
            return None
        (s0, t0), (s1, t1) = points[0], points[-1]
        return max(0.0, t1 - t0) / (s1 - s0)


def build_runs(
    ranks: list[RankStatus],
    history: LossHistory,
    rates: StepRate | None = None,
    now: float | None = None,
    unreached: Sequence[Unreached] = (),
    gpu_index: GpuIndex | None = None,
) -> tuple[RunStatus, ...]:
    """Group ranks into runs (sorted by run id, ranks by rank), extend each run's loss history
    (one point per log window: the window figures of the lowest rank that has them) and, with
    ``rates``, its observed seconds per step (``StepRate``: what the ETA uses). With ``now``, each
    run gets its verdict (``observe.sources.verdicts.run_verdict``); ``unreached`` (endpoints
    that never answered, so of no known run) go with the run when there is exactly one, and join
    its ranks (as ``slow`` or ``unreachable``) when the verdict can tell their rank."""
    by_run: dict[str, list[RankStatus]] = {}
    for rank in ranks:
        by_run.setdefault(rank.run_id, []).append(rank)
    runs = []
    for run_id in sorted(by_run):
        members = tuple(sorted(by_run[run_id], key=lambda r: r.rank))
        run = RunStatus(run_id, members)
        window = next((r.window_key for r in members if r.loss is not None), None)
        run = replace(run, loss_history=history.add(run_id, run.step, run.loss, window))
        if rates is not None:
            slowest = min((r for r in members if r.step is not None), key=lambda r: r.step or 0.0, default=None)
            per_step = rates.add(run_id, run.step, slowest.last_step_unix if slowest is not None else None)
            run = replace(run, seconds_per_step=per_step)
        if now is not None:
            lost = unreached if len(by_run) == 1 else ()
            verdict, stand_ins = run_verdict(members, now, lost, gpu_index)
            if stand_ins:
                members = tuple(sorted((*members, *stand_ins), key=lambda r: r.rank))
            run = replace(run, ranks=members, verdict=verdict)
        runs.append(run)
    return tuple(runs)


def gpu_indexes(nodes: Sequence[NodeStatus]) -> GpuIndex:
    """``(node, gpu_uuid) -> NVML index`` over the agents' latest data (``None`` when unknown)."""
    by_node = {n.name: n.gpu_uuids for n in nodes if n.figures is not None}

    def index(node: str, uuid: str | None) -> int | None:
        return by_node.get(node, {}).get(uuid) if uuid else None

    return index


class DirectSource:
    """Agents and trainer ranks pulled over HTTP.

    Args:
        agents: node agents (base URLs; ``/snapshot`` is added).
        trainers: trainer ranks (``/metrics`` is added when missing).
        concurrency: requests in flight at most. timeout: seconds per request.
        run_id: follow this run only: an endpoint that answers with another run's series (another
            process on the port) is an error line, never shown as the run.
    """

    def __init__(
        self,
        agents: list[Endpoint],
        trainers: list[Endpoint],
        concurrency: int = 64,
        timeout: float = 1.5,
        run_id: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.fetcher = HttpFetcher(concurrency=concurrency, timeout=timeout)
        self._nodes: dict[str, NodeStatus] = {}
        self._ranks: dict[str, list[RankStatus]] = {}
        self._trainer_errors: dict[str, tuple[str, str]] = {}
        self._history = LossHistory()
        self._rates = StepRate()
        self.errors: tuple[str, ...] = ()
        self.set_endpoints(agents, trainers)

    def set_endpoints(self, agents: list[Endpoint], trainers: list[Endpoint]) -> None:
        """Replace the endpoints (after a new discovery); data of endpoints kept is kept. Two
        spellings of one endpoint (``same_endpoint_key``) are pulled once."""
        self.agents = _unique([replace(e, url=normalise_url(e.url, "")) for e in agents])
        self.trainers = _unique([replace(e, url=normalise_url(e.url, "/metrics")) for e in trainers])
        keep = {e.url for e in self.agents}
        self._nodes = {url: status for url, status in self._nodes.items() if url in keep}
        for e in self.agents:
            self._nodes.setdefault(e.url, NodeStatus(name=e.node or _host(e.url), source=e.url))
        keep = {e.url for e in self.trainers}
        self._ranks = {url: ranks for url, ranks in self._ranks.items() if url in keep}

    @property
    def description(self) -> str:
        """``N agents, M trainer ranks``."""
        return (
            f"{len(self.agents)} agent{'s' * (len(self.agents) != 1)}, {len(self.trainers)} trainer endpoint"
            f"{'s' * (len(self.trainers) != 1)}"
        )

    async def cycle(self, focus: str | None, deadline: float) -> ClusterSnapshot:
        """Pull everything once, for at most ``deadline`` seconds; return what arrived.

        Args:
            focus: name of the node whose full snapshot to fetch (the others: summaries).
            deadline: seconds this refresh may take; pulls still running then are cancelled.
        """
        started = time.monotonic()
        end = started + deadline
        agents = ((e, focus is not None and focus in (e.node, self._nodes[e.url].name)) for e in self.agents)
        jobs = itertools.chain(
            (partial(self._pull_agent, e, full, end) for e, full in agents),
            (partial(self._pull_trainer, e, end) for e in self.trainers),
        )
        await self._run_pool(jobs, len(self.agents) + len(self.trainers), end)
        ranks = [r for url in (e.url for e in self.trainers) for r in self._ranks.get(url, [])]
        errors = [f"trainer {url}: {kind}: {reason}" for url, (kind, reason) in self._trainer_errors.items()]
        nodes, duplicates = self._distinct_nodes()
        now = time.time()
        where = {e.url: e.node or "" for e in self.trainers}
        unreached = [
            Unreached(url, REASONS.get(kind, "error"), reason, node=where.get(url, ""))
            for url, (kind, reason) in self._trainer_errors.items()
            # a malformed answer is no rank of the run (another process, say); a refresh that ran
            # out of time before an address answered says nothing of it
            if kind in REASONS and reason != DEADLINE_MISSED
        ]
        return ClusterSnapshot(
            time_unix=now,
            source=self.description,
            nodes=nodes,
            runs=build_runs(ranks, self._history, self._rates, now, unreached, gpu_indexes(nodes)),
            focus=focus,
            cycle_seconds=time.monotonic() - started,
            errors=(*self.errors, *errors, *duplicates),
            trainers=len(self.trainers),
        )

    async def _run_pool(self, jobs: Iterator[Callable[[], Awaitable[None]]], count: int, end: float) -> None:
        """Run the ``count`` ``jobs`` with at most ``fetcher.concurrency`` at once, until the monotonic
        time ``end``; each job is made only when a worker takes it.

        A fixed pool of workers takes the jobs in order, rather than one task per endpoint: at
        4,096 nodes one task each was some 40,000 live coroutines, tasks, futures and contexts per
        refresh, all walked by every full garbage collection, which holds the GIL and stalled the
        UI thread for up to 96 ms (``benchmarks/tui_fanin.py``). A job still running at ``end`` is
        cancelled (its pull marks the endpoint ``slow``); a job not started by then is started
        already cancelled, so it marks its endpoint ``slow`` the same way.
        """

        async def worker() -> None:
            for job in jobs:
                await job()

        workers = [asyncio.ensure_future(worker()) for _ in range(min(count, self.fetcher.concurrency))]
        if not workers:
            return
        _, pending = await asyncio.wait(workers, timeout=max(0.0, end - time.monotonic()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for job in jobs:  # not started before the deadline: each says so without a request
            await job()

    def _distinct_nodes(self) -> tuple[tuple[NodeStatus, ...], list[str]]:
        """Every agent's node, but a node that a second URL also answers for only once (the same
        agent given under two names: ``myhost:9401`` and ``10.0.0.5:9401``); an error says so."""
        nodes: list[NodeStatus] = []
        first_url: dict[str, str] = {}
        duplicates = []
        for e in self.agents:
            status = self._nodes[e.url]
            if status.figures is not None and status.name in first_url:
                duplicates.append(
                    f"agent {e.url} answers as node {status.name}, the same as {first_url[status.name]}: shown once"
                )
                continue
            if status.figures is not None:
                first_url[status.name] = e.url
            nodes.append(status)
        return tuple(nodes), duplicates

    async def _pull_agent(self, endpoint: Endpoint, full: bool, end: float) -> None:
        url = endpoint.url + ("/snapshot" if full else "/snapshot?view=summary")
        previous = self._nodes[endpoint.url]
        try:
            body = await self.fetcher.get(url, timeout=min(self.fetcher.timeout, end - time.monotonic()))
        except asyncio.CancelledError:
            self._nodes[endpoint.url] = replace(previous, state="slow", error=DEADLINE_MISSED, checked_unix=time.time())
            raise
        except FetchError as exc:
            self._nodes[endpoint.url] = replace(previous, state=exc.kind, error=str(exc), checked_unix=time.time())
            return
        self._nodes[endpoint.url] = decode_node(previous, body, time.time(), keep=full)

    async def _pull_trainer(self, endpoint: Endpoint, end: float) -> None:
        url = endpoint.url
        try:
            body = await self.fetcher.get(url, timeout=min(self.fetcher.timeout, end - time.monotonic()))
            ranks = ranks_from_samples(parse_exposition(body.decode("utf-8", "replace")), url, time.time())
            if not ranks:
                raise FetchError("malformed", "no fsdp_train_* series with a rank label")
            if self.run_id is not None:
                others = sorted({r.run_id for r in ranks} - {self.run_id})
                ranks = [r for r in ranks if r.run_id == self.run_id]
                if not ranks:
                    raise FetchError(
                        "malformed",
                        f"answers for run {others[0]!r}, not {self.run_id!r}: another process holds this port",
                    )
        except asyncio.CancelledError:
            self._mark_ranks(url, "slow", DEADLINE_MISSED)
            raise
        except FetchError as exc:
            self._mark_ranks(url, exc.kind, str(exc))
            return
        except ValueError as exc:
            self._mark_ranks(url, "malformed", f"not Prometheus text ({exc})")
            return
        self._ranks[url] = ranks
        self._trainer_errors.pop(url, None)

    def _mark_ranks(self, url: str, state: str, error: str) -> None:
        """A failed pull: known ranks keep their last figures with the failure; a rank that said
        ``finished`` before is ``finished`` (its exporter's linger ended), not a failure."""
        if url in self._ranks:
            self._ranks[url] = [
                replace(r, state="finished", error=None) if r.finished else replace(r, state=state, error=error)
                for r in self._ranks[url]
            ]
        else:
            self._trainer_errors[url] = (state, error)

    def close(self) -> None:
        """Close the kept-alive connections."""
        self.fetcher.close()


def decode_node(previous: NodeStatus, body: bytes, now: float, keep: bool) -> NodeStatus:
    """A node's status after its agent answered ``body`` at ``now`` (``observe.sources.view.node_status``);
    ``malformed`` keeps the previous data (shown with its age). ``keep``: keep the whole snapshot
    (else the answer is read without building one: ``observe.sources.summary``)."""
    try:
        snapshot = NodeSnapshot.from_json(body) if keep else read_summary(body)
        return node_status(previous.name, previous.source, snapshot, now, keep)
    except RecursionError:  # json.loads of an answer nested deeper than the interpreter's stack
        return replace(previous, state="malformed", error="not a snapshot: nested too deeply", checked_unix=now)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:  # JSON, shape or schema errors
        reason = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        return replace(previous, state="malformed", error=f"not a snapshot: {reason}", checked_unix=now)


def _unique(endpoints: list[Endpoint]) -> list[Endpoint]:
    """``endpoints`` without later spellings of an endpoint already listed (``same_endpoint_key``)."""
    seen: set[tuple[str, str, int | None, str]] = set()
    out = []
    for e in endpoints:
        key = same_endpoint_key(e.url)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _host(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]
