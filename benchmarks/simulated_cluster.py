"""The series of a simulated GPU cluster, streamed as OpenMetrics for ``promtool tsdb create-blocks-from``.

For ``benchmarks/dashboard_queries.py``. A cluster of ``nodes`` nodes, each with:

- dcgm-exporter in the middle of a rolling upgrade: node ``n`` runs release ``RELEASES[n % 4]``
  (4.5.3-4.8.2 with ``Hostname``, 4.6.0-4.8.3 with ``hostname``, 4.9.0 and 4.10.0 with their
  renamed fields in base units; ``tests/support/dcgm_exposition``), every field of its
  ``default-counters.csv`` for ``gpus`` GPUs, with the target labels the GPU Operator's
  ServiceMonitor gives (``job="nvidia-dcgm-exporter"``, the exporter pod's
  ``namespace``/``pod``/``instance``), so the canonical layer's rules read every dialect at once;
- the fsdp-observe agent: host series (``cores`` per-core CPU series), per-GPU series, one GPU
  process per GPU, XID-free;
- node-exporter: per-core CPU time by mode, network and disk counters, ``node_uname_info``;
- ``ranks`` trainer ranks of one run (``run_id="llama3-70b-ft"``) with every trainer family,
  histograms included (``observe.catalog``).

No ``# TYPE`` lines: OpenMetrics then reads every family as unknown, which lets histogram and
counter samples keep the names Prometheus stores (the TSDB keeps no types). Values follow a few
shared profiles (one string per sample per profile, reused by every series of
that profile), so writing is a ``join`` per series and the generator runs at disk speed; series
identities are what a real cluster has. Rank 17 of every 1,000 is slow (a straggler); GPU 3 of
node 5 runs hot. Memory use is one family at a time (streamed; nothing is held for the cluster).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

from observe import catalog as c
from tests.support.dcgm_exposition import COUNTERS, DOUBLE_FIELDS, LAST_XID, RELEASES, Gpu, counters, reading

RUN = "llama3-70b-ft"
NAMESPACE = "training"
#: dcgm-exporter release per node, in turn: a fleet halfway through two upgrades.
DIALECTS = tuple(RELEASES)
_PLAIN = Gpu(0, "", "")


@dataclass(frozen=True)
class Cluster:
    """The simulated cluster's shape and the time span of its samples.

    Attributes:
        nodes, gpus, ranks, cores: nodes, GPUs per node, trainer ranks per node, CPUs per node.
        start, end: first and last sample time (Unix seconds), ``step`` apart (the scrape interval).
    """

    nodes: int
    gpus: int = 8
    ranks: int = 8
    cores: int = 64
    start: float = 0.0
    end: float = 0.0
    step: float = 15.0

    def node(self, n: int) -> str:
        """Node ``n``'s Kubernetes name."""
        return f"gpu-node-{n:04d}"

    def timestamps(self, start: float, end: float) -> list[str]:
        """The sample times in ``[start, end)`` as OpenMetrics text (seconds)."""
        first = math.ceil((start - self.start) / self.step)
        out, t = [], self.start + first * self.step
        while t < end:
            out.append(f"{t:.0f}")
            t += self.step
        return out


class Profiles:
    """Formatted ``"<value> <timestamp>"`` strings for one span of samples, per value shape."""

    def __init__(self, times: list[str]) -> None:
        self.times = times
        self._cache: dict[tuple, str] = {}

    def gauge(self, level: float, wobble: float = 0.0, integer: bool = False) -> list[str]:
        """A gauge around ``level`` (± ``wobble``, slowly)."""
        key = ("g", level, wobble, integer)
        values = [level + wobble * math.sin(float(t) / 600.0) for t in self.times]
        return self._fmt(key, values, integer)

    def counter(self, per_second: float, integer: bool = False) -> list[str]:
        """A counter growing at ``per_second`` from 0 at the cluster's start."""
        first = float(self.times[0]) if self.times else 0.0
        values = [per_second * (float(t) - first + 1e6) for t in self.times]  # far from 0: no resets
        return self._fmt(("c", per_second, integer), values, integer)

    def _fmt(self, key: tuple, values: list[float], integer: bool) -> list[str]:
        if key not in self._cache:
            self._cache[key] = "\n".join(
                f"{int(v)} {t}" if integer else f"{v:.6g} {t}" for v, t in zip(values, self.times, strict=True)
            )
        return [self._cache[key]]


def _series(out: TextIO, name: str, labels: str, samples: list[str]) -> int:
    """Write one series' samples; returns how many."""
    (block,) = samples
    prefix = f"{name}{{{labels}}} "
    out.write(prefix + block.replace("\n", "\n" + prefix) + "\n")
    return block.count("\n") + 1 if block else 0


def dcgm(cluster: Cluster, out: TextIO, p: Profiles) -> int:
    """dcgm-exporter's families for every GPU of the cluster; returns the samples written."""
    written = 0
    for d, release in enumerate(DIALECTS):
        fields = counters("default-counters.csv", release=release)
        driver = next(f.name for f in fields if f.kind == "label")
        host = RELEASES[release].hostname_label
        nodes = range(d, cluster.nodes, len(DIALECTS))
        for counter in fields:
            if counter.kind == "label":
                continue
            for n in nodes:
                node = cluster.node(n)
                for g in range(cluster.gpus):
                    labels = (
                        f'gpu="{g}",UUID="GPU-{n:08x}-0000-4000-8000-{g:012x}",'
                        f'pci_bus_id="00000000:{16 + g:02X}:00.0",'
                        f'device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",{host}="{node}",'
                        f'{driver}="570.124.06",exported_container="pytorch",'
                        f'exported_namespace="{NAMESPACE}",exported_pod="{RUN}-worker-{n}",'
                        f'job="nvidia-dcgm-exporter",namespace="gpu-operator",pod="nvidia-dcgm-exporter-{n:05x}",'
                        f'instance="10.{n // 250}.{n % 250}.9:9400",container="nvidia-dcgm-exporter",'
                        f'service="nvidia-dcgm-exporter",endpoint="gpu-metrics"'
                    )
                    if counter.name in LAST_XID:
                        no_error = labels + ',err_code="0",err_msg="No Error"'
                        written += _series(out, counter.name, no_error, p.gauge(0, 0, True))
                        continue
                    level = float(reading(_PLAIN, counter.name))
                    if "GPU_TEMP" in counter.name and (n, g) == (5, 3):
                        level = 84.0
                    integer = counter.name not in DOUBLE_FIELDS
                    written += _series(out, counter.name, labels, p.gauge(level, level * 0.02, integer))
    return written


def agent(cluster: Cluster, out: TextIO, p: Profiles) -> int:
    """The fsdp-observe agent's families for every node; returns the samples written."""
    written = 0

    def base(n: int) -> str:
        return (
            f'node="{cluster.node(n)}",job="fsdp-observe-agent",namespace="fsdp-observe",'
            f'instance="10.{n // 250}.{n % 250}.9:9401",pod="fsdp-observe-agent-{n:05x}"'
        )

    host = [
        (c.NODE_CPU_BUSY, 0.35),
        (c.NODE_MEMORY_TOTAL, 2.0e12),
        (c.NODE_MEMORY_USED, 6.4e11),
        (c.NODE_MEMORY_AVAILABLE, 1.3e12),
        (c.NODE_MEMORY_CACHED, 2.0e11),
        (c.NODE_MEMORY_BUFFERS, 1.0e9),
        (c.NODE_SWAP_TOTAL, 0.0),
        (c.NODE_SWAP_USED, 0.0),
        (c.NODE_LOAD1, 22.0),
        (c.NODE_LOAD5, 21.0),
        (c.NODE_LOAD15, 20.0),
        (c.NODE_THREADS, 4200.0),
        (c.AGENT_COLLECTION_SECONDS, 0.004),
    ]
    for metric, level in host:
        for n in range(cluster.nodes):
            written += _series(out, metric.name, base(n), p.gauge(level, level * 0.05))
    for n in range(cluster.nodes):
        for cpu in range(cluster.cores):
            written += _series(out, c.NODE_CPU_CORE_BUSY.name, f'{base(n)},cpu="{cpu}"', p.gauge(0.35, 0.2))
    for n in range(cluster.nodes):
        for state, count in (("running", 12), ("sleeping", 900), ("zombie", 0)):
            written += _series(out, c.NODE_PROCESSES.name, f'{base(n)},state="{state}"', p.gauge(count, 0, True))
    for n in range(cluster.nodes):
        for source in ("procfs", "nvml", "kernel_log"):
            written += _series(out, c.AGENT_UP.name, f'{base(n)},source="{source}"', p.gauge(1, 0, True))
    for n in range(cluster.nodes):
        written += _series(out, c.AGENT_COLLECTIONS.name, base(n), p.counter(1 / 15))
    per_gpu = [
        (c.GPU_UTILIZATION, 0.97),
        (c.GPU_MEMORY_USED, 7.4e10),
        (c.GPU_MEMORY_TOTAL, 8.5e10),
        (c.GPU_TEMPERATURE, 61.0),
        (c.GPU_POWER, 640.0),
        (c.GPU_POWER_LIMIT, 700.0),
        (c.GPU_LOST, 0.0),
    ]
    for metric, level in per_gpu:
        for n in range(cluster.nodes):
            for g in range(cluster.gpus):
                labels = f'{base(n)},gpu="{g}",gpu_uuid="GPU-{n:08x}-0000-4000-8000-{g:012x}"'
                written += _series(out, metric.name, labels, p.gauge(level, level * 0.02))
    gpu_metrics = [
        (c.GPU_CLOCK_THROTTLE, "reason", ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal")),
        (c.GPU_ECC_ERRORS, "type", ("corrected", "uncorrected")),
    ]
    for metric, label, values in gpu_metrics:
        name = metric.name
        for n in range(cluster.nodes):
            for g in range(cluster.gpus):
                for value in values:
                    labels = f'{base(n)},gpu="{g}",gpu_uuid="GPU-{n:08x}-0000-4000-8000-{g:012x}",{label}="{value}"'
                    # a fleet training at full power: the power cap holds every GPU's clocks down
                    held = int(value == "sw_power_cap")
                    written += _series(out, name, labels, p.gauge(held, 0, True))
    for metric, level in ((c.GPU_PROCESS_MEMORY, 7.0e10), (c.GPU_PROCESS_SM_UTILIZATION, 0.95)):
        for n in range(cluster.nodes):
            for g in range(cluster.gpus):
                labels = f'{base(n)},gpu="{g}",gpu_uuid="GPU-{n:08x}-0000-4000-8000-{g:012x}",pid="{1000 + g}"'
                written += _series(out, metric.name, labels, p.gauge(level, 0))
    for n in range(cluster.nodes):
        for g in range(cluster.gpus):
            labels = (
                f'{base(n)},pid="{1000 + g}",ppid="1",user="trainer",name="python3",'
                f'command="python -m trainer --rank {g}",pod_uid="",container_id=""'
            )
            written += _series(out, c.NODE_PROCESS_INFO.name, labels, p.gauge(1, 0, True))
    for metric, level in ((c.NODE_PROCESS_CPU_SECONDS, 0.98), (c.NODE_PROCESS_RESIDENT_MEMORY, 3.0e10)):
        for n in range(cluster.nodes):
            for g in range(cluster.gpus):
                profile = p.counter(level) if metric.kind == "counter" else p.gauge(level, 0)
                written += _series(out, metric.name, f'{base(n)},pid="{1000 + g}"', profile)
    return written


def trainer(cluster: Cluster, out: TextIO, p: Profiles) -> int:
    """Every trainer family for one run of ``nodes * ranks`` ranks; returns the samples written."""
    written = 0
    world = cluster.nodes * cluster.ranks

    def ranks() -> Iterator[tuple[int, str, bool]]:
        for n in range(cluster.nodes):
            for local in range(cluster.ranks):
                rank = n * cluster.ranks + local
                labels = (
                    f'run_id="{RUN}",rank="{rank}",local_rank="{local}",node="{cluster.node(n)}",'
                    f'gpu_uuid="GPU-{n:08x}-0000-4000-8000-{local:012x}",namespace="{NAMESPACE}",'
                    f'job="{NAMESPACE}/fsdp-observe-trainer",'
                    f'instance="10.{n // 250}.{n % 250}.{20 + local}:9500",'
                    f'pod="{RUN}-worker-{n}"'
                )
                yield rank, labels, rank % 1000 == 17

    gauges = [
        (c.TRAIN_STEP, 4000.0),
        (c.TRAIN_PLANNED_STEPS, 20000.0),
        (c.TRAIN_TOKENS_PER_SECOND, 3100.0),
        (c.TRAIN_LOSS, 1.7),
        (c.TRAIN_MFU, 0.41),
        (c.TRAIN_WINDOW_STEP_SECONDS, 2.6),
        (c.TRAIN_DEVICE_MEMORY_ALLOCATED, 6.1e10),
        (c.TRAIN_DEVICE_MEMORY_RESERVED, 7.0e10),
        (c.TRAIN_DEVICE_MEMORY_PEAK, 6.6e10),
        (c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK, 3.0e10),
        (c.TRAIN_GRAD_NORM, 0.8),
        (c.TRAIN_LEARNING_RATE, 2e-5),
        (c.TRAIN_GOODPUT, 0.93),
        (c.TRAIN_LAST_CHECKPOINT_TIMESTAMP, 1.7e9),
        (c.TRAIN_LAST_STEP_TIMESTAMP, 1.7e9),
    ]
    for metric, level in gauges:
        for _, labels, slow in ranks():
            scale = 1.6 if slow and metric is c.TRAIN_WINDOW_STEP_SECONDS else 1.0
            written += _series(out, metric.name, labels, p.gauge(level * scale, level * 0.01))
    for rank, labels, _ in ranks():
        if rank == 0:
            written += _series(out, c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name, labels, p.gauge(3100.0 * world, 100.0))
    for _, labels, _ in ranks():
        info = (
            f',model="llama3-70b",sharding_strategy="FULL_SHARD",mixed_precision="bf16",world_size="{world}",'
            f'device_type="cuda",backend="nccl",activation_checkpointing="full",mesh="{world}"'
        )
        written += _series(out, c.TRAIN_INFO.name, labels + info, p.gauge(1, 0, True))
    for _, labels, _ in ranks():
        for phase in c.TRAIN_PHASES:
            written += _series(
                out, c.TRAIN_PHASE.name, f'{labels},phase="{phase}"', p.gauge(1 if phase == "training" else 0, 0, True)
            )
    for _, labels, _ in ranks():
        for phase in c.TRAIN_PHASES:
            rate = 0.93 if phase == "training" else 0.07 / (len(c.TRAIN_PHASES) - 1)
            written += _series(out, c.TRAIN_PHASE_SECONDS.name, f'{labels},phase="{phase}"', p.counter(rate))
    for metric, rate in ((c.TRAIN_RESTARTS, 0.0), (c.TRAIN_DEVICE_ALLOC_RETRIES, 0.0), (c.TRAIN_STEPS, 0.38)):
        for _, labels, _ in ranks():
            written += _series(out, metric.name, labels, p.counter(rate))
    for metric, mean in ((c.TRAIN_STEP_SECONDS, 2.6), (c.TRAIN_DATA_WAIT_SECONDS, 0.01)):
        for _, labels, slow in ranks():
            steps_per_second = (1 / 2.6) / (1.6 if slow and metric is c.TRAIN_STEP_SECONDS else 1.0)
            seconds = mean * (1.6 if slow and metric is c.TRAIN_STEP_SECONDS else 1.0)
            for bound in (*c.STEP_SECONDS_BUCKETS, math.inf):
                share = 1.0 if bound >= seconds * 1.2 else 0.5 if bound >= seconds else 0.0
                le = "+Inf" if bound == math.inf else f"{bound:g}"
                written += _series(
                    out, f"{metric.name}_bucket", f'{labels},le="{le}"', p.counter(steps_per_second * share)
                )
            written += _series(out, f"{metric.name}_sum", labels, p.counter(steps_per_second * seconds))
            written += _series(out, f"{metric.name}_count", labels, p.counter(steps_per_second))
    return written


#: node-exporter's CPU modes kept in the simulation (a real one has eight; these carry the load).
CPU_MODES = ("idle", "user", "system", "iowait")


def node_exporter(cluster: Cluster, out: TextIO, p: Profiles) -> int:
    """node-exporter's families the dashboards read, scraped as kube-prometheus-stack does
    (``instance`` relabelled to the node name); returns the samples written."""
    written = 0

    def base(n: int) -> str:
        return (
            f'instance="{cluster.node(n)}",job="node-exporter",namespace="monitoring",'
            f'pod="kube-prometheus-stack-prometheus-node-exporter-{n:05x}",service="node-exporter"'
        )

    for n in range(cluster.nodes):
        written += _series(
            out, "node_uname_info", f'{base(n)},nodename="{cluster.node(n)}",release="6.8.0"', p.gauge(1, 0, True)
        )
    for n in range(cluster.nodes):
        for cpu in range(cluster.cores):
            for mode, share in zip(CPU_MODES, (0.6, 0.3, 0.08, 0.02), strict=True):
                written += _series(
                    out, "node_cpu_seconds_total", f'{base(n)},cpu="{cpu}",mode="{mode}"', p.counter(share)
                )
    for name, rate in (("node_network_receive_bytes_total", 2.5e9), ("node_network_transmit_bytes_total", 2.4e9)):
        for n in range(cluster.nodes):
            for device, scale in (("eth0", 1.0), ("lo", 0.01), ("cali1a2b3c", 0.1)):
                written += _series(out, name, f'{base(n)},device="{device}"', p.counter(rate * scale))
    for name, rate in (
        ("node_disk_read_bytes_total", 4e8),
        ("node_disk_written_bytes_total", 2e8),
        ("node_disk_io_time_seconds_total", 0.3),
    ):
        for n in range(cluster.nodes):
            for device in ("nvme0n1", "nvme1n1", "nvme0n1p1"):
                written += _series(out, name, f'{base(n)},device="{device}"', p.counter(rate))
    return written


def write_span(cluster: Cluster, out: TextIO, start: float, end: float) -> int:
    """Every series of the cluster from ``start`` to ``end`` as one OpenMetrics document."""
    p = Profiles(cluster.timestamps(start, end))
    written = dcgm(cluster, out, p) + agent(cluster, out, p) + node_exporter(cluster, out, p) + trainer(cluster, out, p)
    out.write("# EOF\n")
    return written


def series_per_node(cluster: Cluster, n: int = 0) -> int:
    """How many series node ``n`` adds (for the size estimate)."""
    release = DIALECTS[n % len(DIALECTS)]
    fields = len([x for x in counters("default-counters.csv", release=release) if x.kind != "label"])
    agent_series = 13 + cluster.cores + 3 + 3 + 1 + cluster.gpus * (7 + 4 + 2 + 2 + 1 + 2)
    buckets = len(c.STEP_SECONDS_BUCKETS) + 1
    rank = 15 + 1 + 2 * len(c.TRAIN_PHASES) + 3 + 2 * (buckets + 2)
    node_exporter_series = 1 + cluster.cores * len(CPU_MODES) + 2 * 3 + 3 * 3
    return cluster.gpus * fields + agent_series + node_exporter_series + cluster.ranks * rank


def series_total(cluster: Cluster) -> int:
    """How many series the whole cluster has (the run's global tokens/s is one series)."""
    return sum(series_per_node(cluster, n) for n in range(cluster.nodes)) + 1


__all__ = ["COUNTERS", "Cluster", "series_per_node", "series_total", "write_span"]
