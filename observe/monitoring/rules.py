"""Prometheus alerting and recording rules for FSDP runs and their GPUs, generated from Python.

``rule_file(settings)`` returns the content of ``dashboards/fsdp-observe.rules.yaml`` (a
Prometheus rule file: ``{"groups": [...]}``); ``render(settings)`` its text. Every alert carries
``severity``, ``for``, a summary, a description naming the node, the GPU and the run, and a
``runbook_url`` into ``docs/dashboards.md``. Recording rules are named ``level:metric:operations``
(https://prometheus.io/docs/practices/rules/).

XID alerts take the severity class from the catalogue (``observe.xid``): ``gpu_reset``,
``node_reboot`` and ``nvlink_fabric`` are critical, a burst of ``application``-class XIDs on one
GPU and an XID the catalogue does not know are warnings, ``informational`` ones do not alert.
Every XID alert carries ``severity``, ``xid_class`` (the catalogue's class), ``node``, ``gpu``,
``gpu_uuid``, ``pci_bus`` and ``xid``, for Alertmanager routing.

XIDs at boot, after repair, and on an agent new to Prometheus. A series of
``fsdp_gpu_xid_errors_total`` is born with the first XID of its code on its GPU, already at 1,
and ``increase()`` over a series' first sample is nothing. So the XIDs of one GPU and code in the
window are ``increase(...[window])`` for the series that were there a window ago, and for a series
born within the window (the agent's first scrape, or a code new on that GPU) its own count, but
only where the latest of those XIDs is recent by its own kernel timestamp
(``fsdp_gpu_xid_last_timestamp_seconds``, which the agent reads from the log record, never from
when it read the line). One shape covers an XID 143 logged at driver load on a node back from
repair, a fault a minute after a reboot, and the first XID of a node whose agent Prometheus has
scraped for less than a window, and stays silent for a 29-day-old line a fresh agent reads again
from the ring buffer. A born series counts whole where every XID in its count is within the window:
the agent was already scraped a window ago (so the series, and all it counts, came since), or the
node booted within the window; otherwise (an agent new to Prometheus on a node up for longer) it
counts one, the recent latest, so a burst is never made of old XIDs. Series are matched on the
GPU's identity only, so a replaced agent pod (new ``pod`` and ``instance``, the same counts read
again) raises nothing.

Nodes without our agent get a dcgm-exporter variant, read from the canonical layer
(``observe.monitoring.dialects``), whatever the exporter's dialect. By default it reads the last
XID field (``DCGM_FI_DEV_XID_ERRORS``, ``DCGM_FI_DEV_XID_ERROR`` from 4.9.0), which every stock
exporter exports: the **last** XID code of a GPU, recorded with the code as the ``xid`` label. A
change of the code is a new series, so the alert fires on a series (a GPU and code) that is new
within the window on a GPU the exporter already reported a window ago, or on a node that booted
within the window (node-exporter's ``node_boot_time_seconds``: an XID at driver load): a change
fires once, for one window; a steady value never fires, nor does an old value after Prometheus or
the exporter restarts (the record carries no exporter pod). A repeat of the same code is invisible
in that field. With ``dcgm_xid_count`` the variant counts ``DCGM_EXP_XID_ERRORS_COUNT`` (a windowed
gauge, off by default in the exporter: ``max_over_time > 0``) instead, which also sees repeats and
so adds a burst alert. Both stay silent on nodes where our agent reads XIDs, so one XID never pages
twice.
"""

from __future__ import annotations

from typing import Any

from observe import catalog as c
from observe import xid, yamlio
from observe.monitoring import alert_templates, dialects, fields, hangs
from observe.monitoring.settings import Settings
from observe.promql import duration_seconds

RULES_FILE = "fsdp-observe.rules.yaml"

#: Severity classes of observe.xid that page (critical) and their alert names.
CRITICAL_XID_CLASSES: dict[str, str] = {
    "gpu_reset": "FsdpGpuXidGpuReset",
    "node_reboot": "FsdpGpuXidNodeReboot",
    "nvlink_fabric": "FsdpGpuXidNvlinkFabric",
}
#: What a critical class means for the GPU, for summaries.
_CLASS_EFFECT = {
    "gpu_reset": "the GPU needs a reset",
    "node_reboot": "the node needs a reboot",
    "nvlink_fabric": "an NVLink or fabric error",
}

#: Recording rules (names follow level:metric:operations).
STEP_MEAN = f"rank:{c.TRAIN_STEP_SECONDS.name}:mean5m"
STEP_MEDIAN = f"namespace_run_id:{c.TRAIN_STEP_SECONDS.name}:median_mean5m"
GLOBAL_TOKENS = f"namespace_run_id:{c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name}:max"
#: Recorded for the dashboards, so a panel at 8,192 ranks or GPUs reads a few series (the
#: benchmark: benchmarks/dashboard_queries.py).
DATA_WAIT_SHARE = f"rank:{c.TRAIN_DATA_WAIT_SECONDS.name}:share5m"
STEP_BUCKET_RATE = f"namespace_run_id_le:{c.TRAIN_STEP_SECONDS.name}_bucket:rate2m"
#: The GPUs CUDA ranks use (node and UUID), with the rank and run: panels join the canonical
#: DCGM records to runs through it.
RUN_GPUS = f"node_gpu:{c.TRAIN_INFO.name}:ranks"
PHASE_SHARE = f"namespace_run_id_phase:{c.TRAIN_PHASE_SECONDS.name}:rate2m"
#: Each run's ranks, with its model, sharding strategy and world size: the scaling-efficiency
#: table reads these few series instead of counting every rank's info series six times.
RUN_RANKS = f"namespace_run_id:{c.TRAIN_INFO.name}:ranks"
PHASE_RANKS = f"namespace_run_id_phase:{c.TRAIN_PHASE.name}:ranks"
#: Alerts that mean a GPU fault a run cannot survive (the stall alert's likely causes).
FATAL_GPU_ALERTS = (*CRITICAL_XID_CLASSES.values(), "FsdpDcgmXidCritical", "FsdpGpuLost")
#: The nodes of each run with a fatal GPU alert firing recently (``likely_cause`` of a stall).
RUN_GPU_FAULTS = "namespace_run_id_node:ALERTS:fatal_gpu_recent"
THROTTLED = f"reason:{c.GPU_CLOCK_THROTTLE.name}:count"
#: Only the (GPU, reason) pairs holding clocks down now: the agent exports every NVML reason of
#: every GPU, nearly all 0, and a range query over all of them costs seconds at 512 GPUs.
THROTTLE_HELD = f"node_gpu_reason:{c.GPU_CLOCK_THROTTLE.name}:held"
NODE_CPU_BUSY = f"node:{fields.NODE_CPU_SECONDS}:busy_ratio_rate2m"
NODE_NETWORK_RECEIVE = f"node:{fields.NODE_NETWORK_RECEIVE}:rate2m"
NODE_NETWORK_TRANSMIT = f"node:{fields.NODE_NETWORK_TRANSMIT}:rate2m"
NODE_DISK_READ = f"node:{fields.NODE_DISK_READ}:rate2m"
NODE_DISK_WRITTEN = f"node:{fields.NODE_DISK_WRITTEN}:rate2m"
NODE_DISK_BUSY = f"node:{fields.NODE_DISK_IO_TIME}:max_rate2m"
RECORDED = (
    STEP_MEAN,
    STEP_MEDIAN,
    GLOBAL_TOKENS,
    DATA_WAIT_SHARE,
    STEP_BUCKET_RATE,
    RUN_GPUS,
    RUN_RANKS,
    PHASE_SHARE,
    PHASE_RANKS,
    RUN_GPU_FAULTS,
    THROTTLED,
    THROTTLE_HELD,
    NODE_CPU_BUSY,
    NODE_NETWORK_RECEIVE,
    NODE_NETWORK_TRANSMIT,
    NODE_DISK_READ,
    NODE_DISK_WRITTEN,
    NODE_DISK_BUSY,
    *hangs.RECORDED,
    *dialects.RECORDED,
)

_RUN = "namespace, run_id"
#: Labels that identify one XID code on one GPU (target labels such as pod and instance excluded).
_XID_ID = "node, gpu, gpu_uuid, pci_bus, xid"
#: The labels of the agent's XID alerts: the GPU and code, and the agent's namespace (on
#: Kubernetes the ServiceMonitor's target label ``namespace="fsdp-observe"``, which an
#: AlertmanagerConfig in that namespace matches under the operator's default OnNamespace
#: strategy; absent in local mode).
_AGENT_XID_BY = f"namespace, {_XID_ID}"


def codes(*classes: str) -> list[int]:
    """XID codes of the catalogue in the given severity classes, ascending."""
    return sorted(code for code, info in xid.CATALOGUE.items() if info.severity in classes)


def _alert(
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    s: Settings,
    xid_class: str | None = None,
    keep_firing_for: str | None = None,
    **more: str,
) -> dict[str, Any]:
    """One alerting rule; ``more`` are extra annotations (``xid_name``, ``recommended_action``, ...)."""
    labels = {"severity": severity, **({"xid_class": xid_class} if xid_class else {})}
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        **({"keep_firing_for": keep_firing_for} if keep_firing_for else {}),
        "labels": labels,
        "annotations": {"summary": summary, "description": description, "runbook_url": s.runbook(name.lower()), **more},
    }


def _xid_annotations(classes: tuple[str, ...]) -> dict[str, str]:
    """``xid_name`` and ``recommended_action`` of an XID alert over ``classes`` (Go templates on ``xid``)."""
    return {"xid_name": alert_templates.xid_name(classes), "recommended_action": alert_templates.xid_action(classes)}


def _with_class(expr: str, classes: tuple[str, ...]) -> str:
    """``expr`` (series with an ``xid`` label) with ``xid_class`` set from the catalogue."""
    for severity in classes:
        expr = f'label_replace({expr}, "xid_class", "{severity}", "xid", "{"|".join(map(str, codes(severity)))}")'
    return expr


def _runs_on_gpu(s: Settings) -> str:
    """Go template: the run ids whose ranks use the alert's GPU (by node and GPU UUID)."""
    info = s.trainer(c.TRAIN_INFO.name, "node=%q", "gpu_uuid=%q")
    return (
        "{{ if $labels.gpu_uuid }}{{ with printf `group by (run_id) (" + info + ")` $labels.node $labels.gpu_uuid"
        " | query }}{{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s.Labels.run_id }}{{ end }}"
        "{{ else }}none seen{{ end }}{{ else }}unknown (GPU not identified){{ end }}"
    )


def _nodes_of_run(s: Settings) -> str:
    """Go template: the nodes the alert's run has ranks on."""
    info = s.trainer(c.TRAIN_INFO.name, "run_id=%q")
    return (
        "{{ with printf `group by (node) (" + info + ")` $labels.run_id | query }}"
        "{{ range $i, $s := . }}{{ if $i }}, {{ end }}{{ $s.Labels.node }}{{ end }}{{ else }}unknown{{ end }}"
    )


_RANK = (
    "rank {{ $labels.rank }} of run {{ $labels.run_id }} on node {{ $labels.node }}"
    "{{ with $labels.gpu_uuid }} (GPU {{ . }}){{ end }}"
)
_GPU = "GPU {{ $labels.gpu }} ({{ $labels.gpu_uuid }}) of node {{ $labels.node }}"
#: The alert's value as a whole count (increase() extrapolates to the window's edges).
_COUNT = '{{ printf "%.0f" $value }}'


def _xid_counter(s: Settings, severity: str) -> str:
    """Per GPU and code: XIDs of one class within the window, including those at the agent's first
    scrape when they are recent by their own kernel timestamp (see the module docstring)."""
    w = s.xid_window
    series = s.agent(c.GPU_XID_ERRORS.name, f'severity="{severity}"')
    latest = s.agent(c.GPU_XID_LAST_TIME.name, f'severity="{severity}"')
    uptime = s.agent(c.NODE_UPTIME.name)
    seen_before = s.agent(c.AGENT_COLLECTIONS.name)
    born_recent = (
        f"({series} unless on ({_XID_ID}) {series} offset {w})\n"
        f"      and on ({_XID_ID})\n"
        f"      (time() - max by ({_XID_ID}) (max_over_time({latest}[{w}])) < {duration_seconds(w):g})"
    )
    return (
        f"max by ({_AGENT_XID_BY}) (\n"
        f"  increase({series}[{w}])\n"
        f"  or\n"
        f"  label_replace(\n"
        f"    (\n"
        f"      {born_recent}\n"
        f"      and on (node) (\n"
        f"        max by (node) ({seen_before} offset {w})\n"
        f"        or\n"
        f"        max by (node) ({uptime}) < {duration_seconds(w):g}\n"
        f"      )\n"
        f"    )\n"
        f"    or\n"
        f"    clamp_max(\n"
        f"      {born_recent},\n"
        f"      1\n"
        f"    ),\n"
        f'    "first_scrape", "true", "", ""\n'
        f"  )\n"
        f")"
    )


def xid_alerts(s: Settings) -> list[dict[str, Any]]:
    """Alerts on the agent's XID counter, one per severity class that alerts."""
    alerts = []
    for severity, name in CRITICAL_XID_CLASSES.items():
        more = _xid_annotations((severity,))
        alerts.append(
            _alert(
                name,
                f"{_xid_counter(s, severity)}\n> 0",
                s.xid_for,
                "critical",
                f"XID {{{{ $labels.xid }}}} on {_GPU}: {_CLASS_EFFECT[severity]}",
                f"The driver reported XID {{{{ $labels.xid }}}} (class {severity}) for {_GPU}, PCI "
                f"{{{{ $labels.pci_bus }}}}, within the last {s.xid_window}. Runs on this GPU: {_runs_on_gpu(s)}. "
                f"{more['recommended_action']}",
                s,
                xid_class=severity,
                keep_firing_for=s.xid_reboot_keep_firing_for if severity == "node_reboot" else None,
                **more,
            )
        )
    application = _xid_annotations(("application",))
    burst = s.xid_application_burst
    alerts.append(
        _alert(
            "FsdpGpuXidApplicationBurst",
            f"{_xid_counter(s, 'application')}\n>= {burst}",
            s.xid_for,
            "warning",
            f"{_COUNT} XID {{{{ $labels.xid }}}} errors on {_GPU} within {s.xid_window}",
            f"XID {{{{ $labels.xid }}}} (class application) came {_COUNT} times within {s.xid_window} on {_GPU}, "
            f"PCI {{{{ $labels.pci_bus }}}} ({burst} or more make a burst). Runs on this GPU: {_runs_on_gpu(s)}. "
            f"One such XID is usually the job's own fault; a burst on one GPU points at the GPU or a crash loop. "
            f"{application['recommended_action']}",
            s,
            xid_class="application",
            **application,
        )
    )
    alerts.append(
        _alert(
            "FsdpGpuXidUnknown",
            f"{_xid_counter(s, 'unknown')}\n> 0",
            s.xid_for,
            "warning",
            f"Unknown XID {{{{ $labels.xid }}}} on {_GPU}",
            f"The driver reported XID {{{{ $labels.xid }}}}, which the catalogue (observe/xid.py) does not know, for "
            f"{_GPU}, PCI {{{{ $labels.pci_bus }}}}, within the last {s.xid_window}. Runs on this GPU: "
            f"{_runs_on_gpu(s)}. {xid.UNKNOWN_ACTION}",
            s,
            xid_class="unknown",
            **_xid_annotations(("unknown",)),
        )
    )
    return alerts


def _agent_reads_xids(s: Settings) -> str:
    """Nodes whose fsdp-observe agent reads the kernel log or NVML events (its XID alerts cover them)."""
    readers = s.agent(c.AGENT_UP.name, 'source=~"kernel_log|nvml"')
    return f"unless on (node) (max by (node) ({readers}) == 1)"


def _booted_within(s: Settings) -> str:
    """Nodes that booted within the window, by node-exporter's boot time (node name in ``node``)."""
    boot = s.node_exporter(fields.NODE_BOOT_TIME)
    return f"(time() - max by (node) ({boot}) < {duration_seconds(s.xid_window):g})"


def _dcgm_last_xid_changed(s: Settings, wanted: list[int]) -> str:
    """Per GPU and code: a last-XID value new within the window (the canonical record
    ``gpu:dcgm_last_xid:max``, whose ``xid`` label is the code), on a GPU the exporter reported a
    window ago or on a node that booted within the window (an XID logged at driver load)."""
    w = s.xid_window
    record = dialects.LAST_XID.record
    series = f'{record}{{xid=~"{"|".join(map(str, wanted))}"}}'
    new = f"({series} unless on (node, gpu_uuid, xid) {series} offset {w})"
    seen = f"max by (node, gpu_uuid) ({record} offset {w})"
    changed = (
        f"max by ({_XID_ID}) (\n"
        f"  {new}\n  and on (node, gpu_uuid) {seen}\n"
        f"  or\n"
        f"  {new}\n  and on (node) {_booted_within(s)}\n)"
    )
    return f"{_with_class(changed, tuple(CRITICAL_XID_CLASSES))}\n{_agent_reads_xids(s)}"


def _dcgm_xid_counted(s: Settings, wanted: list[int], threshold: str, classes: tuple[str, ...]) -> str:
    """Per GPU and code: the most XIDs dcgm-exporter's window held within ``xid_window``."""
    series = f'{dialects.XID_WINDOW.record}{{xid=~"{"|".join(map(str, wanted))}"}}'
    counted = f"max by ({_XID_ID}) (\n  max_over_time({series}[{s.xid_window}])\n)"
    return f"{_with_class(counted, classes)} {threshold}\n{_agent_reads_xids(s)}"


def dcgm_xid_alerts(s: Settings) -> list[dict[str, Any]]:
    """dcgm-exporter variants of the XID alerts, for nodes where our agent reads no XIDs."""
    critical = codes(*CRITICAL_XID_CLASSES)
    tail = (
        "Runs on this GPU: " + _runs_on_gpu(s) + ". Read from dcgm-exporter because no fsdp-observe agent "
        "reads XIDs on this node."
    )
    which = f"XID {{{{ $labels.xid }}}} (class {{{{ $labels.xid_class }}}}) for {_GPU}, PCI {{{{ $labels.pci_bus }}}}"
    meaning = "the class means a GPU reset, a node reboot or NVLink/fabric recovery (see the XID table of the runbook)."
    fatal = _xid_annotations(tuple(CRITICAL_XID_CLASSES))
    if not s.dcgm_xid_count:
        return [
            _alert(
                "FsdpDcgmXidCritical",
                _dcgm_last_xid_changed(s, critical),
                s.xid_for,
                "critical",
                f"XID {{{{ $labels.xid }}}} on {_GPU} (dcgm-exporter)",
                f"dcgm-exporter's last XID changed to {which}; {meaning} {tail}",
                s,
                keep_firing_for=s.xid_reboot_keep_firing_for,
                **fatal,
            )
        ]
    burst = s.xid_application_burst
    application = _xid_annotations(("application",))
    return [
        _alert(
            "FsdpDcgmXidCritical",
            _dcgm_xid_counted(s, critical, "> 0", tuple(CRITICAL_XID_CLASSES)),
            s.xid_for,
            "critical",
            f"XID {{{{ $labels.xid }}}} on {_GPU} (dcgm-exporter)",
            f"dcgm-exporter counted {which} within the last {s.xid_window}; {meaning} {tail}",
            s,
            keep_firing_for=s.xid_reboot_keep_firing_for,
            **fatal,
        ),
        _alert(
            "FsdpDcgmXidApplicationBurst",
            _dcgm_xid_counted(s, codes("application"), f">= {burst}", ("application",)),
            s.xid_for,
            "warning",
            f"{_COUNT} XID {{{{ $labels.xid }}}} errors on {_GPU} (dcgm-exporter)",
            f"dcgm-exporter counted XID {{{{ $labels.xid }}}} (class application) {_COUNT} times in its "
            f"window for {_GPU}, PCI {{{{ $labels.pci_bus }}}} ({burst} or more make a burst). "
            f"{application['recommended_action']} {tail}",
            s,
            xid_class="application",
            **application,
        ),
    ]


def gpu_lost_alert(s: Settings) -> dict[str, Any]:
    """A GPU NVML reports lost (fallen off the bus), with its PCI bus from ``fsdp_gpu_info`` (the
    agent writes both for every GPU it knows, lost ones included, in the same snapshot)."""
    gpu = "node, gpu, gpu_uuid"
    lost = (
        f"max by (namespace, {gpu}, pci_bus) (\n"
        f"  {s.agent(c.GPU_LOST.name)}\n"
        f"  * on ({gpu}) group_left (pci_bus)\n"
        f"  max by ({gpu}, pci_bus) ({s.agent(c.GPU_INFO.name)})\n"
        f") == 1"
    )
    return _alert(
        "FsdpGpuLost",
        lost,
        s.gpu_lost_for,
        "critical",
        f"{_GPU} is lost",
        f"NVML reports {_GPU}, PCI {{{{ $labels.pci_bus }}}}, lost: it fell off the bus and answers no query. "
        f"Runs on this GPU: {_runs_on_gpu(s)}. {xid.REBOOT}",
        s,
        recommended_action=xid.REBOOT,
    )


#: What to do about a GPU whose NVML calls hang.
STALE_ACTION = (
    "Run nvidia-smi -q -i <gpu> on the node: if it hangs or errors too, the driver no longer "
    "answers for this GPU; drain it and reset it (RESET_GPU), or reboot the node if the reset "
    "fails. Look for XIDs in the kernel log around the time."
)


def gpu_stale_alert(s: Settings) -> dict[str, Any]:
    """A GPU whose NVML reading has not finished within the agent's deadline for ``gpu_stale_for``
    (value: seconds since its last complete reading)."""
    gpu = "node, gpu, gpu_uuid"
    stale = (
        f"max by (namespace, {gpu}) ({s.agent(c.GPU_READING_AGE.name)})\n"
        f"and on ({gpu})\n(max by ({gpu}) ({s.agent(c.GPU_READING_STALE.name)}) == 1)"
    )
    return _alert(
        "FsdpGpuReadingStale",
        stale,
        s.gpu_stale_for,
        "warning",
        f"NVML readings of {_GPU} are stale",
        f"The agent's NVML reading of {_GPU} has not finished within its deadline for "
        f"{{{{ $value | humanizeDuration }}}}: a driver call that hangs (the agent leaves the GPU's figures out "
        f"and goes on with the others). Runs on this GPU: {_runs_on_gpu(s)}. {STALE_ACTION}",
        s,
        recommended_action=STALE_ACTION,
    )


#: What to do about a GPU whose NVML calls all fail (not lost).
UNREADABLE_ACTION = (
    "Run nvidia-smi -q -i <gpu> on the node: a board that answers Unknown Error (or is missing from "
    "nvidia-smi -L) is failing; drain it and reset it (RESET_GPU), reboot the node if the reset fails, "
    "and run DCGM diagnostics (dcgmi diag -r 3) before it takes work again. Look for XIDs around the time."
)


def gpu_unreadable_alert(s: Settings) -> dict[str, Any]:
    """A GPU whose every NVML reading finished with no figure for ``gpu_stale_for``: its calls
    fail with errors other than lost (value: seconds since its last complete reading)."""
    gpu = "node, gpu, gpu_uuid"
    unreadable = (
        f"max by (namespace, {gpu}) ({s.agent(c.GPU_READING_AGE.name)})\n"
        f"and on ({gpu})\n(max by ({gpu}) ({s.agent(c.GPU_UNREADABLE.name)}) == 1)"
    )
    return _alert(
        "FsdpGpuUnreadable",
        unreadable,
        s.gpu_stale_for,
        "warning",
        f"{_GPU} answers no NVML reading",
        f"Every NVML reading of {_GPU} has failed for {{{{ $value | humanizeDuration }}}} with an error "
        f"other than lost (the reason is the agent's /snapshot: unreadable), or the GPU is gone from NVML's "
        f"device count. Runs on this GPU: {_runs_on_gpu(s)}. {UNREADABLE_ACTION}",
        s,
        recommended_action=UNREADABLE_ACTION,
    )


def _run_gpus(s: Settings) -> str:
    """The GPUs CUDA ranks use, one series per rank (``RUN_GPUS``)."""
    info = s.trainer(c.TRAIN_INFO.name, 'gpu_uuid!=""')
    return f"group by ({_RUN}, rank, node, gpu_uuid) ({info})"


def _run_ranks(s: Settings) -> str:
    """Each run's number of distinct ranks, by run and the facts scaling efficiency groups on."""
    run = f"{_RUN}, model, sharding_strategy, world_size"
    return f"count by ({run}) (count by ({run}, rank) ({s.trainer(c.TRAIN_INFO.name)}))"


def gpu_recording_rules(s: Settings) -> list[dict[str, Any]]:
    """What the GPU-health dashboard reads of the clock event reasons: the (GPU, reason) pairs held
    now (value 1; absent when free) and the count of GPUs per reason. The count repeats the
    expression instead of reading the record, so each rule stands alone (``promtool tsdb
    create-blocks-from rules`` cannot backfill a rule that reads another's record)."""
    held = f"max by (node, gpu, gpu_uuid, reason) ({s.agent(c.GPU_CLOCK_THROTTLE.name)} == 1)"
    return [
        {"record": THROTTLE_HELD, "expr": held},
        {"record": THROTTLED, "expr": f"count by (reason) ({held})"},
    ]


def node_rules(s: Settings) -> list[dict[str, Any]]:
    """node-exporter's per-core and per-device counters summed per node (the Nodes dashboard)."""

    def per_node(fn: str, name: str, *matchers: str) -> str:
        expr = f"{fn}({s.node_exporter_raw(name, *matchers)}[2m])"
        if s.node_exporter_node_label != "node":
            expr = f'label_replace({expr}, "node", "$1", "{s.node_exporter_node_label}", "(.+)")'
        return expr

    nic = f'device!~"{fields.VIRTUAL_NETWORK_DEVICES}"'
    disk = f'device!~"{fields.VIRTUAL_DISK_DEVICES}"'
    idle = 'mode="idle"'
    return [
        {"record": NODE_CPU_BUSY, "expr": f"1 - avg by (node) ({per_node('rate', fields.NODE_CPU_SECONDS, idle)})"},
        {
            "record": NODE_NETWORK_RECEIVE,
            "expr": f"sum by (node) ({per_node('rate', fields.NODE_NETWORK_RECEIVE, nic)})",
        },
        {
            "record": NODE_NETWORK_TRANSMIT,
            "expr": f"sum by (node) ({per_node('rate', fields.NODE_NETWORK_TRANSMIT, nic)})",
        },
        {"record": NODE_DISK_READ, "expr": f"sum by (node) ({per_node('rate', fields.NODE_DISK_READ, disk)})"},
        {"record": NODE_DISK_WRITTEN, "expr": f"sum by (node) ({per_node('rate', fields.NODE_DISK_WRITTEN, disk)})"},
        {"record": NODE_DISK_BUSY, "expr": f"max by (node) ({per_node('rate', fields.NODE_DISK_IO_TIME, disk)})"},
    ]


def _fault_lookback(s: Settings) -> str:
    """How far back a stall looks for its likely cause: an XID stops the run's steps at once, the
    stall fires ``stall_time + stall_for`` later, and the XID alert fires for ``xid_window``."""
    total = int(duration_seconds(s.stall_time) + duration_seconds(s.stall_for) + duration_seconds(s.xid_window))
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n) or "0s"


def _fatal_alerts(s: Settings, *matchers: str) -> str:
    """Fatal GPU alerts (``FATAL_GPU_ALERTS``) firing at some time in the lookback, per alert."""
    inner = ",".join(['alertstate="firing"', f'alertname=~"{"|".join(FATAL_GPU_ALERTS)}"', *matchers])
    return f"last_over_time(ALERTS{{{inner}}}[{_fault_lookback(s)}])"


def run_gpu_faults_rule(s: Settings) -> dict[str, Any]:
    """Recording rule: each run's nodes with a fatal GPU alert in the lookback (one series per
    run and node). Recorded so a stall at 8,192 ranks costs one small lookup per alert."""
    return {
        "record": RUN_GPU_FAULTS,
        "expr": f"group by ({_RUN}, node) ({s.trainer(c.TRAIN_INFO.name)})\nand on (node)\n"
        f"group by (node) ({_fatal_alerts(s)})",
    }


def _likely_cause(s: Settings) -> str:
    """Go template: the fatal GPU alerts on the alert's run's nodes (node, GPU, UUID, PCI bus, XID)."""
    per_node = _fatal_alerts(s, "node=%q").replace("`", "")
    return (
        "{{ with printf `" + RUN_GPU_FAULTS + "{namespace=%q,run_id=%q}` $labels.namespace $labels.run_id"
        " | query }}"
        '{{ range $i, $n := . | sortByLabel "node" }}{{ if $i }}; {{ end }}'
        "{{ with printf `" + per_node + "` $n.Labels.node | query }}"
        '{{ range $j, $a := . | sortByLabel "gpu" }}{{ if $j }}; {{ end }}'
        "{{ $a.Labels.alertname }} on node {{ $a.Labels.node }}, GPU {{ $a.Labels.gpu }} ({{ $a.Labels.gpu_uuid }})"
        "{{ with $a.Labels.pci_bus }}, PCI {{ . }}{{ end }}"
        "{{ with $a.Labels.xid }}, XID {{ . }}{{ end }}{{ with $a.Labels.xid_class }} (class {{ . }}){{ end }}"
        "{{ end }}{{ end }}{{ end }}"
        "{{ else }}none seen: no critical XID and no lost GPU on the run's nodes in the last "
        f"{_fault_lookback(s)}{{{{ end }}}}"
    )


def training_rules(s: Settings) -> list[dict[str, Any]]:
    """Recording rules of the training group, then its alerts (same group: one evaluation apart at most)."""
    step_sum = s.trainer(f"{c.TRAIN_STEP_SECONDS.name}_sum")
    step_count = s.trainer(f"{c.TRAIN_STEP_SECONDS.name}_count")
    stall = duration_seconds(s.stall_time)
    last_step = s.trainer(c.TRAIN_LAST_STEP_TIMESTAMP.name)
    phase = s.trainer(c.TRAIN_PHASE.name, 'phase!="finished"')
    node_leaders_buckets = s.trainer(f"{c.TRAIN_STEP_SECONDS.name}_bucket", 'local_rank="0"')
    return [
        {"record": STEP_MEAN, "expr": f"rate({step_sum}[5m]) / rate({step_count}[5m])"},
        {"record": STEP_MEDIAN, "expr": f"quantile by ({_RUN}) (0.5, {STEP_MEAN})"},
        {"record": GLOBAL_TOKENS, "expr": f"max by ({_RUN}) ({s.trainer(c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name)})"},
        {
            "record": DATA_WAIT_SHARE,
            "expr": f"rate({s.trainer(c.TRAIN_DATA_WAIT_SECONDS.name + '_sum')}[5m])\n/\nrate({step_sum}[5m])",
        },
        {
            "record": STEP_BUCKET_RATE,
            # local rank 0 of each node: synchronous ranks share one step time (the collectives
            # line them up), so the other ranks add 7 times the series and no information
            "expr": f"sum by ({_RUN}, le) (rate({node_leaders_buckets}[2m]))",
        },
        {"record": RUN_GPUS, "expr": _run_gpus(s)},
        {"record": RUN_RANKS, "expr": _run_ranks(s)},
        {
            # ``run`` (namespace/run_id) names one run: the phase stack repeats per value of it
            "record": PHASE_SHARE,
            "expr": f"label_join(sum by ({_RUN}, phase) (rate({s.trainer(c.TRAIN_PHASE_SECONDS.name)}[2m])), "
            f'"run", "/", "namespace", "run_id")',
        },
        {"record": PHASE_RANKS, "expr": f"count by ({_RUN}, phase) ({s.trainer(c.TRAIN_PHASE.name)} == 1)"},
        run_gpu_faults_rule(s),
        _alert(
            "FsdpTrainingStalled",
            f"(time() - {last_step} > {stall:g})\n* ignoring (phase) group_left (phase)\n({phase} == 1)\n"
            f"{hangs.still_running(s)}",
            s.stall_for,
            "critical",
            f"Run {{{{ $labels.run_id }}}}: rank {{{{ $labels.rank }}}} made no step for {s.stall_time}",
            f"R{_RANK[1:]} completed its last optimizer step {{{{ $value | humanizeDuration }}}} ago and "
            f"is still {{{{ $labels.phase }}}}. {hangs.waiting_count(s)} A hung collective, a dead peer or a stuck "
            f"data loader stops every rank; look for the rank whose log stops first (likely_cause names a GPU "
            f"fault on the run's nodes).",
            s,
            likely_cause=_likely_cause(s),
        ),
        *hangs.compute_rules(s),
        _alert(
            "FsdpStragglerRank",
            hangs.straggler(s, STEP_MEDIAN),
            s.straggler_for,
            "warning",
            "Run {{ $labels.run_id }}: rank {{ $labels.rank }} is a straggler",
            f"{hangs.place()[0].upper()}{hangs.place()[1:]} computes {{{{ $value | humanizeDuration }}}} per step "
            f"(step time less data wait and collective wait, mean over 5m) against {hangs.compute_median()} on "
            f"the run's median rank: {hangs.compute_excess()} more per step, in a step of "
            f"{hangs.step_median(STEP_MEDIAN)} (alert above {s.straggler_ratio:g} times the median and "
            f"{s.straggler_share:.0%} of the step and {s.straggler_min_excess}, for {s.straggler_for}). "
            f"Every other rank waits that long for it "
            f'in the collectives each step. Compare its GPU in "FSDP training run › SM clock of the run\'s GPUs" '
            f'and "FSDP training run › XIDs on the run\'s GPUs", and its node\'s CPU in "FSDP nodes › CPU busy".',
            s,
        ),
        _alert(
            "FsdpThroughputDrop",
            f"{GLOBAL_TOKENS}\n< {s.throughput_drop_ratio:g} * quantile_over_time(0.5, "
            f"{GLOBAL_TOKENS}[{s.throughput_baseline}] offset {s.throughput_offset})",
            s.throughput_for,
            "warning",
            f"Run {{{{ $labels.run_id }}}}: tokens/s fell below {s.throughput_drop_ratio:.0%} of its recent level",
            f"Run {{{{ $labels.run_id }}}} (namespace {{{{ $labels.namespace }}}}, nodes {_nodes_of_run(s)}) processes "
            f"{{{{ $value | humanize }}}} tokens/s, below {s.throughput_drop_ratio:.0%} of its median over the "
            f"{s.throughput_baseline} before the last {s.throughput_offset}, for {s.throughput_for}. Look for a "
            f"straggler rank, a throttled or erroring GPU, data-loader waits, or checkpoints in the window.",
            s,
        ),
    ]


#: How to ask a stuck rank where it is (the hang alerts' descriptions).
_ASK = (
    "Its stack: fsdp-observe diagnose --trainer (or --kube) gives the verdict with it, or GET /debug/stacks on "
    "its metrics port; each stalled rank also wrote its state, stacks and Flight Recorder dump once to the run's "
    "dump folder."
)


def hang_rules(s: Settings) -> list[dict[str, Any]]:
    """The hang group: which rank the others wait for (``observe.monitoring.hangs``), evaluated every
    ``hang_interval`` so a hang fires within a minute (``Settings.hang_interval``)."""
    place = hangs.place()
    place = place[0].upper() + place[1:]
    stalled = f"no step and no collective completed for longer than the stall threshold ({hangs.threshold(s)})"
    return [
        *hangs.recording_rules(s),
        _alert(
            "FsdpCollectiveHang",
            hangs.behind(s),
            s.hang_for,
            "critical",
            f"Run {{{{ $labels.run_id }}}}: rank {{{{ $labels.rank }}}} holds up {_COUNT} rank(s) in a collective "
            f"on process group {{{{ $labels.pg }}}}",
            f"{place} has not entered {hangs.waited_in(s)} on process group {{{{ $labels.pg }}}}, which "
            f"{_COUNT} rank(s) of the run wait in: {stalled}. It is in phase {hangs.phase_of_rank(s)} and "
            f"waits in no collective itself: it stopped before this one (its own code, its data, a deadlock). {_ASK}",
            s,
        ),
        _alert(
            "FsdpCollectiveMismatch",
            hangs.mismatch(s),
            s.hang_for,
            "critical",
            "Run {{ $labels.run_id }}: rank {{ $labels.rank }} waits in {{ $labels.op }} where the others wait in "
            "another collective",
            f"{place} is blocked in {{{{ $labels.op }}}} #{_COUNT} on process group {{{{ $labels.pg }}}} while "
            f"{hangs.majority(s)} at that sequence number: {stalled}. The ranks issued different collectives (a "
            f"rank-dependent branch, or one collective more or less on some ranks); gloo and NCCL do not check, "
            f"so every rank waits until the collective's timeout. {_ASK}",
            s,
        ),
        _alert(
            "FsdpRankGone",
            hangs.gone(s),
            s.hang_for,
            "critical",
            f"Run {{{{ $labels.run_id }}}}: rank {{{{ $labels.rank }}}} is gone while {_COUNT} rank(s) wait for it",
            f"{place} (target {{{{ $labels.instance }}}}) has no series in Prometheus any more: "
            f"{hangs.scrape_state(s)}. {_COUNT} rank(s) of the run wait in a collective: {stalled}; they will "
            f"wait until the collective's timeout. Look at the pod's events and the node, and at its rank's log "
            f"for its last words.",
            s,
        ),
    ]


def rule_file(settings: Settings | None = None) -> dict[str, Any]:
    """The rule file as a mapping: ``{"groups": [training, hang, gpu (the canonical DCGM layer first), nodes]}``."""
    s = settings or Settings()
    # The canonical DCGM layer first, in the group of the alerts that read it: a group's rules run in
    # order, so an alert sees this evaluation's records (groups run independently of each other).
    gpu = [
        *dialects.recording_rules(s),
        *gpu_recording_rules(s),
        *xid_alerts(s),
        *dcgm_xid_alerts(s),
        gpu_lost_alert(s),
        gpu_stale_alert(s),
        gpu_unreadable_alert(s),
    ]
    return {
        "groups": [
            {"name": "fsdp-observe.training", "rules": training_rules(s)},
            {"name": "fsdp-observe.hang", "interval": s.hang_interval, "rules": hang_rules(s)},
            {"name": "fsdp-observe.gpu", "rules": gpu},
            {"name": "fsdp-observe.nodes", "rules": node_rules(s)},
        ]
    }


def alert_names(settings: Settings | None = None) -> list[str]:
    """Every alert name, in file order."""
    return [r["alert"] for g in rule_file(settings)["groups"] for r in g["rules"] if "alert" in r]


def render(settings: Settings | None = None) -> str:
    """The YAML text of the rule file (deterministic; ``observe.monitoring.generate`` adds the header)."""
    return yamlio.dump(rule_file(settings))
