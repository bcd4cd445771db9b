"""Prometheus' HTTP API: a minimal client, and the TUI source that reads a whole cluster from it.

For large clusters the TUI asks Prometheus (which already scrapes every agent and rank) instead of
every node: one refresh is a handful of instant queries whatever the node count, each selecting
the series it needs by name (names from ``observe.catalog``). What cannot come from counters is
said so: XID "events" are the last hour's increase of ``fsdp_gpu_xid_errors_total`` per GPU and
code (a series that appeared within the hour counts whole), with the time of the refresh; a
node's processes (the Node screen) come from the ``--process-series`` busiest processes each
agent exports. API:
https://prometheus.io/docs/prometheus/latest/querying/api/
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import replace

from observe import catalog as c
from observe.model import (
    AgentHealth,
    CpuStats,
    GpuInfo,
    GpuProcess,
    HostStats,
    MemoryStats,
    NodeSnapshot,
    ProcessInfo,
    XidEvent,
)
from observe.promapi import PrometheusAPI, PrometheusError
from observe.promql import names_regex
from observe.promql import string as promql_string
from observe.promtext import Sample
from observe.sources.direct import LossHistory, StepRate, build_runs, gpu_indexes
from observe.sources.trainer import SAMPLE_NAMES as TRAINER_SAMPLES
from observe.sources.trainer import ranks_from_samples
from observe.sources.view import ClusterSnapshot, NodeStatus, RankStatus, node_status
from observe.xid import lookup

#: Node-level gauge -> (section, field) of the snapshot the source builds.
_NODE: dict[str, tuple[str, str]] = {
    c.NODE_CPU_BUSY.name: ("cpu", "busy_ratio"),
    c.NODE_MEMORY_TOTAL.name: ("memory", "total_bytes"),
    c.NODE_MEMORY_USED.name: ("memory", "used_bytes"),
    c.NODE_MEMORY_AVAILABLE.name: ("memory", "available_bytes"),
    c.NODE_SWAP_TOTAL.name: ("memory", "swap_total_bytes"),
    c.NODE_SWAP_USED.name: ("memory", "swap_used_bytes"),
    c.NODE_LOAD1.name: ("host", "load1"),
    c.NODE_LOAD5.name: ("host", "load5"),
    c.NODE_LOAD15.name: ("host", "load15"),
    c.NODE_UPTIME.name: ("host", "uptime_seconds"),
    c.NODE_THREADS.name: ("host", "threads"),
}
_NODE_EXTRA = (c.NODE_PROCESSES.name, c.AGENT_LAST_COLLECTION.name, c.AGENT_UP.name)
#: GPU gauge -> ``GpuInfo`` field.
_GPU: dict[str, str] = {
    c.GPU_UTILIZATION.name: "utilization_ratio",
    c.GPU_MEMORY_UTILIZATION.name: "memory_utilization_ratio",
    c.GPU_MEMORY_TOTAL.name: "memory_total_bytes",
    c.GPU_MEMORY_USED.name: "memory_used_bytes",
    c.GPU_TEMPERATURE.name: "temperature_celsius",
    c.GPU_POWER.name: "power_watts",
    c.GPU_POWER_LIMIT.name: "power_limit_watts",
    c.GPU_SM_CLOCK.name: "sm_clock_hertz",
    c.GPU_FAN_SPEED.name: "fan_speed_ratio",
    c.GPU_PCIE_RX.name: "pcie_rx_bytes_per_second",
    c.GPU_PCIE_TX.name: "pcie_tx_bytes_per_second",
}
_GPU_EXTRA = (
    c.GPU_INFO.name,
    c.GPU_LOST.name,
    c.GPU_READING_STALE.name,
    c.GPU_UNREADABLE.name,
    c.GPU_MIG_MODE.name,
    c.GPU_CLOCK_THROTTLE.name,
)
#: ``unreadable`` of a GPU read from Prometheus, which holds the flag but not the agent's reason.
UNREADABLE_IN_PROMETHEUS = "its NVML calls fail (the reason is in the agent's /snapshot)"
_INT_FIELDS = {
    "total_bytes",
    "used_bytes",
    "available_bytes",
    "swap_total_bytes",
    "swap_used_bytes",
    "threads",
    "memory_total_bytes",
    "memory_used_bytes",
}


def _value(series: dict) -> float:
    return float(series["value"][1])


def build_nodes(
    node_series: list[dict], gpu_series: list[dict], xid_series: list[dict], now: float
) -> dict[str, NodeSnapshot]:
    """Node snapshots (summary view) from instant-query results of agent series, by node name."""
    sections: dict[str, dict[str, dict]] = defaultdict(lambda: {"cpu": {}, "memory": {}, "host": {}})
    extra: dict[str, dict] = defaultdict(lambda: {"by_state": {}, "time": None, "sources": {}})
    for s in node_series:
        name, node = s["metric"].get("__name__"), s["metric"].get("node", "")
        value = _value(s)
        if name in _NODE:
            section, field = _NODE[name]
            sections[node][section][field] = int(value) if field in _INT_FIELDS else value
        elif name == c.NODE_PROCESSES.name:
            extra[node]["by_state"][s["metric"].get("state", "other")] = int(value)
        elif name == c.AGENT_LAST_COLLECTION.name:
            extra[node]["time"] = value
        elif name == c.AGENT_UP.name:
            extra[node]["sources"][s["metric"].get("source", "")] = "ok" if value == 1 else "down"
    gpus: dict[str, dict[int, dict]] = defaultdict(dict)
    for s in gpu_series:
        labels, name = s["metric"], s["metric"].get("__name__")
        try:
            index = int(labels.get("gpu", ""))
        except ValueError:
            continue
        gpu = gpus[labels.get("node", "")].setdefault(index, {"index": index, "uuid": labels.get("gpu_uuid") or None})
        value = _value(s)
        if name in _GPU:
            gpu[_GPU[name]] = int(value) if _GPU[name] in _INT_FIELDS else value
        elif name == c.GPU_INFO.name:
            gpu.update(
                name=labels.get("name") or None,
                pci_bus=labels.get("pci_bus") or None,
                driver_version=labels.get("driver_version") or None,
            )
        elif name == c.GPU_LOST.name:
            gpu["lost"] = value == 1
        elif name == c.GPU_READING_STALE.name:
            gpu["stale"] = value == 1
        elif name == c.GPU_UNREADABLE.name:
            gpu["unreadable"] = UNREADABLE_IN_PROMETHEUS if value == 1 else None
        elif name == c.GPU_MIG_MODE.name:
            gpu["mig_enabled"] = value == 1
        elif name == c.GPU_CLOCK_THROTTLE.name:
            reasons = gpu.setdefault("throttle_reasons", ())
            if value == 1:
                gpu["throttle_reasons"] = (*reasons, labels.get("reason", ""))
    xids: dict[str, list[XidEvent]] = defaultdict(list)
    for s in xid_series:
        labels = s["metric"]
        try:
            code = int(labels.get("xid", ""))
        except ValueError:
            continue
        info, count = lookup(code), _value(s)
        gpu = labels.get("gpu", "")
        xids[labels.get("node", "")].append(
            XidEvent(
                xid=code,
                name=info.name,
                severity=labels.get("severity") or info.severity,
                action=info.action,
                node=labels.get("node", ""),
                gpu=int(gpu) if gpu.isdigit() else None,
                gpu_uuid=labels.get("gpu_uuid") or None,
                pci_bus=labels.get("pci_bus") or None,
                time_unix=now,
                source="prometheus",
                message=f"{count:.0f} in the last hour ({c.GPU_XID_ERRORS.name})",
            )
        )
    nodes = {}
    for node in set(sections) | set(gpus):
        sec, ext = sections[node], extra[node]
        host = HostStats(
            cpu=CpuStats(**sec["cpu"]),
            memory=MemoryStats(**sec["memory"]),
            processes=sum(ext["by_state"].values()),
            processes_by_state=ext["by_state"],
            **sec["host"],
        )
        nodes[node] = NodeSnapshot(
            node=node,
            time_unix=ext["time"] or now,
            host=host,
            gpus=tuple(GpuInfo(**gpus[node][i]) for i in sorted(gpus[node])),
            xid_events=tuple(xids[node]),
            agent=AgentHealth(sources=ext["sources"]),
            view="summary",
        )
    return nodes


class PrometheusSource:
    """The cluster as Prometheus sees it.

    Args:
        url: Prometheus' base URL. timeout: seconds per query.
        history_seconds: how far back the loss history reaches.
    """

    def __init__(self, url: str, timeout: float = 10.0, history_seconds: float = 3600.0) -> None:
        self.url = url
        self.api = PrometheusAPI(url, timeout=timeout)
        self.history_seconds = history_seconds
        self._nodes: dict[str, NodeStatus] = {}
        self._history = LossHistory()
        self._rates = StepRate()
        self._last: dict[tuple[str, int], RankStatus] = {}

    @property
    def description(self) -> str:
        """``prometheus URL``."""
        return f"prometheus {self.url}"

    async def cycle(self, focus: str | None, deadline: float) -> ClusterSnapshot:
        """One refresh: the queries run in a worker thread, bounded by ``deadline``."""
        started = time.monotonic()
        try:
            snapshot = await asyncio.wait_for(asyncio.to_thread(self._read, focus), deadline)
        except (PrometheusError, asyncio.TimeoutError) as exc:
            reason = str(exc) or f"no answer within {deadline:.1f} s"
            nodes = tuple(
                replace(
                    n,
                    state="unreachable" if isinstance(exc, PrometheusError) else "slow",
                    error=f"Prometheus: {reason}",
                )
                for n in self._nodes.values()
            )
            return ClusterSnapshot(
                time_unix=time.time(),
                source=self.description,
                nodes=nodes,
                focus=focus,
                cycle_seconds=time.monotonic() - started,
                errors=(f"prometheus: {reason}",),
                trainers=None,
            )
        return replace(snapshot, cycle_seconds=time.monotonic() - started)

    def _read(self, focus: str | None) -> ClusterSnapshot:
        now = time.time()
        api = self.api
        node_names = [*_NODE, *_NODE_EXTRA]
        _, node_series = api.query(names_regex(node_names), now)
        _, gpu_series = api.query(names_regex([*_GPU, *_GPU_EXTRA]), now)
        xid = c.GPU_XID_ERRORS.name  # a series born within the hour counts whole (increase() skips its start)
        _, xid_series = api.query(f"(increase({xid}[1h]) > 0) or ({xid} unless {xid} offset 1h)", now)
        _, trainer_series = api.query(names_regex(TRAINER_SAMPLES), now)
        snapshots = build_nodes(node_series, gpu_series, xid_series, now)
        if focus in snapshots:
            snapshots[focus] = self._full(snapshots[focus], now)
        seen = {}
        for name in sorted(snapshots):
            status = node_status(name, "prometheus", snapshots[name], now, keep=name == focus)
            if status.state == "stale":
                status = replace(
                    status,
                    error=f"no agent sample for {now - snapshots[name].time_unix:.0f} s "
                    f"(Prometheus stopped scraping it?)",
                )
            seen[name] = status
        for name, old in self._nodes.items():  # a node Prometheus no longer has: keep its last data, say so
            if name not in seen:
                seen[name] = replace(old, state="unreachable", error="no longer in Prometheus", snapshot=None)
        self._nodes = dict(sorted(seen.items()))
        samples = [Sample(s["metric"].get("__name__", ""), s["metric"], _value(s)) for s in trainer_series]
        ranks = self._keep_gone(ranks_from_samples(samples, "prometheus", now))
        runs = build_runs(ranks, self._history, self._rates, now, gpu_index=gpu_indexes(tuple(self._nodes.values())))
        runs = tuple(replace(run, loss_history=self._loss_history(run.run_id, now) or run.loss_history) for run in runs)
        return ClusterSnapshot(
            time_unix=now,
            source=self.description,
            nodes=tuple(self._nodes.values()),
            runs=runs,
            focus=focus,
            trainers=None,
        )

    def _keep_gone(self, ranks: list[RankStatus]) -> list[RankStatus]:
        """``ranks`` plus the ranks seen before whose series are gone now: one that said
        ``finished`` is kept as ``finished`` with its last figures (its process ended after the
        run); another is ``unreachable`` while its run has ranks left (Prometheus' scrapes of it
        fail: its process is gone or does not answer), so the verdict counts it as a rank that
        does not answer."""
        seen = {(r.run_id, r.rank) for r in ranks}
        runs = {r.run_id for r in ranks}
        for r in ranks:
            self._last[(r.run_id, r.rank)] = r
        self._last = {k: r for k, r in self._last.items() if k[0] in runs or r.finished}
        gone = [
            replace(r, state="finished", error=None)
            if r.finished
            else replace(r, state="unreachable", error="no series in Prometheus now: its scrapes fail")
            for key, r in self._last.items()
            if key not in seen
        ]
        return sorted([*ranks, *gone], key=lambda r: (r.run_id, r.rank))

    def _loss_history(self, run_id: str, now: float) -> tuple[tuple[float, float], ...]:
        """``(step, loss)`` over ``history_seconds`` from range queries, joined on their timestamps."""
        step = max(15.0, self.history_seconds / 240)
        run = f"{{run_id={promql_string(run_id)}}}"
        start = now - self.history_seconds
        steps = self.api.query_range(f"min({c.TRAIN_STEP.name}{run})", start, now, step)
        losses = self.api.query_range(f"max({c.TRAIN_LOSS.name}{run})", start, now, step)
        if not steps or not losses:
            return ()
        at_step = {t: float(v) for t, v in steps[0]["values"]}
        points = sorted({at_step[t]: float(v) for t, v in losses[0]["values"] if t in at_step}.items())
        # the loss gauge holds between log windows: one point per window (where its value changed)
        return tuple(p for i, p in enumerate(points) if i == 0 or p[1] != points[i - 1][1])

    def _full(self, summary: NodeSnapshot, now: float) -> NodeSnapshot:
        """``summary`` with per-core CPU and the exported processes (the Node screen's data)."""
        node = f"{{node={promql_string(summary.node)}}}"
        _, cores = self.api.query(f"{c.NODE_CPU_CORE_BUSY.name}{node}", now)
        _, infos = self.api.query(f"{c.NODE_PROCESS_INFO.name}{node}", now)
        _, cpu = self.api.query(f"rate({c.NODE_PROCESS_CPU_SECONDS.name}{node}[1m])", now)
        _, cpu_total = self.api.query(f"{c.NODE_PROCESS_CPU_SECONDS.name}{node}", now)
        _, rss = self.api.query(f"{c.NODE_PROCESS_RESIDENT_MEMORY.name}{node}", now)
        _, gpu_mem = self.api.query(f"{c.GPU_PROCESS_MEMORY.name}{node}", now)

        def by_pid(result: list[dict]) -> dict[str, float]:
            return {s["metric"].get("pid", ""): _value(s) for s in result}

        rates, totals, resident = by_pid(cpu), by_pid(cpu_total), by_pid(rss)
        total_memory = summary.host.memory.total_bytes
        processes = []
        for s in infos:
            labels = s["metric"]
            pid = labels.get("pid", "")
            if not pid.isdigit():
                continue
            rss_bytes = int(resident[pid]) if pid in resident else None
            processes.append(
                ProcessInfo(
                    pid=int(pid),
                    ppid=int(labels.get("ppid") or 0),
                    name=labels.get("name", ""),
                    state="other",
                    user=labels.get("user") or None,
                    cpu_cores=rates.get(pid),
                    cpu_seconds=totals.get(pid),
                    memory_ratio=rss_bytes / total_memory if rss_bytes is not None and total_memory else None,
                    rss_bytes=rss_bytes,
                    command=labels.get("command") or None,
                    pod_uid=labels.get("pod_uid") or None,
                    container_id=labels.get("container_id") or None,
                )
            )
        gpu_processes = []
        for s in gpu_mem:
            labels = s["metric"]
            if labels.get("pid", "").isdigit() and labels.get("gpu", "").isdigit():
                gpu_processes.append(
                    GpuProcess(
                        gpu=int(labels["gpu"]),
                        gpu_uuid=labels.get("gpu_uuid") or None,
                        pid=int(labels["pid"]),
                        used_memory_bytes=int(_value(s)),
                    )
                )
        ratios = sorted(
            (int(s["metric"].get("cpu", "0")), _value(s)) for s in cores if s["metric"].get("cpu", "").isdigit()
        )
        host = replace(
            summary.host,
            cpu_count=len(ratios) or summary.host.cpu_count,
            cpu=replace(summary.host.cpu, core_busy_ratios=tuple(v for _, v in ratios)),
        )
        return replace(summary, host=host, processes=tuple(processes), gpu_processes=tuple(gpu_processes), view="full")

    def close(self) -> None:
        """Close the HTTP client."""
        self.api.close()
