"""Every dcgm-exporter dialect, and a mixed fleet in the middle of a rolling upgrade, give the same
dashboards and the same alerts: real Prometheus servers, one per fleet, with the generated rules.

Stand-in, said here as the rules ask: dcgm-exporter needs a GPU and DCGM, so a static server
**replays** what each release prints (``tests/support/dcgm_exposition``: the released counter lists,
and for 4.9.0/4.10.0 the same lists under the rename table's names and units), scraped as the GPU
Operator's ServiceMonitor does (target labels ``namespace``/``pod``; the exporter's own become
``exported_*``). The CUDA ranks that tie GPUs to a run are the trainer's own exporter fed CUDA-like
figures (``tests/support/replay.py``).

Five fleets of the same four nodes (two H200 nodes, a MIG node, one more): all on 4.5.3-4.8.2
(``Hostname``), all on 4.6.0-4.8.3 (``hostname``), all on 4.9.0, all on 4.10.0, and the mixed fleet
of an upgrade (each node on another release, one node scraped from a 4.9.0 and a 4.10.0 exporter pod
at once). 40 s in, the last XID of GPU 0 of fleet-node-2 changes from 0 to 79 on every fleet. Then
every panel query of the GPU-health and training dashboards and every rule expression is evaluated
on every fleet at one instant: the results must be identical, and the counts say no GPU is there
twice.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from observe import prometheus_local
from observe.monitoring import dashboards, dialects, rules
from observe.monitoring.settings import Settings
from observe.ports import free_port
from tests.support import dcgm_exposition as d
from tests.support.grafana_queries import panel_queries, substitute
from tests.support.processes import wait_for
from tests.support.replay import StaticServer, cuda_rank_exposition

SCRAPE, EVALUATION = 2.0, 1.0
#: Short windows: the last-XID change must be seen against a window of history.
RULE_SETTINGS = Settings(xid_window="30s", xid_for="2s")
FLIP_AFTER = 40.0
RELEASES = ("4.5.3-4.8.2", "4.6.0-4.8.3", "4.9.0", "4.10.0")
FLEETS = {
    **{release: dict.fromkeys(d.fleet_gpus(), (release,)) for release in RELEASES},
    "mixed": d.MIXED,
}
#: CUDA ranks of run llama2-7b-ft: two on fleet-node-1's GPUs, one on fleet-node-4's GPU 0.
RANKS = [
    ("fleet-node-1", d.fleet_gpus()["fleet-node-1"][0].uuid),
    ("fleet-node-1", d.fleet_gpus()["fleet-node-1"][1].uuid),
    ("fleet-node-4", d.fleet_gpus()["fleet-node-4"][0].uuid),
]
#: Canonical-record targets that are empty on a healthy replay: no PCIe replays in the range.
EMPTY = {"fsdp-gpu-health / GPUs with memory or PCIe errors / D"}
#: What tells the dialects apart, and so differs between fleets by design (its own test below).
DIALECT_NAMED = {"fsdp-gpu-health / Nodes by dcgm-exporter dialect / A", dialects.DIALECT}
GPUS = 8  # 2 + 2 + 2 MIG instances + 2

pytestmark = pytest.mark.skipif(
    prometheus_local.binary() is None or shutil.which("promtool") is None,
    reason="the prometheus binary is missing: apt-get install prometheus (CI installs it)",
)


def flipping(before: bytes, after: bytes, at: float) -> Callable[[], bytes]:
    """``before`` until the Unix time ``at``, ``after`` from then on."""
    return lambda: after if time.time() >= at else before


def bodies(flip_at: float) -> dict[str, bytes | Callable[[], bytes]]:
    """Path → body of every fleet's exporters, and of the CUDA ranks."""
    gpus = d.fleet_gpus()
    changed = {
        **gpus,
        "fleet-node-2": [dataclasses.replace(gpus["fleet-node-2"][0], last_xid=79), gpus["fleet-node-2"][1]],
    }
    out: dict[str, bytes | Callable[[], bytes]] = {}
    for fleet, releases in FLEETS.items():
        before, after = d.fleet(releases, gpus), d.fleet(releases, changed)
        for name in before:
            out[f"/{fleet}/{name}"] = flipping(before[name], after[name], flip_at)
    for rank, (node, uuid) in enumerate(RANKS):
        out[f"/rank-{rank}"] = cuda_rank_exposition("llama2-7b-ft", rank, node, uuid, len(RANKS))
    return out


@dataclasses.dataclass
class Fleets:
    """The Prometheus URL of each fleet, and the instant every query is evaluated at."""

    urls: dict[str, str]
    at: float


def scrape_config(fleet: str, port: int) -> list[dict]:
    static = f"127.0.0.1:{port}"
    gpu_operator = {"job": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter"}
    jobs = [
        {
            "job_name": f"dcgm-{name}",
            "metrics_path": f"/{fleet}/{name}",
            "static_configs": [
                {"targets": [static], "labels": {**gpu_operator, "pod": f"nvidia-dcgm-exporter-{name}"}}
            ],
        }
        for name in d.fleet(FLEETS[fleet])
    ]
    jobs += [
        {
            "job_name": f"rank-{rank}",
            "metrics_path": f"/rank-{rank}",
            "static_configs": [{"targets": [static], "labels": {"namespace": "training"}}],
        }
        for rank in range(len(RANKS))
    ]
    return jobs


def query(url: str, expr: str, at: float) -> list[dict]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": expr, "time": f"{at:.3f}"}, timeout=60).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


@pytest.fixture(scope="module")
def fleets(tmp_path_factory) -> Iterator[Fleets]:
    tmp = tmp_path_factory.mktemp("dcgm-dialects")
    (tmp / rules.RULES_FILE).write_text(rules.render(RULE_SETTINGS))
    started = time.time()
    server = StaticServer(bodies(started + FLIP_AFTER)).__enter__()
    running = {}
    try:
        for fleet in FLEETS:
            config = {
                "global": {
                    "scrape_interval": f"{SCRAPE * 1000:.0f}ms",
                    "scrape_timeout": "1900ms",
                    "evaluation_interval": f"{EVALUATION * 1000:.0f}ms",
                },
                "rule_files": [str(tmp / rules.RULES_FILE)],
                "scrape_configs": scrape_config(fleet, server.port),
            }
            running[fleet] = prometheus_local.start(tmp / fleet, config, free_port())
        urls = {fleet: p.url for fleet, p in running.items()}

        def firing_everywhere() -> bool:
            return all(
                query(url, 'ALERTS{alertname="FsdpDcgmXidCritical",alertstate="firing"}', time.time())
                for url in urls.values()
            )

        # discovery (~5 s), a 30 s window of history, the change at 40 s, then xid_for
        wait_for(firing_everywhere, timeout=150, interval=1.0, what="FsdpDcgmXidCritical on every fleet")
        time.sleep(3 * EVALUATION)  # every server has evaluated its rules after the alert fired
        yield Fleets(urls, time.time() - EVALUATION)
    finally:
        for p in running.values():
            p.stop()
        server.__exit__(None, None, None)


def normalised(result: list[dict]) -> list[tuple]:
    """A query result as sorted (labels, value) with values to 9 significant digits."""

    def value(text: str) -> float | str:
        v = float(text)
        return text if not math.isfinite(v) else float(f"{v:.9g}")

    return sorted((tuple(sorted(r["metric"].items())), value(r["value"][1])) for r in result)


def everything(board_settings: Settings) -> list[tuple[str, str]]:
    """(where, instant expression) of every panel target of the GPU-health and training dashboards,
    with Grafana's variables on "All" and a 30 s range, and of every rule."""
    out = []
    for name in ("gpu-health.json", "training-run.json"):
        board = dashboards.dashboards(board_settings)[name]
        values = {v["name"]: v.get("allValue", ".+") for v in board["templating"]["list"] if v["type"] == "query"}
        values.update(__rate_interval="4s", __interval="1s", __range="30s")
        out += [(where, substitute(t["expr"], values)) for where, t in panel_queries(board)]
    for group in rules.rule_file(RULE_SETTINGS)["groups"]:
        out += [(r.get("record") or r["alert"], r["expr"]) for r in group["rules"]]
    return out


def test_every_panel_and_rule_gives_the_same_result_in_every_dialect_and_on_the_mixed_fleet(fleets: Fleets) -> None:
    queries = everything(Settings())

    def run(url: str) -> dict[str, list[tuple]]:
        return {where: normalised(query(url, expr, fleets.at)) for where, expr in queries}

    with ThreadPoolExecutor(len(fleets.urls)) as pool:
        results = dict(zip(fleets.urls, pool.map(run, fleets.urls.values()), strict=True))
    reference = results[RELEASES[0]]
    for fleet, found in results.items():
        differ = [where for where in reference if found[where] != reference[where] and where not in DIALECT_NAMED]
        assert not differ, f"{fleet} differs from {RELEASES[0]} in: {differ}"
    # ... and that sameness is not of empty answers: every panel on a canonical DCGM record has data
    reads_dcgm = [where for where, expr in queries if "gpu:dcgm_" in expr and " / " in where]
    assert len(reads_dcgm) > 25
    assert [where for where in reads_dcgm if not reference[where] and where not in EMPTY] == []
    assert [where for where in EMPTY if reference[where]] == []


def test_no_gpu_is_counted_twice_and_each_node_names_its_dialect(fleets: Fleets) -> None:
    for fleet, url in fleets.urls.items():
        for figure in dialects.FIGURES:
            per_gpu = query(url, f"count by ({dialects.GPU_IDENTITY}) ({figure.record}) > 1", fleets.at)
            assert per_gpu == [], (fleet, figure.record, per_gpu)
        (reporting,) = query(url, "count(gpu:dcgm_temperature_celsius:max)", fleets.at)
        assert float(reporting["value"][1]) == GPUS, fleet
        spoken = {
            (r["metric"]["node"], r["metric"]["dialect"])
            for r in query(url, f"count by (node, dialect) ({dialects.DIALECT})", fleets.at)
        }
        name = {"4.5.3-4.8.2": "up-to-4.8.2", "4.6.0-4.8.3": "4.8.3", "4.9.0": "4.9", "4.10.0": "4.10"}
        if fleet == "mixed":
            assert spoken == {(node, name[releases[0]]) for node, releases in d.MIXED.items()}
        else:
            assert spoken == {(node, name[fleet]) for node in d.fleet_gpus()}


def test_the_last_xid_change_pages_once_per_gpu_in_every_dialect(fleets: Fleets) -> None:
    for fleet, url in fleets.urls.items():
        firing = query(url, 'ALERTS{alertname="FsdpDcgmXidCritical",alertstate="firing"}', fleets.at)
        assert [
            {k: r["metric"][k] for k in ("node", "gpu", "gpu_uuid", "pci_bus", "xid", "xid_class")} for r in firing
        ] == [
            {
                "node": "fleet-node-2",
                "gpu": "0",
                "gpu_uuid": d.fleet_gpus()["fleet-node-2"][0].uuid,
                "pci_bus": "0000:18:00",
                "xid": "79",
                "xid_class": "node_reboot",
            }
        ], fleet
