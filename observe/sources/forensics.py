"""Gathering the ranks' hang and straggler evidence for ``observe.diagnosis``: from the ranks themselves
(their ``/debug/state`` pages, in parallel, each with a timeout) or from Prometheus (the forensics
series every rank exports; no stacks there).

A rank that does not answer is kept as ``Unreached`` with why: ``refused`` (nothing listens: its
process is gone), ``timeout`` (the connection was accepted but no answer came: its process is alive
and its Python threads do not run), ``error`` otherwise.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

from observe import catalog as c
from observe.diagnosis import Collective, Group, RankEvidence, Unreached, from_state
from observe.promapi import PrometheusAPI
from observe.promql import string
from observe.sources.http import FetchError, HttpFetcher

#: Seconds to wait for a rank's ``/debug/state``: a rank blocked in a collective answers in
#: milliseconds; one that has not answered in this time is not going to (its GIL is held).
STATE_TIMEOUT = 5.0
STATE_PATH = "/debug/state"
#: How far back Prometheus is asked for ranks that have since gone (their last ``fsdp_train_info``).
GONE_LOOKBACK = "15m"


def state_url(url: str) -> str:
    """A rank's ``/debug/state`` URL from its base or ``/metrics`` URL."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    path = parts.path.rstrip("/")
    if path.endswith("/metrics"):
        path = path[: -len("/metrics")]
    return urlunsplit((parts.scheme, parts.netloc, path + STATE_PATH, "", ""))


async def _one(fetcher: HttpFetcher, url: str) -> RankEvidence | Unreached:
    try:
        body = await fetcher.get(state_url(url))
    except FetchError as exc:
        reason = {"slow": "timeout", "unreachable": "refused"}.get(exc.kind, "error")
        return Unreached(url, reason, str(exc))
    try:
        return from_state(json.loads(body))
    except ValueError as exc:
        return Unreached(url, "error", f"not a /debug/state answer ({exc}); is collective tracking off?")


async def fetch_state(url: str, timeout: float = STATE_TIMEOUT) -> RankEvidence | Unreached:
    """One rank's ``/debug/state`` (``url``: its base or ``/metrics`` URL), asked once: what the
    TUI's rank view shows on Enter. A rank that does not answer is ``Unreached`` with why
    (``timeout``: its process is alive and its Python threads do not run; ``refused``: gone)."""
    fetcher = HttpFetcher(concurrency=1, timeout=timeout)
    try:
        return await _one(fetcher, url)
    finally:
        fetcher.close()


async def gather_direct(
    urls: Sequence[str], timeout: float = STATE_TIMEOUT
) -> tuple[list[RankEvidence], list[Unreached]]:
    """Ask every rank at ``urls`` for its ``/debug/state`` at once; return who answered and who did not."""
    fetcher = HttpFetcher(concurrency=256, timeout=timeout)
    try:
        results = await asyncio.gather(*(_one(fetcher, u) for u in urls))
    finally:
        fetcher.close()
    ranks = [r for r in results if isinstance(r, RankEvidence)]
    return ranks, [r for r in results if isinstance(r, Unreached)]


def by_run(ranks: Sequence[RankEvidence]) -> dict[str, list[RankEvidence]]:
    """The ranks grouped by ``run_id``, each group sorted by rank."""
    runs: dict[str, list[RankEvidence]] = defaultdict(list)
    for r in ranks:
        runs[r.run_id].append(r)
    return {k: sorted(v, key=lambda r: r.rank) for k, v in sorted(runs.items())}


# -- Prometheus ------------------------------------------------------------------------------------

_SERIES = (
    c.TRAIN_INFO,
    c.TRAIN_STEP,
    c.TRAIN_PHASE,
    c.TRAIN_STATE,
    c.TRAIN_COLLECTIVES_ENQUEUED,
    c.TRAIN_COLLECTIVES_COMPLETED,
    c.TRAIN_COLLECTIVE_BLOCKED_SECONDS,
    c.TRAIN_COLLECTIVE_WAITING,
    c.TRAIN_WINDOW_COMPUTE_SECONDS,
    c.TRAIN_WINDOW_COLLECTIVE_WAIT_SECONDS,
    c.TRAIN_WINDOW_STEP_SECONDS,
    c.TRAIN_STALLED,
    c.TRAIN_LAST_STEP_TIMESTAMP,
)


def gather_prometheus(
    api: PrometheusAPI, run_id: str | None = None, at: float | None = None
) -> tuple[list[RankEvidence], list[Unreached]]:
    """The ranks' evidence from Prometheus at ``at`` (default now): what the forensics series say
    (no stacks, no shapes). A rank whose ``fsdp_train_info`` was seen in the last ``GONE_LOOKBACK``
    but has no series now is ``Unreached`` (``error``: its scrapes fail), with its pod and node.

    Raises:
        PrometheusError: Prometheus is unreachable or a query failed.
    """
    at = time.time() if at is None else at
    run = f",run_id={string(run_id)}" if run_id else ""
    names = "|".join(sorted(m.name for m in _SERIES))
    _, now = api.query(f'{{__name__=~"{names}"{run}}}', at)
    _, seen = api.query(f'last_over_time({c.TRAIN_INFO.name}{{run_id!=""{run}}}[{GONE_LOOKBACK}])', at)
    fields: dict[tuple[str, int], dict] = defaultdict(lambda: {"groups": {}, "enqueued": {}, "completed": {}})
    for sample in now:
        labels, value = sample["metric"], float(sample["value"][1])
        try:
            key = (labels.get("run_id", ""), int(labels["rank"]))
        except (KeyError, ValueError):
            continue
        f = fields[key]
        f.setdefault("labels", labels)
        _take(f, labels, value)
    ranks = [_evidence(key, f, at) for key, f in sorted(fields.items())]
    unreached = []
    for sample in seen:
        labels = sample["metric"]
        try:
            key = (labels.get("run_id", ""), int(labels["rank"]))
        except (KeyError, ValueError):
            continue
        if key not in fields:
            address = labels.get("pod") or labels.get("instance") or f"rank {key[1]}"
            unreached.append(
                Unreached(
                    address,
                    "error",
                    "no series now: Prometheus' scrapes of it fail",
                    key[1],
                    labels.get("node", ""),
                    labels.get("pod", ""),
                )
            )
    return ranks, unreached


def _take(f: dict, labels: dict[str, str], value: float) -> None:
    name = labels.get("__name__", "")
    if name == c.TRAIN_INFO.name:
        f["world_size"] = labels.get("world_size")
    elif name == c.TRAIN_STEP.name:
        f["step"] = int(value)
    elif name == c.TRAIN_PHASE.name and value == 1:
        f["phase"] = labels.get("phase", "training")
    elif name == c.TRAIN_STATE.name and value == 1:
        f["state"] = labels.get("state", "computing")
    elif name == c.TRAIN_COLLECTIVES_ENQUEUED.name:
        f["enqueued"][labels.get("pg", "")] = int(value)
    elif name == c.TRAIN_COLLECTIVES_COMPLETED.name:
        f["completed"][labels.get("pg", "")] = int(value)
    elif name == c.TRAIN_COLLECTIVE_BLOCKED_SECONDS.name:
        f["blocked_seconds"] = value
    elif name == c.TRAIN_COLLECTIVE_WAITING.name:
        f["blocked"] = Collective(labels.get("pg", ""), int(value), labels.get("op"))
    elif name == c.TRAIN_WINDOW_COMPUTE_SECONDS.name:
        f["compute"] = value
    elif name == c.TRAIN_WINDOW_COLLECTIVE_WAIT_SECONDS.name:
        f["wait"] = value
    elif name == c.TRAIN_WINDOW_STEP_SECONDS.name:
        f["step_seconds"] = value
    elif name == c.TRAIN_STALLED.name:
        f["stalled"] = value == 1
    elif name == c.TRAIN_LAST_STEP_TIMESTAMP.name:
        f["last_step_unix"] = value


def _evidence(key: tuple[str, int], f: dict, at: float) -> RankEvidence:
    labels = f.get("labels", {})
    groups = {pg: Group(n, f["completed"].get(pg, 0)) for pg, n in f["enqueued"].items()}
    stalled = bool(f.get("stalled"))
    last = f.get("last_step_unix")
    try:
        world = int(f["world_size"]) if f.get("world_size") else None
    except ValueError:
        world = None
    return RankEvidence(
        rank=key[1],
        world_size=world,
        run_id=key[0],
        node=labels.get("node", ""),
        pod=labels.get("pod", ""),
        local_rank=int(labels["local_rank"]) if labels.get("local_rank", "").isdigit() else None,
        gpu_uuid=labels.get("gpu_uuid") or None,
        phase=f.get("phase", "training"),
        state=f.get("state", "computing"),
        step=f.get("step", 0),
        groups=groups,
        last_issued={},
        blocked=f.get("blocked"),
        blocked_seconds=f.get("blocked_seconds", 0.0),
        stalled=stalled,
        stalled_seconds=at - last if stalled and last else None,
        compute_seconds=f.get("compute"),
        wait_seconds=f.get("wait"),
        step_seconds=f.get("step_seconds"),
    )
