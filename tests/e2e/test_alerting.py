"""From the kernel log to a person's receiver, with every component real but the GPU.

A real agent (``python -m observe.cli agent``) on the stand-in NVML (``tests/support/fake_nvml.c``:
the only double here, there is no GPU) follows a kernel-log file; a real Prometheus scrapes it and
evaluates the generated rules; a real Alertmanager (Debian's ``prometheus-alertmanager``) runs the
generated route tree with the generated inhibitions; its receivers are webhooks to a local HTTP
server in this test. Only the intervals are short, through ``Settings`` (the test's config alone).

Node ``gpu-node-1`` has three GPUs. GPU 0 falls off the bus (NVML: lost) first. Then one write
to the kernel log carries XID 79 on GPU 2 (node reboot), XID 74 (NVLink) on GPUs 0, 1 and 2,
XID 48 (GPU reset) on GPU 1 and three XID 13 on GPU 1 (an application burst). Exactly this reaches
the receivers:

- ``FsdpGpuLost`` for GPU 0 (page), never resolved (the GPU stays lost);
- one ``node_reboot`` notification, XID 79 on GPU 2 (page), then its resolution;
- one ``nvlink_fabric`` notification for GPUs 1 and 2 together (GPU 0's is muted: it is lost),
  then its resolution;
- nothing for XID 48 and the burst: the node's reboot-class XID inhibits them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from observe import prometheus_local, xid
from observe.monitoring import alertmanager, rules
from observe.monitoring.settings import Settings
from observe.ports import free_port
from tests.support import alertmanager_local
from tests.support.fake_nvml import FakeNvml
from tests.support.processes import AgentProcess, wait_for
from tests.support.webhook import WebhookReceiver

pytestmark = pytest.mark.skipif(
    prometheus_local.binary() is None or alertmanager_local.binary() is None,
    reason="needs prometheus and prometheus-alertmanager (apt-get install prometheus "
    "prometheus-alertmanager; CI installs them)",
)
NODE = "gpu-node-1"
#: Short windows for the test only: XIDs count for 8 s, alerts fire at once, a group waits 3 s for
#: the rest of its burst (the kernel-log lines may straddle one scrape) and is re-notified after 2 s;
#: the reboot-class alert keeps firing 5 s past its window, so the burst it mutes (which may have
#: reached Prometheus a scrape later) resolves while still muted.
FAST = Settings(
    xid_window="8s",
    xid_for="0s",
    xid_reboot_keep_firing_for="5s",
    gpu_lost_for="0s",
    group_wait="3s",
    group_interval="2s",
    repeat_interval="1h",
)
LINES = [
    "NVRM: Xid (PCI:0000:30:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    *(
        f"NVRM: Xid (PCI:0000:{bus}:00): 74, pid=4242, name=python, NVLink: fatal error detected on link 3"
        for bus in ("10", "20", "30")
    ),
    "NVRM: Xid (PCI:0000:20:00): 48, pid=4242, name=python, An uncorrectable double bit error (DBE) has been detected",
    *(  # three faults of one process, 5 s apart (one fault's several lines count once)
        f"[{t}.000000] NVRM: Xid (PCI:0000:20:00): 13, pid=4242, name=python, Graphics SM Warp Exception on "
        "(GPC 1, TPC 0, SM 1)"
        for t in (100, 105, 110)
    ),
]


@pytest.fixture
def stack(native, tmp_path: Path) -> Iterator[dict]:
    """Agent, Prometheus (generated rules), Alertmanager (generated config + webhooks) and the receiver."""
    nvml = FakeNvml(native.fake_nvml, tmp_path / "scenario.conf")
    nvml.set("gpus 3")
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.124.06\n")
    webhook = WebhookReceiver()
    names = alertmanager.receiver_names(FAST)
    receivers = [{"name": n, "webhook_configs": [{"url": f"{webhook.url}/{n}", "send_resolved": True}]} for n in names]
    started: list = []
    try:
        am = alertmanager_local.start(tmp_path / "am", alertmanager.render(FAST, receivers), free_port())
        started.append(am)
        agent = AgentProcess(
            ["--interval", "0.2", "--node", NODE, "--kernel-log", str(kernel_log)], nvml.env(), tmp_path
        )
        started.append(agent)
        (tmp_path / "rules.yaml").write_text(rules.render(FAST))
        cfg = prometheus_local.config(
            {"agent": [agent.base.removeprefix("http://")]},
            [tmp_path / "rules.yaml"],
            scrape_interval="1s",
            evaluation_interval="1s",
        )
        cfg["alerting"] = {
            "alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": [am.url.removeprefix("http://")]}]}]
        }
        prom = prometheus_local.start(tmp_path / "prom", cfg, free_port())
        started.append(prom)
        yield {"nvml": nvml, "log": kernel_log, "webhook": webhook, "agent": agent, "prom": prom, "am": am}
    finally:
        for proc in reversed(started):
            proc.stop()
        webhook.close()


def query(prom: prometheus_local.LocalPrometheus, expr: str) -> list[dict]:
    body = httpx.get(f"{prom.url}/api/v1/query", params={"query": expr}, timeout=5).raise_for_status().json()
    return body["data"]["result"]


def by_group(webhook: WebhookReceiver) -> dict[tuple, list[tuple[str, dict]]]:
    """Notifications per group (its group labels), oldest first."""
    groups: dict[tuple, list[tuple[str, dict]]] = {}
    for path, payload in webhook.received():
        groups.setdefault(tuple(sorted(payload["groupLabels"].items())), []).append((path, payload))
    return groups


def gpus(alerts: list[dict]) -> set[str]:
    return {a["labels"]["gpu"] for a in alerts}


def test_xids_reach_the_receivers_grouped_inhibited_and_resolved(stack: dict) -> None:
    prom, webhook, agent = stack["prom"], stack["webhook"], stack["agent"]
    snap = wait_for(lambda: (s := agent.snapshot()) and len(s["gpus"]) == 3 and s, what="3 GPUs in the agent")
    uuid = {str(g["index"]): g["uuid"] for g in snap["gpus"]}
    # The XID alerts count a GPU's first XID only where the agent was scraped a window ago.
    wait_for(
        lambda: query(prom, f"fsdp_node_agent_collections_total offset {FAST.xid_window}"),
        timeout=60,
        interval=0.5,
        what=f"the agent scraped {FAST.xid_window} ago",
    )

    stack["nvml"].set("gpus 3\nlost@0 1")
    lost_key = (("alertname", "FsdpGpuLost"), ("node", NODE))
    wait_for(lambda: lost_key in by_group(webhook), timeout=30, interval=0.2, what="the lost-GPU page")

    with stack["log"].open("a") as log:
        log.write("".join(line + "\n" for line in LINES))
    reboot_key = (("node", NODE), ("xid_class", "node_reboot"))
    fabric_key = (("node", NODE), ("xid_class", "nvlink_fabric"))

    def resolved() -> bool:
        groups = by_group(webhook)
        return all(groups.get(k) and groups[k][-1][1]["status"] == "resolved" for k in (reboot_key, fabric_key))

    def muted() -> bool:
        """Alertmanager holds the alerts nobody was told about, suppressed by an inhibition."""
        state = {(a["labels"]["alertname"], a["labels"]["gpu"]): a["status"] for a in stack["am"].alerts()}
        wanted = (("FsdpGpuXidGpuReset", "1"), ("FsdpGpuXidApplicationBurst", "1"), ("FsdpGpuXidNvlinkFabric", "0"))
        return all(state.get(k, {}).get("state") == "suppressed" and state[k]["inhibitedBy"] for k in wanted)

    wait_for(muted, timeout=30, interval=0.2, what="the inhibited XID alerts held in Alertmanager")
    wait_for(resolved, timeout=60, interval=0.2, what="the XID groups resolved")
    groups = by_group(webhook)

    assert set(groups) == {lost_key, reboot_key, fabric_key}, groups.keys()  # nothing for gpu_reset or application
    for key, receiver in (
        (lost_key, FAST.receiver_node_reboot),
        (reboot_key, FAST.receiver_node_reboot),
        (fabric_key, FAST.receiver_nvlink_fabric),
    ):
        assert {path for path, _ in groups[key]} == {f"/{receiver}"}
        assert {payload["receiver"] for _, payload in groups[key]} == {receiver}

    # The lost GPU: one page, still firing.
    (lost,) = [p for _, p in groups[lost_key]]
    assert lost["status"] == "firing"
    (alert,) = lost["alerts"]
    assert alert["labels"] == {
        "alertname": "FsdpGpuLost",
        "node": NODE,
        "gpu": "0",
        "gpu_uuid": uuid["0"],
        "pci_bus": "0000:10:00",
        "severity": "critical",
    }
    assert alert["annotations"]["recommended_action"] == xid.REBOOT
    assert alert["annotations"]["runbook_url"] == FAST.runbook("fsdpgpulost")

    # The reboot-class XID: one notification, one alert with every field, then resolved.
    reboot = [p for _, p in groups[reboot_key]]
    assert [p["status"] for p in reboot] == ["firing", "resolved"]
    (alert,) = reboot[0]["alerts"]
    assert_every_field(alert, 79, "node_reboot", "2", uuid["2"], "0000:30:00")
    assert gpus(reboot[1]["alerts"]) == {"2"} and reboot[1]["alerts"][0]["status"] == "resolved"

    # NVLink on three GPUs: one notification for GPUs 1 and 2 (GPU 0 is lost: muted), then resolved.
    fabric = [p for _, p in groups[fabric_key]]
    assert fabric[0]["status"] == "firing" and gpus(fabric[0]["alerts"]) == {"1", "2"}
    assert all(a["status"] == "firing" for a in fabric[0]["alerts"])
    for alert in fabric[0]["alerts"]:
        g = alert["labels"]["gpu"]
        assert_every_field(alert, 74, "nvlink_fabric", g, uuid[g], f"0000:{int(g) + 1}0:00")
    assert fabric[-1]["status"] == "resolved" and gpus(fabric[-1]["alerts"]) == {"1", "2"}
    assert all(gpus(p["alerts"]) <= {"1", "2"} for p in fabric) and len(fabric) <= 3  # at most one partial


def assert_every_field(alert: dict, code: int, xid_class: str, gpu: str, gpu_uuid: str, pci_bus: str) -> None:
    """node, GPU index, UUID, PCI bus, XID code, name, class, action and runbook, from the catalogue."""
    name = rules.CRITICAL_XID_CLASSES[xid_class]
    assert alert["labels"] == {
        "alertname": name,
        "node": NODE,
        "gpu": gpu,
        "gpu_uuid": gpu_uuid,
        "pci_bus": pci_bus,
        "xid": str(code),
        "xid_class": xid_class,
        "severity": "critical",
    }
    info = xid.lookup(code)
    notes = alert["annotations"]
    assert notes["xid_name"] == info.name
    assert notes["recommended_action"] == info.action
    assert notes["runbook_url"] == FAST.runbook(name.lower())
    assert notes["summary"].startswith(f"XID {code} on GPU {gpu} ({gpu_uuid}) of node {NODE}")
    assert f"PCI {pci_bus}" in notes["description"] and info.action in notes["description"]
