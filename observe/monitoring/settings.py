"""The one settings object of the generated dashboards, rules and Alertmanager configuration, and the
PromQL pieces they share.

What differs between clusters lives in ``Settings`` (as a monitoring mixin's ``_config``): the
datasource variable's plugin type, extra selectors per source, the label names of the
dcgm-exporter release in use, thresholds and windows of the alerts, the runbook base URL, and
the Alertmanager receivers and grouping intervals. ``observe.monitoring.dashboards``,
``observe.monitoring.rules`` and ``observe.monitoring.alertmanager`` take every choice from it, and
every metric name from ``observe.catalog`` (ours) or ``observe.monitoring.fields`` (dcgm-exporter's
and node-exporter's).

dcgm-exporter's series reach the dashboards and alerts only through the canonical layer of
recording rules (``observe.monitoring.dialects``), which reads every dialect at once (``Hostname``
or ``hostname``, the field names before and after 4.9.0, ``UUID`` or ``uuid``): no setting names
a dialect.

Standard library only; nothing here talks to a server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from observe.errors import UserError
from observe.promql import duration_seconds, is_label_name

#: The fields naming Alertmanager receivers.
RECEIVER_FIELDS = (
    "receiver_node_reboot",
    "receiver_gpu_reset",
    "receiver_nvlink_fabric",
    "receiver_application",
    "receiver_unknown",
    "receiver_training",
    "receiver_default",
)


#: Settings that no longer exist, and why: the canonical DCGM layer reads every dialect.
RETIRED = dict.fromkeys(
    ("dcgm_hostname_label", "dcgm_uuid_label", "dcgm_model_label"),
    "no longer a setting: the recording rules read every dcgm-exporter dialect (Hostname and hostname, "
    "UUID and uuid, the names before and after 4.9.0) at once",
)


@dataclass(frozen=True)
class Settings:
    """Everything the generated dashboards and rules let a cluster choose.

    Attributes:
        datasource_type: plugin id of the ``${datasource}`` template variable (every panel and
            query points at that variable, never at a fixed datasource UID).
        trainer_selector, agent_selector, dcgm_selector: extra label matchers (no braces) for
            the trainer's, the agent's and dcgm-exporter's series, e.g. ``'cluster="eu-1"'``.
            The default ``job="nvidia-dcgm-exporter"`` is what the GPU Operator's ServiceMonitor
            gives (``jobLabel: app`` on a Service labelled ``app: nvidia-dcgm-exporter``).
        dcgm_xid_count: the exporter exports ``DCGM_EXP_XID_ERRORS_COUNT`` (off by default in
            dcgm-exporter; docs/dashboards.md says how to switch it on). Then the DCGM XID alerts
            count XIDs in its window (and alert on bursts); otherwise they alert on a change of
            the last-XID field ``DCGM_FI_DEV_XID_ERRORS``, which every stock install exports.
        node_exporter_selector: label matchers for node-exporter's series.
        node_exporter_node_label: node-exporter's label holding the Kubernetes node name
            (kube-prometheus-stack relabels ``instance`` to it).
        top_n: how many GPUs, ranks or processes a "worst N" panel or table shows (panels stay
            readable at 8,192 ranks: never one line per rank).
        runbook_base_url: the page the alerts' ``runbook_url`` points into (``#anchor`` appended).
        xid_window: look-back of the XID alerts (a Prometheus duration).
        xid_for: ``for`` of the XID alerts.
        xid_application_burst: application-class XIDs on one GPU within ``xid_window`` that make
            a burst (one such XID is usually the job's own bug). The agent counts a report once,
            however many lines the driver printed for it (``observe.xid``: one out-of-range access
            prints three XID 13 lines), so this is a number of distinct faults.
        xid_reboot_keep_firing_for: how long the ``node_reboot``-class XID alerts keep firing
            after their window (Prometheus' ``keep_firing_for``, 2.42 and later). They inhibit the
            node's ``gpu_reset`` and ``application`` XID alerts, and Alertmanager inhibits only
            while the source fires; the XIDs of one incident can land a scrape or an evaluation
            apart (the agent counts the lines of one kernel-log write one at a time), so without
            this margin a muted burst would page the moment the reboot alert resolved. Cover one
            scrape interval plus one evaluation interval.
        gpu_lost_for: ``for`` of the GPU-lost alert.
        gpu_stale_for: how long the agent's NVML reading of a GPU may stay unfinished (a driver
            call that hangs) before FsdpGpuReadingStale fires, or without a single figure (its
            calls all fail) before FsdpGpuUnreadable fires.
        stall_time: no optimizer step on a rank for this long (and the rank not finished, its
            loop not ended, its own stall watchdog not saying it still makes progress) is a stall.
        stall_for: ``for`` of the stall alert.
        straggler_ratio: a rank whose compute time per step (5 min: step time less data wait and
            collective wait, ``fsdp_train_compute_seconds_total``) exceeds this many times the
            run's median rank's ...
        straggler_share: ... by more than this share of the run's median step time is a
            straggler ...
        straggler_min_excess: ... and by more than this duration per step: below it lies what a
            shared host's scheduler adds to one rank's compute for a while; a step of seconds
            (any Llama-family fine-tuning) never meets it. (All three as
            ``observe.diagnosis.judge``'s ``STRAGGLER_RATIO``, ``STRAGGLER_SHARE`` and
            ``STRAGGLER_MIN_EXCESS_SECONDS``, so the alert and ``fsdp-observe diagnose`` agree; a
            test checks the defaults are equal.) Step time cannot name a straggler: synchronous
            FSDP ranks share one step time.
        straggler_for: ``for`` of the straggler alert.
        hang_interval: evaluation interval of the hang alerts' rule group
            (``fsdp-observe.hang``). With the trainer PodMonitor's 15 s scrape and the rank's stall
            watchdog (30 s floor, 1 s look), a hang of a run whose median step is under 10 s fires
            at most 30 + 2 + 15 + 10 = 57 s after it starts (docs/dashboards.md).
        hang_for: ``for`` of the hang alerts (FsdpCollectiveHang, FsdpCollectiveMismatch,
            FsdpRankGone); the rank's watchdog has already waited its threshold, and anything over
            3 s breaks the minute above.
        throughput_drop_ratio: a run whose global tokens/s falls below this share of its own
            recent level (the median over ``throughput_baseline`` before ``throughput_offset``)
            has dropped.
        throughput_baseline: length of that recent level's window.
        throughput_offset: how far back the recent level's window ends, so the drop itself
            does not pull the baseline down.
        throughput_for: ``for`` of the throughput-drop alert.
        gpu_temperature_warning_celsius, gpu_temperature_critical_celsius: threshold lines on
            the temperature panels.
        receiver_node_reboot, receiver_gpu_reset, receiver_nvlink_fabric, receiver_application,
            receiver_unknown: the Alertmanager receiver each XID severity class routes to
            (``observe.monitoring.alertmanager``; FsdpGpuLost goes with ``node_reboot``: its first
            action is the same reboot). Several classes may name one receiver.
        receiver_training: the receiver of the run alerts (stall, hang, straggler, throughput drop).
        receiver_default: the root route's receiver: any alert no other route takes.
        group_wait: how long Alertmanager holds a new group (one node and class) before its first
            notification, so the rest of a burst joins it.
        group_interval: how long it waits before notifying a group again about alerts that
            joined or resolved since.
        repeat_interval: how long before it repeats a notification whose alerts are unchanged
            and still firing.
    """

    datasource_type: str = "prometheus"
    trainer_selector: str = ""
    agent_selector: str = ""
    dcgm_selector: str = 'job="nvidia-dcgm-exporter"'
    dcgm_xid_count: bool = False
    node_exporter_selector: str = 'job="node-exporter"'
    node_exporter_node_label: str = "instance"
    top_n: int = 10
    runbook_base_url: str = "https://github.com/fsdp-observe/fsdp-observe/blob/main/docs/dashboards.md"
    xid_window: str = "10m"
    xid_for: str = "1m"
    xid_application_burst: int = 3
    xid_reboot_keep_firing_for: str = "1m"
    gpu_lost_for: str = "1m"
    gpu_stale_for: str = "5m"
    stall_time: str = "15m"
    stall_for: str = "2m"
    straggler_ratio: float = 1.5
    straggler_share: float = 0.1
    straggler_min_excess: str = "50ms"
    straggler_for: str = "10m"
    hang_interval: str = "10s"
    hang_for: str = "0s"
    throughput_drop_ratio: float = 0.7
    throughput_baseline: str = "1h"
    throughput_offset: str = "10m"
    throughput_for: str = "15m"
    gpu_temperature_warning_celsius: float = 80.0
    gpu_temperature_critical_celsius: float = 87.0
    receiver_node_reboot: str = "fsdp-observe-gpu-page"
    receiver_gpu_reset: str = "fsdp-observe-gpu-page"
    receiver_nvlink_fabric: str = "fsdp-observe-gpu-page"
    receiver_application: str = "fsdp-observe-gpu-ticket"
    receiver_unknown: str = "fsdp-observe-gpu-ticket"
    receiver_training: str = "fsdp-observe-training"
    receiver_default: str = "fsdp-observe-default"
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"

    def __post_init__(self) -> None:
        """Check every field.

        Raises:
            UserError: naming the field, the problem and the fix.
        """
        for f in fields(self):
            value = getattr(self, f.name)
            kinds: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "str": str, "bool": bool}
            expected = kinds[str(f.type)]
            if isinstance(value, bool) != (f.type == "bool") or not isinstance(value, expected):
                raise UserError(f.name, f"expected {str(f.type)}, got {value!r}", f"give a {str(f.type)} value")
        for name in (
            "xid_window",
            "xid_for",
            "xid_reboot_keep_firing_for",
            "gpu_lost_for",
            "gpu_stale_for",
            "stall_time",
            "stall_for",
            "straggler_min_excess",
            "straggler_for",
            "hang_interval",
            "hang_for",
            "throughput_baseline",
            "throughput_offset",
            "throughput_for",
            "group_wait",
            "group_interval",
            "repeat_interval",
        ):
            try:
                duration_seconds(getattr(self, name))
            except ValueError as exc:
                raise UserError(name, str(exc), "give a duration such as 90s, 15m or 1h30m") from None
        if not is_label_name(self.node_exporter_node_label):
            raise UserError(
                "node_exporter_node_label",
                f"{self.node_exporter_node_label!r} is not a Prometheus label name",
                "give the label that holds the node name, e.g. instance",
            )
        for name in ("trainer_selector", "agent_selector", "dcgm_selector", "node_exporter_selector"):
            if any(ch in getattr(self, name) for ch in "{}"):
                raise UserError(name, "label matchers are given without braces", 'write e.g. cluster="eu-1"')
        if not 1 <= self.top_n <= 50:
            raise UserError(
                "top_n",
                f"{self.top_n} is outside 1..50",
                "give 1 to 50 (a panel with more lines than that is unreadable)",
            )
        if self.xid_application_burst < 1:
            raise UserError("xid_application_burst", f"{self.xid_application_burst} is below 1", "give 1 or more")
        if self.straggler_ratio <= 1:
            raise UserError(
                "straggler_ratio",
                f"{self.straggler_ratio} is not above 1",
                "give a ratio above 1 (1.5 = 50 % slower than the run's median)",
            )
        if not 0 <= self.straggler_share < 1:
            raise UserError(
                "straggler_share",
                f"{self.straggler_share} is not from 0 to below 1",
                "give e.g. 0.1 (the excess must be over 10 % of the run's median step time)",
            )
        if duration_seconds(self.hang_interval) == 0:
            raise UserError("hang_interval", "0 is not an evaluation interval", "give e.g. 10s")
        if not 0 < self.throughput_drop_ratio < 1:
            raise UserError(
                "throughput_drop_ratio",
                f"{self.throughput_drop_ratio} is not between 0 and 1",
                "give e.g. 0.7 (below 70 % of the recent level)",
            )
        for name in RECEIVER_FIELDS:
            value = getattr(self, name)
            if not value or value != value.strip() or any(ch in value for ch in "\n\"'"):
                raise UserError(
                    name,
                    f"{value!r} is not a receiver name",
                    "give the name of an Alertmanager receiver, e.g. gpu-oncall (no quotes or newline)",
                )
        if duration_seconds(self.group_interval) == 0:
            raise UserError("group_interval", "0 is not allowed by Alertmanager", "give e.g. 5m")
        if duration_seconds(self.repeat_interval) < duration_seconds(self.group_interval):
            raise UserError(
                "repeat_interval",
                f"{self.repeat_interval} is shorter than group_interval {self.group_interval}",
                "give a repeat_interval at least as long as group_interval",
            )
        if not self.runbook_base_url.startswith(("http://", "https://")):
            raise UserError(
                "runbook_base_url",
                f"{self.runbook_base_url!r} is not an http(s) URL",
                "give the https:// address of the runbook page",
            )

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Settings:
        """Defaults overridden by ``values`` (e.g. a YAML settings file).

        Raises:
            UserError: an unknown field (named, with the known ones) or a bad value.
        """
        if not isinstance(values, dict):
            raise UserError("settings", f"a {type(values).__name__}, not a mapping", "write one field: value per line")
        known = {f.name for f in fields(cls)}
        retired = sorted(set(values) & set(RETIRED))
        if retired:
            raise UserError(retired[0], RETIRED[retired[0]], "remove it from the settings file")
        unknown = sorted(set(values) - known)
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], known, n=1)
            raise UserError(
                unknown[0],
                "unknown field",
                f"did you mean {close[0]}?" if close else f"known fields: {', '.join(sorted(known))}",
            )
        return dataclasses.replace(cls(), **values)

    # --- selectors ------------------------------------------------------------------------

    @staticmethod
    def _select(name: str, *matchers: str) -> str:
        inner = ",".join(m for m in matchers if m)
        return f"{name}{{{inner}}}" if inner else name

    def trainer(self, name: str, *matchers: str) -> str:
        """``name{...}`` with the trainer selector and ``matchers`` (strings like ``rank="0"``)."""
        return self._select(name, self.trainer_selector, *matchers)

    def agent(self, name: str, *matchers: str) -> str:
        """``name{...}`` with the agent selector and ``matchers``."""
        return self._select(name, self.agent_selector, *matchers)

    def dcgm_raw(self, name: str, *matchers: str) -> str:
        """``name{...}`` with the DCGM selector and ``matchers`` (in dcgm-exporter's label names);
        ``name`` may be empty when a ``__name__`` matcher is given."""
        return self._select(name, self.dcgm_selector, *matchers)

    def node_exporter_raw(self, name: str, *matchers: str) -> str:
        """``name{...}`` with the node-exporter selector and ``matchers`` (in its label names)."""
        return self._select(name, self.node_exporter_selector, *matchers)

    def node_exporter(self, name: str, *matchers: str) -> str:
        """``name{...}`` with the node-exporter selector and ``matchers``, its node label copied to
        ``node`` (kube-prometheus-stack relabels ``instance`` to the node name)."""
        expr = self.node_exporter_raw(name, *matchers)
        if self.node_exporter_node_label != "node":
            expr = f'label_replace({expr}, "node", "$1", "{self.node_exporter_node_label}", "(.+)")'
        return expr

    def node_exporter_node(self, pattern: str) -> str:
        """A matcher on node-exporter's node label: ``instance=~"<pattern>"``."""
        return f'{self.node_exporter_node_label}=~"{pattern}"'

    def runbook(self, anchor: str) -> str:
        """The runbook URL of one alert: ``runbook_base_url#anchor``."""
        return f"{self.runbook_base_url}#{anchor}"
