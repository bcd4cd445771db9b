"""The generated rules under Prometheus' own ``promtool``: ``check rules``, then ``test rules``.

Each alert is evaluated one evaluation before its ``for`` elapses (nothing firing) and at the
evaluation where it does (firing, with its exact labels and annotations), over input series
shaped like what the trainer, the agent and dcgm-exporter export. The cases below assume the
default settings (asserted first), so they also pin the committed rule file's behaviour.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from observe import catalog as c
from observe import xid
from observe.monitoring import fields, rules
from observe.monitoring.settings import Settings

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is missing: apt-get install prometheus (CI installs it)"
)
S = Settings()
BOOK = S.runbook_base_url

# --- input series ------------------------------------------------------------------------------

NODE = "gpu-node-1"
AGENT = f'node="{NODE}",instance="{NODE}",job="fsdp-observe-agent",pod="fsdp-observe-agent-x7k2p"'
GPU_A = {"gpu": "0", "gpu_uuid": "GPU-0000000a", "pci_bus": "0000:3b:00"}
RANK = (
    'namespace="training",run_id="llama-ft",local_rank="{r}",rank="{r}",node="gpu-node-1",'
    'gpu_uuid="GPU-0000000{g}",instance="10.0.7.21:{port}",job="training/fsdp-observe-trainer",'
    'pod="llama-ft-worker-0"'
)


def rank_labels(r: int, gpu: str) -> str:
    return RANK.format(r=r, g=gpu, port=9500 + r)


def xid_series(labels: dict[str, str], code: int, severity: str, agent: str = AGENT) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in {**labels, "xid": str(code), "severity": severity}.items())
    return f"{c.GPU_XID_ERRORS.name}{{{agent},{inner}}}"


def xid_time(labels: dict[str, str], code: int, severity: str, agent: str = AGENT) -> str:
    """The agent's time of the latest XID of ``code`` on the GPU (a Unix time; promtool's clock
    starts at 0, so a minute into the test is 60)."""
    return xid_series(labels, code, severity, agent).replace(c.GPU_XID_ERRORS.name, c.GPU_XID_LAST_TIME.name, 1)


AGENT_SERIES = [
    {"series": f"{c.AGENT_COLLECTIONS.name}{{{AGENT}}}", "values": "0+60x90"},
    {"series": f"{c.NODE_UPTIME.name}{{{AGENT}}}", "values": "86400+60x90"},  # up a day
    {"series": f'{c.AGENT_UP.name}{{{AGENT},source="kernel_log"}}', "values": "1x90"},
    {"series": f'{c.TRAIN_INFO.name}{{{rank_labels(0, "a")},model="llama2-7b",world_size="2"}}', "values": "1x90"},
]


def _parse(inner: str) -> dict[str, str]:
    """The labels of a promtool label string ``a="b",c="d"``."""
    out = {}
    for part in inner.rstrip('"').split('",'):
        key, value = part.split('="', 1)
        out[key] = value
    return out


def xid_description(code: int, severity: str, gpu: dict[str, str], runs: str, node: str = NODE) -> str:
    return (
        f"The driver reported XID {code} (class {severity}) for {gpu_text(gpu, node)}, "
        f"PCI {gpu['pci_bus']}, within the last 10m. Runs on this GPU: {runs}. {xid.lookup(code).action}"
    )


def catalogue(code: int) -> dict[str, str]:
    """The annotations every XID alert carries from the catalogue: the code's name and action."""
    return {"xid_name": xid.lookup(code).name, "recommended_action": xid.lookup(code).action}


def gpu_text(gpu: dict[str, str], node: str = NODE) -> str:
    return f"GPU {gpu['gpu']} ({gpu['gpu_uuid']}) of node {node}"


# --- the cases: (alert, input series, silent at, firing at, [(labels, annotations)]) --------------

GPU_B = {"gpu": "1", "gpu_uuid": "GPU-0000000b", "pci_bus": "0000:86:00"}
GPU_C = {"gpu": "2", "gpu_uuid": "GPU-0000000c", "pci_bus": "0000:af:00"}
GPU_D = {"gpu": "3", "gpu_uuid": "GPU-0000000d", "pci_bus": "0000:d8:00"}
OLD_48 = xid_series(GPU_A, 48, "gpu_reset")


def xid_alert(
    name: str, code: int, severity: str, gpu: dict[str, str], level: str, runs: str, node: str = NODE
) -> tuple[dict, dict]:
    effect = {
        "gpu_reset": "the GPU needs a reset",
        "node_reboot": "the node needs a reboot",
        "nvlink_fabric": "an NVLink or fabric error",
    }[severity]
    return (
        {**gpu, "node": node, "xid": str(code), "severity": level, "xid_class": severity},
        {
            "summary": f"XID {code} on {gpu_text(gpu, node)}: {effect}",
            "description": xid_description(code, severity, gpu, runs, node),
            "runbook_url": f"{BOOK}#{name.lower()}",
            **catalogue(code),
        },
    )


CASES = [
    # An XID already counted when Prometheus starts stays silent (5m, 15m); a second one of the
    # same code on the same GPU (increase > 0) fires.
    (
        "FsdpGpuXidGpuReset",
        [{"series": OLD_48, "values": "1x20 2x60"}],
        [5, 15, 21],
        22,
        [xid_alert("FsdpGpuXidGpuReset", 48, "gpu_reset", GPU_A, "critical", "llama-ft")],
    ),
    # The first XID 79 of a GPU is a new series already at 1: increase() alone would miss it; its
    # kernel timestamp (15m) is recent.
    (
        "FsdpGpuXidNodeReboot",
        [
            {"series": xid_series(GPU_B, 79, "node_reboot"), "values": "_x15 1x60"},
            {"series": xid_time(GPU_B, 79, "node_reboot"), "values": "_x15 900x60"},
        ],
        [15],
        16,
        [xid_alert("FsdpGpuXidNodeReboot", 79, "node_reboot", GPU_B, "critical", "none seen")],
    ),
    (
        "FsdpGpuXidNvlinkFabric",
        [
            {"series": xid_series(GPU_C, 74, "nvlink_fabric"), "values": "_x30 1x50"},
            {"series": xid_time(GPU_C, 74, "nvlink_fabric"), "values": "_x30 1800x50"},
        ],
        [30],
        31,
        [xid_alert("FsdpGpuXidNvlinkFabric", 74, "nvlink_fabric", GPU_C, "critical", "none seen")],
    ),
    # Three application-class XIDs within 10 minutes make a burst; two do not.
    (
        "FsdpGpuXidApplicationBurst",
        [{"series": xid_series(GPU_D, 13, "application"), "values": "1x10 2 3 4 4x60"}],
        [12, 13],
        14,
        [
            (
                {**GPU_D, "node": NODE, "xid": "13", "severity": "warning", "xid_class": "application"},
                {
                    "summary": f"3 XID 13 errors on {gpu_text(GPU_D)} within 10m",
                    "description": f"XID 13 (class application) came 3 times within 10m on {gpu_text(GPU_D)}, PCI "
                    f"{GPU_D['pci_bus']} (3 or more make a burst). Runs on this GPU: none seen. One such XID is "
                    f"usually the job's own fault; a burst on one GPU points at the GPU or a crash loop. "
                    f"{xid.APP_BUG}",
                    "runbook_url": f"{BOOK}#fsdpgpuxidapplicationburst",
                    **catalogue(13),
                },
            )
        ],
    ),
    (
        "FsdpGpuXidUnknown",
        [
            {"series": xid_series(GPU_D, 99999, "unknown"), "values": "_x40 1x40"},
            {"series": xid_time(GPU_D, 99999, "unknown"), "values": "_x40 2400x40"},
        ],
        [40],
        41,
        [
            (
                {**GPU_D, "node": NODE, "xid": "99999", "severity": "warning", "xid_class": "unknown"},
                {
                    "summary": f"Unknown XID 99999 on {gpu_text(GPU_D)}",
                    "description": f"The driver reported XID 99999, which the catalogue (observe/xid.py) does not know, for "
                    f"{gpu_text(GPU_D)}, PCI {GPU_D['pci_bus']}, within the last 10m. Runs on this GPU: none seen. "
                    f"{xid.UNKNOWN_ACTION}",
                    "runbook_url": f"{BOOK}#fsdpgpuxidunknown",
                    "xid_name": "Unknown XID",
                    "recommended_action": xid.UNKNOWN_ACTION,
                },
            )
        ],
    ),
]

DCGM_ONLY = "dcgm-only-node"
#: dcgm-exporter 4.5.3-4.8.2 as the GPU Operator scrapes it (job from its ServiceMonitor).
DCGM_LABELS = (
    'gpu="{gpu}",UUID="GPU-d{gpu}",pci_bus_id="00000000:1{gpu}:00.0",device="nvidia{gpu}",'
    'modelName="NVIDIA H200",Hostname="{node}",DCGM_FI_DRIVER_VERSION="570.124.06",instance="10.0.7.9:9400",'
    'job="nvidia-dcgm-exporter",namespace="gpu-operator",pod="nvidia-dcgm-exporter-4xk2q"'
)


def dcgm(name: str, node: str, gpu: int, pod: str = "nvidia-dcgm-exporter-4xk2q", **extra: str) -> str:
    more = "".join(f',{k}="{v}"' for k, v in extra.items())
    labels = DCGM_LABELS.format(gpu=gpu, node=node).replace("nvidia-dcgm-exporter-4xk2q", pod)
    return f"{name}{{{labels}{more}}}"


def last_xid(node: str, gpu: int, code: int, pod: str = "nvidia-dcgm-exporter-4xk2q") -> str:
    return dcgm("DCGM_FI_DEV_XID_ERRORS", node, gpu, pod, err_code=str(code), err_msg="made up")


def dcgm_tail() -> str:
    return "Runs on this GPU: none seen. Read from dcgm-exporter because no fsdp-observe agent reads XIDs on this node."


def dcgm_gpu(gpu: int, node: str = DCGM_ONLY) -> dict[str, str]:
    """The alert labels of a DCGM GPU: our names, and the PCI bus in the agent's form."""
    return {"node": node, "gpu": str(gpu), "gpu_uuid": f"GPU-d{gpu}", "pci_bus": f"0000:1{gpu}:00"}


def dcgm_which(code: int, xid_class: str, gpu: int, node: str = DCGM_ONLY) -> str:
    g = dcgm_gpu(gpu, node)
    return f"XID {code} (class {xid_class}) for {gpu_text(g, node)}, PCI {g['pci_bus']}"


DCGM_MEANING = (
    "the class means a GPU reset, a node reboot or NVLink/fabric recovery (see the XID table of the runbook)."
)


def dcgm_what(code: int, xid_class: str, gpu: int, node: str = DCGM_ONLY) -> str:
    return f"{dcgm_which(code, xid_class, gpu, node)}; {DCGM_MEANING}"


def dcgm_critical(code: int, xid_class: str, gpu: int, node: str = DCGM_ONLY) -> tuple[dict, dict]:
    """FsdpDcgmXidCritical's labels and annotations for a change of the last XID to ``code``."""
    return (
        {**dcgm_gpu(gpu, node), "xid": str(code), "xid_class": xid_class, "severity": "critical"},
        {
            "summary": f"XID {code} on {gpu_text(dcgm_gpu(gpu, node), node)} (dcgm-exporter)",
            "description": f"dcgm-exporter's last XID changed to {dcgm_what(code, xid_class, gpu, node)} {dcgm_tail()}",
            "runbook_url": f"{BOOK}#fsdpdcgmxidcritical",
            **catalogue(code),
        },
    )


CASES += [
    # dcgm-exporter's last-XID field on a node without our agent. GPU 0's value changes from 0
    # to 79 at 15m (a new series, err_code="79"): it fires once, for one XID window, and is
    # silent again when the window has passed (26m) though the value stays 79. GPU 1 holds 48
    # from the start (a steady value: never fires, not even before an XID window of history
    # exists). The same change on a node whose agent reads the kernel log stays with the agent's
    # alerts.
    (
        "FsdpDcgmXidCritical",
        [
            {"series": last_xid(DCGM_ONLY, 0, 0), "values": "0x14"},
            {"series": last_xid(DCGM_ONLY, 0, 79), "values": "_x15 79x60"},
            {"series": last_xid(DCGM_ONLY, 1, 48), "values": "48x75"},
            {"series": last_xid(NODE, 2, 0), "values": "0x14"},
            {"series": last_xid(NODE, 2, 79), "values": "_x15 79x60"},
        ],
        [1, 15, 26, 40],
        16,
        [
            (
                {**dcgm_gpu(0), "xid": "79", "xid_class": "node_reboot", "severity": "critical"},
                {
                    "summary": f"XID 79 on {gpu_text(dcgm_gpu(0), DCGM_ONLY)} (dcgm-exporter)",
                    "description": f"dcgm-exporter's last XID changed to {dcgm_what(79, 'node_reboot', 0)} "
                    f"{dcgm_tail()}",
                    "runbook_url": f"{BOOK}#fsdpdcgmxidcritical",
                    **catalogue(79),
                },
            )
        ],
    ),
    (
        "FsdpGpuLost",
        [
            {"series": f'{c.GPU_LOST.name}{{{AGENT},gpu="0",gpu_uuid="GPU-0000000a"}}', "values": "0x5 1x10"},
            {"series": f'{c.GPU_LOST.name}{{{AGENT},gpu="1",gpu_uuid="GPU-0000000b"}}', "values": "0x15"},
            *(
                {
                    "series": f'{c.GPU_INFO.name}{{{AGENT},gpu="{g["gpu"]}",gpu_uuid="{g["gpu_uuid"]}",name="NVIDIA H100",'
                    f'pci_bus="{g["pci_bus"]}",driver_version="570.124.06"}}',
                    "values": "1x15",
                }
                for g in (GPU_A, GPU_B)
            ),
        ],
        [6],
        7,
        [
            (
                {"node": NODE, "gpu": "0", "gpu_uuid": "GPU-0000000a", "pci_bus": "0000:3b:00", "severity": "critical"},
                {
                    "summary": f"GPU 0 (GPU-0000000a) of node {NODE} is lost",
                    "description": f"NVML reports GPU 0 (GPU-0000000a) of node {NODE}, PCI 0000:3b:00, lost: it fell off the bus "
                    f"and answers no query. Runs on this GPU: llama-ft. {xid.REBOOT}",
                    "runbook_url": f"{BOOK}#fsdpgpulost",
                    "recommended_action": xid.REBOOT,
                },
            )
        ],
    ),
]


CASES += [
    # GPU 0's NVML reading stops finishing at 10m (stale, its age growing a minute a minute); GPU
    # 1 was stale for one scrape only (a slow call, not a hang). Five minutes later: the first.
    (
        "FsdpGpuReadingStale",
        [
            {"series": f'{c.GPU_READING_STALE.name}{{{AGENT},gpu="0",gpu_uuid="GPU-0000000a"}}', "values": "0x9 1x20"},
            {
                "series": f'{c.GPU_READING_AGE.name}{{{AGENT},gpu="0",gpu_uuid="GPU-0000000a"}}',
                "values": "1x9 60+60x20",
            },
            {
                "series": f'{c.GPU_READING_STALE.name}{{{AGENT},gpu="1",gpu_uuid="GPU-0000000b"}}',
                "values": "0x9 1 0x19",
            },
            {"series": f'{c.GPU_READING_AGE.name}{{{AGENT},gpu="1",gpu_uuid="GPU-0000000b"}}', "values": "1x9 2 1x19"},
        ],
        [11, 14],
        15,
        [
            (
                {"node": NODE, "gpu": "0", "gpu_uuid": "GPU-0000000a", "severity": "warning"},
                {
                    "summary": f"NVML readings of GPU 0 (GPU-0000000a) of node {NODE} are stale",
                    "description": f"The agent's NVML reading of GPU 0 (GPU-0000000a) of node {NODE} has not finished within its "
                    f"deadline for 6m 0s: a driver call that hangs (the agent leaves the GPU's figures out and goes "
                    f"on with the others). Runs on this GPU: llama-ft. {rules.STALE_ACTION}",
                    "runbook_url": f"{BOOK}#fsdpgpureadingstale",
                    "recommended_action": rules.STALE_ACTION,
                },
            )
        ],
    ),
    # GPU 0's readings all fail from 10m (unreadable, its age growing); GPU 1 failed one scrape only.
    (
        "FsdpGpuUnreadable",
        [
            {"series": f'{c.GPU_UNREADABLE.name}{{{AGENT},gpu="0",gpu_uuid="GPU-0000000a"}}', "values": "0x9 1x20"},
            {
                "series": f'{c.GPU_READING_AGE.name}{{{AGENT},gpu="0",gpu_uuid="GPU-0000000a"}}',
                "values": "0x9 60+60x20",
            },
            {"series": f'{c.GPU_UNREADABLE.name}{{{AGENT},gpu="1",gpu_uuid="GPU-0000000b"}}', "values": "0x9 1 0x19"},
            {"series": f'{c.GPU_READING_AGE.name}{{{AGENT},gpu="1",gpu_uuid="GPU-0000000b"}}', "values": "0x9 60 0x19"},
        ],
        [11, 14],
        15,
        [
            (
                {"node": NODE, "gpu": "0", "gpu_uuid": "GPU-0000000a", "severity": "warning"},
                {
                    "summary": f"GPU 0 (GPU-0000000a) of node {NODE} answers no NVML reading",
                    "description": f"Every NVML reading of GPU 0 (GPU-0000000a) of node {NODE} has failed for 6m 0s "
                    "with an error other than lost (the reason is the agent's /snapshot: unreadable), or the GPU is "
                    "gone from NVML's device count. Runs on this GPU: llama-ft. "
                    f"{rules.UNREADABLE_ACTION}",
                    "runbook_url": f"{BOOK}#fsdpgpuunreadable",
                    "recommended_action": rules.UNREADABLE_ACTION,
                },
            )
        ],
    ),
]


def phases(labels: str, current: str, minutes: int) -> list[dict]:
    return [
        {"series": f'{c.TRAIN_PHASE.name}{{{labels},phase="{p}"}}', "values": f"{int(p == current)}x{minutes}"}
        for p in ("training", "checkpointing", "finished")
    ]


def stalled(likely_cause: str, minutes: int = 18) -> dict[str, str]:
    """The annotations of rank 0's stall alert, with its ``likely_cause``."""
    return {
        "summary": "Run llama-ft: rank 0 made no step for 15m",
        "description": f"Rank 0 of run llama-ft on node gpu-node-1 (GPU GPU-0000000a) completed its last optimizer "
        f"step {minutes}m 0s ago and is still training. Whether its ranks wait in a collective is unknown "
        "(collective tracking is off: FSDP_OBSERVE_COLLECTIVES=0). A hung collective, a dead peer or a stuck "
        "data loader stops every rank; look for the rank whose log stops first (likely_cause names "
        "a GPU fault on the run's nodes).",
        "runbook_url": f"{BOOK}#fsdptrainingstalled",
        "likely_cause": likely_cause,
    }


DONE = RANK.format(r=0, g="e", port=9600).replace("llama-ft", "done-ft")
R0 = rank_labels(0, "a")

CASES += [
    # Rank 0 of llama-ft stops stepping at 10m (its timestamp stays at 600 s); 15m later it is a
    # stall. A finished run's old timestamp is not.
    (
        "FsdpTrainingStalled",
        [
            {"series": f"{c.TRAIN_LAST_STEP_TIMESTAMP.name}{{{R0}}}", "values": "0+60x10 600x40"},
            *phases(R0, "training", 50),
            {"series": f"{c.TRAIN_LAST_STEP_TIMESTAMP.name}{{{DONE}}}", "values": "0+60x5 300x45"},
            *phases(DONE, "finished", 50),
        ],
        [26, 27],
        28,
        [
            (
                {**_parse(R0), "phase": "training", "severity": "critical"},
                stalled("none seen: no critical XID and no lost GPU on the run's nodes in the last 27m"),
            )
        ],
    ),
]


OTHER = "gpu-node-9"
OTHER_AGENT = AGENT.replace(NODE, OTHER)

CAUSE_CASES = [
    # Rank 0 stops stepping at 10m: GPU 1 of its node fell off the bus (XID 79) at 9m, and GPU 0 of
    # a node the run does not use had an XID 48. The stall names the first and not the second, though
    # both XID alerts resolved long before the stall fires (28m).
    (
        "FsdpTrainingStalled",
        [
            {"series": f"{c.TRAIN_LAST_STEP_TIMESTAMP.name}{{{R0}}}", "values": "0+60x10 600x40"},
            *phases(R0, "training", 50),
            {"series": xid_series(GPU_B, 79, "node_reboot"), "values": "_x9 1x41"},
            {"series": xid_time(GPU_B, 79, "node_reboot"), "values": "_x9 540x41"},
            {"series": f"{c.AGENT_COLLECTIONS.name}{{{OTHER_AGENT}}}", "values": "0+60x50"},
            {"series": xid_series(GPU_A, 48, "gpu_reset", OTHER_AGENT), "values": "_x9 1x41"},
            {"series": xid_time(GPU_A, 48, "gpu_reset", OTHER_AGENT), "values": "_x9 540x41"},
        ],
        [27],
        28,
        [
            (
                {**_parse(R0), "phase": "training", "severity": "critical"},
                stalled(
                    "FsdpGpuXidNodeReboot on node gpu-node-1, GPU 1 (GPU-0000000b), PCI 0000:86:00, XID 79 (class node_reboot)"
                ),
            )
        ],
    ),
]

CASES += [
    # 1000 tokens/s for half an hour, then 500 from 31m: below 70 % of the median of the hour
    # before the last 10 minutes.
    (
        "FsdpThroughputDrop",
        [{"series": f"{c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name}{{{R0}}}", "values": "1000x30 500x40"}],
        [30, 45],
        46,
        [
            (
                {"namespace": "training", "run_id": "llama-ft", "severity": "warning"},
                {
                    "summary": "Run llama-ft: tokens/s fell below 70% of its recent level",
                    "description": "Run llama-ft (namespace training, nodes gpu-node-1) processes 500 tokens/s, below 70% of its "
                    "median over the 1h before the last 10m, for 15m. Look for a straggler rank, a throttled or "
                    "erroring GPU, data-loader waits, or checkpoints in the window.",
                    "runbook_url": f"{BOOK}#fsdpthroughputdrop",
                },
            )
        ],
    ),
]


def agent_on(node: str, pod: str) -> str:
    """An agent pod's target labels on ``node``."""
    return f'node="{node}",instance="{pod}",job="fsdp-observe-agent",pod="{pod}"'


def fresh_agent(node: str, pod: str, start: int, uptime: int) -> list[dict]:
    """An agent first scraped at minute ``start`` on a node up ``uptime`` seconds then, reading the kernel log."""
    labels = agent_on(node, pod)
    return [
        {"series": f"{c.AGENT_COLLECTIONS.name}{{{labels}}}", "values": f"_x{start} 0+60x40"},
        {"series": f"{c.NODE_UPTIME.name}{{{labels}}}", "values": f"_x{start} {uptime}+60x40"},
        {"series": f'{c.AGENT_UP.name}{{{labels},source="kernel_log"}}', "values": f"_x{start} 1x40"},
    ]


REPAIRED, LONG_UP, NEW_AGENT = "gpu-node-7", "gpu-node-8", "gpu-node-9"
NEW_POD = AGENT.replace("fsdp-observe-agent-x7k2p", "fsdp-observe-agent-b9q4z").replace(
    f'instance="{NODE}"', 'instance="10.0.7.22:9401"'
)
DCGM_REPAIRED, DCGM_LONG_UP = "dcgm-node-2", "dcgm-node-3"


def node_boot(node: str, boot_time: int) -> dict:
    """node-exporter's boot time of ``node`` (kube-prometheus-stack: instance = node name)."""
    return {
        "series": f'{fields.NODE_BOOT_TIME}{{instance="{node}",job="node-exporter"}}',
        "values": f"{boot_time}x40",
    }


#: XIDs at boot, after repair, and on an agent new to Prometheus: one rule shape (the XID's own
#: kernel timestamp, and the node's uptime). Times are promtool's, whose clock starts at 0, so a
#: line 29 days old is a negative Unix time.
BOOT_CASES = [
    # A node back from repair booted at 3m; the driver logged XID 143 (GPU initialisation failure)
    # at 3m20s; the agent starts at 5m and reads it from the ring buffer at its first scrape.
    (
        "FsdpGpuXidGpuReset",
        [
            *fresh_agent(REPAIRED, "fsdp-observe-agent-r7", 5, uptime=120),
            {
                "series": xid_series(GPU_A, 143, "gpu_reset", agent_on(REPAIRED, "fsdp-observe-agent-r7")),
                "values": "_x5 1x30",
            },
            {
                "series": xid_time(GPU_A, 143, "gpu_reset", agent_on(REPAIRED, "fsdp-observe-agent-r7")),
                "values": "_x5 200x30",
            },
        ],
        [4, 5],
        6,
        [xid_alert("FsdpGpuXidGpuReset", 143, "gpu_reset", GPU_A, "critical", "none seen", REPAIRED)],
    ),
    # An agent starts on a node up 30 days and reads an XID 48 logged 29 days ago: never a page.
    (
        "FsdpGpuXidGpuReset",
        [
            *fresh_agent(LONG_UP, "fsdp-observe-agent-l8", 5, uptime=30 * 86400),
            {
                "series": xid_series(GPU_A, 48, "gpu_reset", agent_on(LONG_UP, "fsdp-observe-agent-l8")),
                "values": "_x5 1x30",
            },
            {
                "series": xid_time(GPU_A, 48, "gpu_reset", agent_on(LONG_UP, "fsdp-observe-agent-l8")),
                "values": f"_x5 {300 - 29 * 86400}x30",
            },
        ],
        [5, 6, 10, 16, 25],
        30,
        [],
    ),
    # An XID 48 at 2m pages (and resolves); the agent pod is replaced at 20m (its series go stale,
    # the new pod's counter starts again at the count it reads back from the ring buffer, with the
    # same kernel timestamp): silent. A new XID 48 ten minutes later (31m) pages.
    (
        "FsdpGpuXidGpuReset",
        [
            {"series": OLD_48.replace("1x20", ""), "values": "_x2 1x18"},
            {"series": xid_time(GPU_A, 48, "gpu_reset"), "values": "_x2 120x18"},
            {"series": f"{c.AGENT_COLLECTIONS.name}{{{NEW_POD}}}", "values": "_x21 0+60x30"},
            {"series": xid_series(GPU_A, 48, "gpu_reset", NEW_POD), "values": "_x21 1x9 2x20"},
            {"series": xid_time(GPU_A, 48, "gpu_reset", NEW_POD), "values": "_x21 120x9 1860x20"},
        ],
        [2, 14, 21, 22, 25, 30, 31],
        32,
        [xid_alert("FsdpGpuXidGpuReset", 48, "gpu_reset", GPU_A, "critical", "llama-ft")],
    ),
    # The agent on a node up a day is first scraped at 20m; XID 79 comes at 21m05s. It pages after
    # xid_for (22m), not after a whole xid_window of the agent's history (31m).
    (
        "FsdpGpuXidNodeReboot",
        [
            *fresh_agent(NEW_AGENT, "fsdp-observe-agent-n9", 20, uptime=86400),
            {
                "series": xid_series(GPU_B, 79, "node_reboot", agent_on(NEW_AGENT, "fsdp-observe-agent-n9")),
                "values": "_x21 1x30",
            },
            {
                "series": xid_time(GPU_B, 79, "node_reboot", agent_on(NEW_AGENT, "fsdp-observe-agent-n9")),
                "values": "_x21 1265x30",
            },
        ],
        [20, 21],
        22,
        [xid_alert("FsdpGpuXidNodeReboot", 79, "node_reboot", GPU_B, "critical", "none seen", NEW_AGENT)],
    ),
    # Three XID 13 in one scrape, the first of that code on the GPU, on an agent scraped for long:
    # the new series counts whole (all of it came within the window), a burst.
    (
        "FsdpGpuXidApplicationBurst",
        [
            {"series": xid_series(GPU_D, 13, "application"), "values": "_x15 3x30"},
            {"series": xid_time(GPU_D, 13, "application"), "values": "_x15 900x30"},
        ],
        [14, 15],
        16,
        [
            (
                {**GPU_D, "node": NODE, "xid": "13", "severity": "warning", "xid_class": "application"},
                {
                    "summary": f"3 XID 13 errors on {gpu_text(GPU_D)} within 10m",
                    "description": f"XID 13 (class application) came 3 times within 10m on {gpu_text(GPU_D)}, PCI "
                    f"{GPU_D['pci_bus']} (3 or more make a burst). Runs on this GPU: none seen. One such XID is "
                    f"usually the job's own fault; a burst on one GPU points at the GPU or a crash loop. "
                    f"{xid.APP_BUG}",
                    "runbook_url": f"{BOOK}#fsdpgpuxidapplicationburst",
                    **catalogue(13),
                },
            )
        ],
    ),
    # dcgm-exporter (no agent): GPU 0's last XID changes to 79 at 15m and pages; the exporter pod is
    # replaced at 35m and the new one re-reports the same sticky 79 from 37m: silent.
    (
        "FsdpDcgmXidCritical",
        [
            {"series": last_xid(DCGM_ONLY, 0, 0), "values": "0x14"},
            {"series": last_xid(DCGM_ONLY, 0, 79), "values": "_x15 79x20"},
            {"series": last_xid(DCGM_ONLY, 0, 79, pod="nvidia-dcgm-exporter-9zq2w"), "values": "_x37 79x30"},
        ],
        [15, 26, 36, 37, 38, 40, 47, 55],
        16,
        [dcgm_critical(79, "node_reboot", 0)],
    ),
    # dcgm-exporter (no agent) on a node node-exporter says booted at 3m: the exporter's first
    # scrape (5m) already holds XID 143 from driver load, and it pages. The same sticky 143 on a
    # node up 30 days does not.
    (
        "FsdpDcgmXidCritical",
        [
            node_boot(DCGM_REPAIRED, 180),
            node_boot(DCGM_LONG_UP, -30 * 86400),
            {"series": last_xid(DCGM_REPAIRED, 0, 143), "values": "_x5 143x30"},
            {"series": last_xid(DCGM_LONG_UP, 0, 143), "values": "_x5 143x30"},
        ],
        [4, 5, 14, 20],
        6,
        [dcgm_critical(143, "gpu_reset", 0, DCGM_REPAIRED)],
    ),
]


#: With dcgm_xid_count (DCGM_EXP_XID_ERRORS_COUNT switched on in the exporter).
COUNTED = Settings(dcgm_xid_count=True)
COUNT_CASES = [
    # The windowed count, on a node without our agent; the same XID on a node whose agent reads
    # the kernel log stays with the agent's alerts; the sticky last-XID gauge alone (still 79 at
    # 30m) raises nothing once the window has emptied.
    (
        "FsdpDcgmXidCritical",
        [
            {"series": dcgm("DCGM_EXP_XID_ERRORS_COUNT", DCGM_ONLY, 0, window_size_in_ms="300000"), "values": "0x60"},
            {
                "series": dcgm("DCGM_EXP_XID_ERRORS_COUNT", DCGM_ONLY, 0, window_size_in_ms="300000", xid="79"),
                "values": "_x5 1x5",
            },
            {"series": last_xid(DCGM_ONLY, 0, 79), "values": "0x4 79x60"},
            {
                "series": dcgm("DCGM_EXP_XID_ERRORS_COUNT", NODE, 1, window_size_in_ms="300000", xid="79"),
                "values": "_x5 1x5",
            },
        ],
        [5, 30],
        6,
        [
            (
                {**dcgm_gpu(0), "xid": "79", "xid_class": "node_reboot", "severity": "critical"},
                {
                    "summary": f"XID 79 on {gpu_text(dcgm_gpu(0), DCGM_ONLY)} (dcgm-exporter)",
                    "description": f"dcgm-exporter counted {dcgm_which(79, 'node_reboot', 0)} within the last 10m; {DCGM_MEANING} "
                    f"{dcgm_tail()}",
                    "runbook_url": f"{BOOK}#fsdpdcgmxidcritical",
                    **catalogue(79),
                },
            )
        ],
    ),
    (
        "FsdpDcgmXidApplicationBurst",
        [
            {
                "series": dcgm("DCGM_EXP_XID_ERRORS_COUNT", DCGM_ONLY, 1, window_size_in_ms="300000", xid="31"),
                "values": "_x5 2 3x5",
            }
        ],
        [5, 6],
        7,
        [
            (
                {**dcgm_gpu(1), "xid": "31", "xid_class": "application", "severity": "warning"},
                {
                    "summary": f"3 XID 31 errors on {gpu_text(dcgm_gpu(1), DCGM_ONLY)} (dcgm-exporter)",
                    "description": f"dcgm-exporter counted XID 31 (class application) 3 times in its window for "
                    f"{gpu_text(dcgm_gpu(1), DCGM_ONLY)}, PCI 0000:11:00 (3 or more make a burst). "
                    f"{xid.APP_BUG} {dcgm_tail()}",
                    "runbook_url": f"{BOOK}#fsdpdcgmxidapplicationburst",
                    **catalogue(31),
                },
            )
        ],
    ),
]


def promtool_tests(cases: list | None = None) -> dict:
    """A promtool test file: one test group per case, each alert silent before and firing at its time."""
    tests = []
    for name, series, silent, firing, expected in CASES if cases is None else cases:
        checks = [{"eval_time": f"{t}m", "alertname": name, "exp_alerts": []} for t in silent]
        checks.append(
            {
                "eval_time": f"{firing}m",
                "alertname": name,
                "exp_alerts": [
                    {"exp_labels": labels, "exp_annotations": annotations} for labels, annotations in expected
                ],
            }
        )
        tests.append(
            {"name": name, "interval": "1m", "input_series": [*AGENT_SERIES, *series], "alert_rule_test": checks}
        )
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def assert_promtool_passes(tmp_path: Path, input_series: list[dict], **checks: list[dict]) -> None:
    """One promtool test of the default rules at a 1-minute interval over ``input_series``;
    ``checks`` is ``alert_rule_test=[...]`` and/or ``promql_expr_test=[...]``."""
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input_series, **checks}],
    }
    (tmp_path / "rules.yaml").write_text(rules.render())
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_cases_assume_the_default_settings() -> None:
    assert (S.xid_window, S.xid_for, S.xid_application_burst, S.gpu_lost_for) == ("10m", "1m", 3, "1m")
    assert S.gpu_stale_for == "5m"
    assert (S.stall_time, S.stall_for, S.straggler_ratio, S.straggler_for) == ("15m", "2m", 1.5, "10m")
    assert (S.throughput_drop_ratio, S.throughput_baseline, S.throughput_offset, S.throughput_for) == (
        0.7,
        "1h",
        "10m",
        "15m",
    )


def test_every_alert_has_a_case_with_a_silent_check_just_before_its_for() -> None:
    # the hang and straggler alerts have their cases at the trainer's 15 s scrape
    from tests.dashboards.test_rules_hangs_promtool import COVERED

    assert sorted([*(name for name, *_ in CASES), *COVERED]) == sorted(rules.alert_names())
    assert sorted(name for name, *_ in COUNT_CASES) == sorted(n for n in rules.alert_names(COUNTED) if "Dcgm" in n)
    for name, _, silent, firing, _ in CASES + COUNT_CASES:
        assert firing - 1 in silent, f"{name}: no silent check one evaluation before it fires"


def test_promtool_check_rules_accepts_the_committed_file() -> None:
    committed = Path(__file__).resolve().parents[2] / "dashboards" / rules.RULES_FILE
    done = promtool("check", "rules", str(committed), cwd=committed.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in rules.rule_file()['groups'])} rules found" in done.stdout


def test_promtool_test_rules(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(rules.render())
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(promtool_tests(), sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_xids_at_boot_after_repair_and_on_a_new_agent_page_and_old_lines_never(tmp_path: Path) -> None:
    """One rule shape for a node back from repair, a replaced agent pod, an agent new to Prometheus
    and a restarted dcgm-exporter (``BOOT_CASES``)."""
    (tmp_path / "rules.yaml").write_text(rules.render())
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(promtool_tests(BOOT_CASES), sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_stall_names_the_fatal_xid_on_one_of_its_nodes(tmp_path: Path) -> None:
    """likely_cause: the XID alert of the run's node, found through the recorded run-to-node faults."""
    (tmp_path / "rules.yaml").write_text(rules.render())
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(promtool_tests(CAUSE_CASES), sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_promtool_test_rules_with_dcgm_xid_count(tmp_path: Path) -> None:
    """The windowed-count variants, against the rules generated with dcgm_xid_count."""
    (tmp_path / "rules.yaml").write_text(rules.render(COUNTED))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(promtool_tests(COUNT_CASES), sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_steady_last_xid_never_fires_and_a_change_fires_once(tmp_path: Path) -> None:
    """FsdpDcgmXidCritical over two hours: one change of the last XID, one alert episode."""
    series = [
        {"series": last_xid(DCGM_ONLY, 0, 0), "values": "0x29"},
        {"series": last_xid(DCGM_ONLY, 0, 48), "values": "_x30 48x90"},
        {"series": last_xid(DCGM_ONLY, 1, 79), "values": "79x120"},
    ]
    g = gpu_text(dcgm_gpu(0), DCGM_ONLY)
    firing = [
        {
            "exp_labels": {**dcgm_gpu(0), "xid": "48", "xid_class": "gpu_reset", "severity": "critical"},
            "exp_annotations": {
                "summary": f"XID 48 on {g} (dcgm-exporter)",
                "description": f"dcgm-exporter's last XID changed to {dcgm_what(48, 'gpu_reset', 0)} {dcgm_tail()}",
                "runbook_url": f"{BOOK}#fsdpdcgmxidcritical",
                **catalogue(48),
            },
        }
    ]
    # Pending at 30m, firing from 31m; the change leaves the 10m window at 40m and the alert keeps
    # firing one more minute (xid_reboot_keep_firing_for: the class may be node_reboot, which mutes).
    checks = [
        {"eval_time": f"{t}m", "alertname": "FsdpDcgmXidCritical", "exp_alerts": firing if 31 <= t < 41 else []}
        for t in range(0, 120, 1)
    ]
    assert_promtool_passes(tmp_path, [*AGENT_SERIES, *series], alert_rule_test=checks)


def test_promtool_sees_a_missed_alert(tmp_path: Path) -> None:
    """The harness can fail: expecting the throughput drop one evaluation early is reported."""
    (tmp_path / "rules.yaml").write_text(rules.render())
    early = promtool_tests()
    (case,) = [t for t in early["tests"] if t["name"] == "FsdpThroughputDrop"]
    case["alert_rule_test"][-2]["exp_alerts"] = case["alert_rule_test"][-1]["exp_alerts"]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(early, sort_keys=False, width=1000))
    done = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 1 and "FsdpThroughputDrop" in done.stdout + done.stderr


def test_one_run_id_in_two_namespaces_is_two_phase_stacks_each_summing_to_one(tmp_path: Path) -> None:
    """ "Wall time by phase" repeats per namespace and run_id (the hidden ``run`` variable): the same
    run_id in two namespaces never stacks to 2 under the panel's ``max: 1``."""
    from observe.monitoring.dashboards import dashboards
    from tests.support.grafana_queries import substitute

    board = dashboards()["training-run.json"]
    (phase,) = [p for p in board["panels"] if p.get("title") == "Wall time by phase"]
    (run_variable,) = [v for v in board["templating"]["list"] if v["name"] == "run"]
    assert phase["repeat"] == "run" and phase["fieldConfig"]["defaults"]["max"] == 1

    def panel(run: str) -> str:
        values = {"namespace": ".*", "run_id": ".+", "node": ".+", "run": run}
        return f"round(sum({substitute(phase['targets'][0]['expr'], values)}), 0.001)"

    rank = 'run_id="llama-ft",rank="0",local_rank="0",node="gpu-node-1",job="fsdp-observe-trainer"'
    series = [  # seconds of wall time per phase: 54 s training and 6 s checkpointing a minute in A; B trains
        {"series": f'{c.TRAIN_PHASE_SECONDS.name}{{{rank},namespace="team-a",phase="training"}}', "values": "0+54x20"},
        {
            "series": f'{c.TRAIN_PHASE_SECONDS.name}{{{rank},namespace="team-a",phase="checkpointing"}}',
            "values": "0+6x20",
        },
        {"series": f'{c.TRAIN_PHASE_SECONDS.name}{{{rank},namespace="team-b",phase="training"}}', "values": "0+60x20"},
    ]
    variable = re.fullmatch(r"label_values\((.+), run\)", run_variable["query"]).group(1)
    checks = [
        {
            "expr": f"group by (run) ({substitute(variable, {'namespace': '.*', 'run_id': '.+'})})",
            "eval_time": "10m",
            "exp_samples": [
                {"labels": '{run="team-a/llama-ft"}', "value": 1},
                {"labels": '{run="team-b/llama-ft"}', "value": 1},
            ],
        },
        *(
            {"expr": panel(run), "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": 1}]}
            for run in ("team-a/llama-ft", "team-b/llama-ft")
        ),
    ]
    assert_promtool_passes(tmp_path, series, promql_expr_test=checks)


def test_a_reboot_xid_keeps_firing_until_the_burst_it_mutes_is_over(tmp_path: Path) -> None:
    """One incident's XIDs can reach Prometheus a scrape apart (the agent counts a kernel-log write
    line by line): here XID 79 at 15m, the application burst on the same node at 16m. Alertmanager
    mutes the burst only while the reboot alert fires, so the reboot alert keeps firing past its
    window (``xid_reboot_keep_firing_for``, 1m) until the burst, a minute younger, resolves too:
    at 25m both fire, at 26m neither (without the margin the reboot alert resolved at 25m alone and
    the muted burst paged)."""
    assert S.xid_reboot_keep_firing_for == "1m"
    expected = {name: want for name, _, _, _, want in CASES}
    series = [
        {"series": xid_series(GPU_B, 79, "node_reboot"), "values": "_x15 1x60"},
        {"series": xid_time(GPU_B, 79, "node_reboot"), "values": "_x15 900x60"},
        {"series": xid_series(GPU_D, 13, "application"), "values": "_x16 3x60"},
        {"series": xid_time(GPU_D, 13, "application"), "values": "_x16 960x60"},
    ]
    checks = [
        {
            "eval_time": f"{t}m",
            "alertname": name,
            "exp_alerts": [
                {"exp_labels": labels, "exp_annotations": annotations}
                for labels, annotations in (expected[name] if t < 26 else [])
            ],
        }
        for t in (24, 25, 26, 27)
        for name in ("FsdpGpuXidNodeReboot", "FsdpGpuXidApplicationBurst")
    ]
    assert_promtool_passes(tmp_path, [*AGENT_SERIES, *series], alert_rule_test=checks)
