"""Every panel query of every generated dashboard against a real Prometheus; an XID line that fires.

Real: Prometheus (Debian's ``prometheus``) on loopback with the generated rules, node-exporter
(Debian's ``prometheus-node-exporter``, a few collectors), a two-rank CPU trainer run under
torchrun, the node agent process, and HTTP between them all.

Stand-ins for what cannot run on a machine without a GPU, said here as the rules ask:

- the agent's GPUs come from the fake ``libnvidia-ml.so.1`` (``tests/support/fake_nvml.c``):
  GPU 3 lost, GPU 0 with a process of this test and rising uncorrected ECC errors;
- dcgm-exporter is a static server **replaying the fixtures** of ``tests/dashboards/fixtures``
  (rendered from the released counter lists and the 4.9.0 rename table,
  ``tests/support/dcgm_exposition.py``): the GPU Operator's 4.5.3-4.8.2 exporter on the training
  node (its PCIe replay counter growing between scrapes), one started with the windowed XID count,
  a MIG node, and the same training node's GPUs from a 4.6.0-4.8.3 (``hostname``) and a 4.9.0
  (renamed fields in base units) exporter, as during a rolling upgrade: the canonical layer must
  count each GPU once. They are scraped as the GPU Operator's ServiceMonitor does:
  ``job="nvidia-dcgm-exporter"``, the exporter pod's ``namespace``/``pod``/``container`` as target
  labels (the exported ones become ``exported_*``);
- the three CUDA ranks (run ``llama2-7b-ft``, namespace ``training``: two on the fixture's GPUs,
  one on the agent's fake GPU 0) are served by the same static server: the trainer's own exporter
  fed CUDA-like figures, carrying only what a CPU rank cannot export (``gpu_uuid``, MFU, the
  caching allocator's memory; ``tests/support/replay.py``).

This machine plays the node the fixtures name: the agent, node-exporter and the live ranks carry
its name. The live ranks get a ``namespace`` target label, as the trainer PodMonitor's targets do.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from observe import catalog as c
from observe import prometheus_local
from observe.monitoring import dashboards, rules
from observe.monitoring.settings import Settings
from observe.ports import free_port, free_port_block
from tests.support import dcgm_exposition as fixtures
from tests.support import grafana_queries
from tests.support.fake_nvml import FakeNvml
from tests.support.grafana_queries import panel_queries, substitute
from tests.support.processes import REPO, AgentProcess, wait_for
from tests.support.replay import StaticServer, cuda_rank_exposition
from trainer.runspec.launch import installed_script

NODE, MIG_NODE = fixtures.NODE, fixtures.MIG_NODE
DCGM_UUIDS = fixtures.TRAINING_UUIDS
FAKE_UUID = "GPU-fa4e0000-0000-4000-8000-0000000000{:02d}"  # fake NVML GPU N
RUN_ID = "dash-live"
SCRAPE, EVALUATION, STEP = 0.5, 1.0, 1.0
#: The generated rules with windows short enough for a test: a 30 s XID window, 2 s ``for``; with
#: the windowed XID count's record, which the xid-count dashboards read.
RULE_SETTINGS = Settings(xid_window="30s", xid_for="2s", dcgm_xid_count=True)
#: The dashboards: as committed, and generated with the windowed XID count.
BOARDS = {"released": None, "xid-count": Settings(dcgm_xid_count=True)}
EXPORTERS = {
    "4.5.3-4.8.2-gpu-operator": "dcgm-4.5.3-4.8.2-gpu-operator.prom",
    "4.5.3-4.8.2-xid-count": "dcgm-4.5.3-4.8.2-xid-count.prom",
    "4.5.3-4.8.2-mig": "dcgm-4.5.3-4.8.2-mig.prom",
    "4.6.0-4.8.3": "dcgm-4.6.0-4.8.3-gpu-operator.prom",
    "4.9.0": "dcgm-4.9.0-default.prom",
}
#: Panels empty on a healthy machine whose fault this test cannot cause: an agent source that
#: stops being readable (root reads any file here). Their queries must still succeed.
HEALTHY_EMPTY = {"fsdp-nodes / Sources unreadable"}
XID_LINE = "[Mon Nov 30 {time} 2026] NVRM: Xid (PCI:{bus}): {code}, pid=4242, name=python3, {text}\n"
NODE_EXPORTER = shutil.which("prometheus-node-exporter")

pytestmark = [
    pytest.mark.skipif(
        prometheus_local.binary() is None,
        reason="the prometheus binary is missing: apt-get install prometheus (CI installs it)",
    ),
    pytest.mark.skipif(NODE_EXPORTER is None, reason="apt-get install prometheus-node-exporter (CI installs it)"),
]


def growing_replays(body: bytes) -> Callable[[], bytes]:
    """``body`` with GPU 1's PCIe replay counter one higher on every scrape (a flaky link)."""
    count = iter(range(1, 10**9))
    pattern = re.compile(rb'^(DCGM_FI_DEV_PCIE_REPLAY_(?:COUNTER|TOTAL)\{gpu="1",.*\}) 0$', re.M)
    return lambda: pattern.sub(lambda m: m.group(1) + b" %d" % next(count), body)


@dataclass
class Stack:
    """What the module's tests share."""

    url: str
    start: float
    kernel_log: Path
    trainer_log: Path


def promql(url: str, path: str, **params) -> dict:
    body = httpx.get(f"{url}{path}", params=params, timeout=30).json()
    assert body["status"] == "success", body
    return body["data"]


def instant(url: str, expr: str) -> list[dict]:
    return promql(url, "/api/v1/query", query=expr)["result"]


@pytest.fixture(scope="module")
def stack(native, tmp_path_factory, session_env) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("dashboards-e2e")
    fake = FakeNvml(native.fake_nvml, tmp / "nvml.conf")
    # GPU 3 lost; GPU 0 runs a process of this test, with a fresh utilisation sample for every
    # collection (as a busy GPU has) and one more uncorrected ECC error each time (fed by a thread
    # until the module's tests end).
    scenario = (
        f"bus@0 0x3b\nbus@1 0x86\nlost@3 1\nproc 0 {os.getpid()} 1073741824\nsample 0 {os.getpid()} {{0}} 55 20\n"
        "ecc_uncorrected@0 {0}"
    )
    fake.set(scenario.format(1))
    feeding = threading.Event()

    def feed() -> None:
        tick = 1
        while not feeding.wait(0.2):
            tick += 1
            fake.set(scenario.format(tick))

    threading.Thread(target=feed, daemon=True).start()
    kernel_log = tmp / "kern.log"  # an XID already logged before anything starts
    kernel_log.write_text(
        XID_LINE.format(time="12:00:00", bus="0000:3b:00", code=48, text="An uncorrectable double bit error")
    )
    agent = AgentProcess(
        ["--interval", "0.25", "--node", NODE, "--kernel-log", str(kernel_log)], fake.env(session_env), tmp
    )
    bodies = {f"/{name}": (fixtures.FIXTURES / file).read_bytes() for name, file in EXPORTERS.items()}
    server = StaticServer(
        {
            **bodies,
            **{path: growing_replays(bodies[path]) for path in ("/4.5.3-4.8.2-gpu-operator", "/4.9.0")},
            **{
                f"/cuda-rank-{r}": cuda_rank_exposition("llama2-7b-ft", r, NODE, uuid, 3)
                for r, uuid in enumerate((*DCGM_UUIDS, FAKE_UUID.format(0)))
            },
        }
    ).__enter__()
    base, node_exporter_port = free_port_block(2), free_port()
    node_exporter = subprocess.Popen(
        [
            NODE_EXPORTER,
            f"--web.listen-address=127.0.0.1:{node_exporter_port}",
            "--collector.disable-defaults",
            "--collector.cpu",
            "--collector.netdev",
            "--collector.diskstats",
            "--collector.uname",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    static = f"127.0.0.1:{server.port}"
    (tmp / rules.RULES_FILE).write_text(rules.render(RULE_SETTINGS))
    gpu_operator = {
        "job": "nvidia-dcgm-exporter",
        "namespace": "gpu-operator",
        "container": "nvidia-dcgm-exporter",
        "service": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
    }
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE * 1000:.0f}ms",
            "scrape_timeout": "400ms",
            "evaluation_interval": f"{EVALUATION * 1000:.0f}ms",
        },
        "rule_files": [str(tmp / rules.RULES_FILE)],
        "scrape_configs": [
            {
                "job_name": "trainer",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"], "labels": {"namespace": "fsdp-e2e"}}
                ],
            },
            {"job_name": "agent", "static_configs": [{"targets": [agent.base.split("//")[1]]}]},
            {
                "job_name": "node-exporter",
                "static_configs": [  # kube-prometheus-stack: instance = node name
                    {"targets": [f"127.0.0.1:{node_exporter_port}"], "labels": {"instance": NODE}}
                ],
            },
            *(
                {
                    "job_name": f"dcgm-{name}",
                    "metrics_path": f"/{name}",
                    "static_configs": [
                        {
                            "targets": [static],
                            "labels": {**gpu_operator, "fixture": name, "pod": f"nvidia-dcgm-exporter-{i}x7k2"},
                        }
                    ],
                }
                for i, name in enumerate(EXPORTERS)
            ),
            *(
                {
                    "job_name": f"cuda-rank-{r}",
                    "metrics_path": f"/cuda-rank-{r}",
                    "static_configs": [{"targets": [static], "labels": {"namespace": "training"}}],
                }
                for r in (0, 1, 2)
            ),
        ],
    }
    started = time.time()
    prometheus = prometheus_local.start(tmp / "prometheus", config, free_port())
    trainer = None
    try:

        def targets_up() -> bool:  # discovery hands targets over after ~5 s: poll, never sleep
            active = promql(prometheus.url, "/api/v1/targets")["activeTargets"]
            return sum(t["health"] == "up" for t in active if t["labels"]["job"] != "trainer") == 2 + len(EXPORTERS) + 3

        wait_for(
            targets_up, timeout=30, interval=0.25, what="Prometheus to scrape the agent, node-exporter, the replays"
        )
        trainer_log = tmp / "trainer.log"
        with open(trainer_log, "w") as log:
            trainer = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--standalone",
                    "--nproc-per-node=2",
                    "--no-python",
                    installed_script(),
                    "--steps",
                    "60",
                    "--seq-len",
                    "64",
                    "--batch-size",
                    "2",
                    "--log-every",
                    "2",
                    "--warmup-steps",
                    "2",
                    "--metrics-address",
                    "127.0.0.1",
                    "--metrics-port",
                    str(base),
                    "--metrics-linger",
                    "600",
                    "--run-id",
                    RUN_ID,
                    "--checkpoint-dir",
                    str(tmp / "ckpt"),
                    "--checkpoint-every",
                    "30",
                    "--val-every",
                    "30",
                ],
                env={**session_env, "NODE_NAME": NODE},
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def finished() -> bool:
            assert trainer.poll() is None, trainer_log.read_text()
            done = instant(prometheus.url, f'{c.TRAIN_PHASE.name}{{run_id="{RUN_ID}",phase="finished"}} == 1')
            return len(done) == 2

        wait_for(finished, timeout=300, interval=0.5, what="both ranks finished in Prometheus")
        time.sleep(2 * SCRAPE)  # the scrape after the last step is in, for the rate windows
        yield Stack(prometheus.url, started, kernel_log, trainer_log)
    finally:
        if trainer is not None and trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGTERM)  # ends --metrics-linger at once
            try:
                trainer.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(trainer.pid, signal.SIGKILL)
                trainer.wait()
        feeding.set()
        prometheus.stop()
        agent.stop()
        node_exporter.terminate()
        node_exporter.wait(timeout=10)
        server.__exit__(None, None, None)


# --- the dashboards' own variables and queries ------------------------------------------------


def variable_values(board: dict, span: float) -> dict[str, str]:
    """The dashboard's variables at "All" for this stack (node, step and scrape interval)."""
    return grafana_queries.variable_values(board, span, NODE, STEP, SCRAPE)


def finite_values(data: dict) -> list[float]:
    if data["resultType"] == "matrix":
        raw = [v for series in data["result"] for _, v in series["values"]]
    else:
        raw = [series["value"][1] for series in data["result"]]
    return [float(v) for v in raw if math.isfinite(float(v))]


def run_queries(url: str, board: dict, start: float) -> tuple[list[str], list[dict]]:
    """Evaluate every query as Grafana would (range queries, or instant ones for instant targets).

    Returns the failures (errors and queries without a finite value) and every result's series.
    """
    end = time.time()
    values = variable_values(board, end - start)
    failures, series = [], []
    for where, target in panel_queries(board):
        expr = substitute(target["expr"], values)
        params = (
            {"query": expr, "time": f"{end:.3f}"}
            if target.get("instant")
            else {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{STEP:g}"}
        )
        body = httpx.get(
            f"{url}/api/v1/query{'' if target.get('instant') else '_range'}", params=params, timeout=30
        ).json()
        panel = where.rsplit(" / ", 1)[0]
        if body["status"] != "success":
            failures.append(f"{where}: {body.get('error')}\n    {expr}")
        elif not finite_values(body["data"]) and panel not in HEALTHY_EMPTY:
            failures.append(f"{where}: no data\n    {expr}")
        else:
            series += body["data"]["result"]
    return failures, series


def boards(variant: str) -> dict[str, dict]:
    """released: the committed files, as Grafana would load them; the others generated with their settings."""
    settings = BOARDS[variant]
    if settings is None:
        return {p.name: json.loads(p.read_text()) for p in sorted((REPO / "dashboards").glob("*.json"))}
    return dashboards.dashboards(settings)


def panel_series(url: str, board: dict, title: str, start: float) -> list[dict]:
    """The series one panel's first query returns over the test's range."""
    (panel,) = [p for p in board["panels"] if p.get("title") == title]
    end = time.time()
    expr = substitute(panel["targets"][0]["expr"], variable_values(board, end - start))
    return promql(url, "/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{STEP:g}")[
        "result"
    ]


@pytest.mark.parametrize("variant", sorted(BOARDS))
def test_every_panel_query_of_every_dashboard_returns_data(stack: Stack, variant: str) -> None:
    found = boards(variant)
    assert sorted(found) == ["gpu-health.json", "nodes.json", "training-run.json"]
    failures, series = [], []
    for board in found.values():
        more_failures, more_series = run_queries(stack.url, board, stack.start)
        failures += more_failures
        series += more_series
    assert not failures, "\n".join(failures)
    # The live CPU run fed the training panels (not only the CUDA stand-ins).
    assert RUN_ID in {s["metric"].get("run_id") for s in series}


def test_the_runs_gpus_join_dcgm_or_the_agent_by_gpu_uuid_and_node(stack: Stack) -> None:
    board = boards("released")["training-run.json"]
    # Ranks 0 and 1 use GPUs dcgm-exporter reports (in three dialects at once: each GPU once);
    # rank 2 uses the agent's fake GPU 0, which no exporter reports: the agent fills the figure.
    temperature = panel_series(stack.url, board, "GPU temperature of the run's GPUs", stack.start)
    assert {(s["metric"]["rank"], s["metric"]["gpu_uuid"]) for s in temperature} == {
        ("0", DCGM_UUIDS[0]),
        ("1", DCGM_UUIDS[1]),
        ("2", FAKE_UUID.format(0)),
    }
    # The graphics engine is a DCGM profiling field: nothing for the agent's GPU.
    engine = panel_series(stack.url, board, "Graphics engine active of the run's GPUs", stack.start)
    assert {(s["metric"]["rank"], s["metric"]["gpu_uuid"]) for s in engine} == {
        ("0", DCGM_UUIDS[0]),
        ("1", DCGM_UUIDS[1]),
    }
    # Three exporters of three dialects report the training node's two GPUs: still two GPUs there.
    reporting = instant(stack.url, f'count(gpu:dcgm_temperature_celsius:max{{node="{NODE}",gpu_uuid=~"GPU-7d1e.*"}})')
    assert float(reporting[0]["value"][1]) == 2
    spoken = instant(stack.url, f'gpu:dcgm_exporter_dialect:info{{node="{NODE}"}}')
    assert {s["metric"]["dialect"] for s in spoken} == {"4.9"}  # the newest dialect of the GPUs it reports


def test_mig_instances_show_where_gpu_utilisation_cannot(stack: Stack) -> None:
    board = boards("released")["gpu-health.json"]
    engine = panel_series(stack.url, board, "Graphics engine active (MIG-safe)", stack.start)
    util = panel_series(stack.url, board, "GPU utilisation (not under MIG)", stack.start)
    assert {(s["metric"]["node"], s["metric"].get("gpu_instance")) for s in engine} >= {
        (MIG_NODE, "1"),
        (MIG_NODE, "2"),
    }
    assert MIG_NODE not in {s["metric"]["node"] for s in util}  # dcgm-exporter does not report it for MIG


def test_every_variable_lists_values(stack: Stack) -> None:
    end = time.time()
    for variant in sorted(BOARDS):
        for board in boards(variant).values():
            values = variable_values(board, end - stack.start)
            for var in board["templating"]["list"]:
                if var["type"] != "query":
                    continue
                if var["query"].startswith("query_result("):  # Grafana: an instant query, the regex per line
                    result = instant(stack.url, substitute(var["query"][len("query_result(") : -1], values))
                    lines = ["{" + ",".join(f'{k}="{v}"' for k, v in r["metric"].items()) + "}" for r in result]
                    listed = {m.group(1) for line in lines if (m := re.search(var["regex"].strip("/"), line))}
                else:
                    m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"])
                    assert m, var["query"]
                    found = promql(
                        stack.url,
                        "/api/v1/series",
                        **{
                            "match[]": substitute(m.group(1), values),
                            "start": f"{stack.start:.3f}",
                            "end": f"{end:.3f}",
                        },
                    )
                    listed = {s.get(m.group(2)) for s in found} - {None}
                assert listed, f"{board['uid']}: variable {var['name']} lists nothing ({var['query']})"
                if var["name"] == "node":
                    # The GPU node variable keys on a figure MIG instances report: the MIG-only node is listed.
                    mig = board["uid"] == "fsdp-gpu-health"
                    assert listed == ({NODE, MIG_NODE} if mig else {NODE}), (board["uid"], listed)


def alerts(url: str, name: str) -> list[dict]:
    return [a for a in promql(url, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == name]


def test_an_xid_line_in_the_kernel_log_fires_the_xid_alerts(stack: Stack) -> None:
    url = stack.url
    # The XID 48 logged before Prometheus started stays silent once a whole window of history exists.
    wait_for(
        lambda: instant(url, f"{c.AGENT_COLLECTIONS.name} offset {RULE_SETTINGS.xid_window}"),
        timeout=60,
        interval=0.5,
        what="an XID window of agent history",
    )
    time.sleep(3 * EVALUATION)
    assert alerts(url, "FsdpGpuXidGpuReset") == []

    # five minutes after the first (same pid): a second report, not a further line of the first one
    with stack.kernel_log.open("a") as log:
        log.write(XID_LINE.format(time="12:05:00", bus="0000:86:00", code=79, text="GPU has fallen off the bus."))
        log.write(XID_LINE.format(time="12:05:00", bus="0000:3b:00", code=48, text="An uncorrectable double bit error"))

    def firing(name: str) -> list[dict]:
        return [a for a in alerts(url, name) if a["state"] == "firing"]

    (reboot,) = wait_for(
        lambda: firing("FsdpGpuXidNodeReboot"), timeout=60, interval=0.25, what="FsdpGpuXidNodeReboot to fire"
    )
    assert reboot["labels"] == {
        "alertname": "FsdpGpuXidNodeReboot",
        "severity": "critical",
        "xid_class": "node_reboot",
        "node": NODE,
        "gpu": "1",
        "gpu_uuid": FAKE_UUID.format(1),
        "pci_bus": "0000:86:00",
        "xid": "79",
    }
    assert f"GPU 1 ({FAKE_UUID.format(1)}) of node {NODE}" in reboot["annotations"]["description"]
    (reset,) = wait_for(
        lambda: firing("FsdpGpuXidGpuReset"),
        timeout=60,
        interval=0.25,
        what="FsdpGpuXidGpuReset to fire on the second XID 48",
    )
    assert reset["labels"] == {
        "alertname": "FsdpGpuXidGpuReset",
        "severity": "critical",
        "xid_class": "gpu_reset",
        "node": NODE,
        "gpu": "0",
        "gpu_uuid": FAKE_UUID.format(0),
        "pci_bus": "0000:3b:00",
        "xid": "48",
    }
    # dcgm-exporter's variant stays quiet on a node whose agent reads the kernel log.
    assert alerts(url, "FsdpDcgmXidCritical") == alerts(url, "FsdpDcgmXidApplicationBurst") == []
