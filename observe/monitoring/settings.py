"""The one settings object of the generated dashboards, rules and Alertmanager configuration, and the
PromQL pieces they share.

What differs between clusters lives in ``Settings`` (as a monitoring mixin's ``_config``): the
datasource variable's plugin type, extra selectors per source, the label names of the
dcgm-exporter release in use, thresholds and windows of the alerts, the runbook base URL, and
the Alertmanager receivers and grouping intervals. ``observe.monitoring.dashboards``,
``observe.monitoring.rules`` and ``observe.monitoring.alertmanager`` take every choice from it, and
every metric name from ``observe.catalog`` (ours) or ``observe.monitoring.fields`` (dcgm-exporter's
and node-exporter's).

dcgm-exporter's identity labels (``tests/cases/dcgm``; ``internal/pkg/rendermetrics`` of the
exporter): every tagged release up to 4.5.3-4.8.2 writes ``gpu``, ``UUID`` (``uuid`` with
``--use-old-namespace``), ``pci_bus_id``, ``device``, ``modelName`` and ``Hostname`` on GPU fields
(``GPU_I_PROFILE``/``GPU_I_ID`` under MIG); the exporter's main branch after that tag writes
``hostname``. ``Settings.dcgm`` turns a DCGM series into one carrying our names (``node``,
``gpu_uuid``, ``pci_bus``) with ``label_replace``, so joins with the trainer's and the agent's
series (which carry ``node`` and ``gpu_uuid``) read the same whatever the dialect.

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
        dcgm_uuid_label: the GPU-UUID label of the dcgm-exporter in use (``UUID``; ``uuid`` with
            ``--use-old-namespace``).
        dcgm_hostname_label: its node label (``Hostname`` in every tagged release up to
            4.5.3-4.8.2; ``hostname`` on the exporter's main branch after it).
        dcgm_model_label: its GPU model label on GPU fields (``modelName``).
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
            a burst (one such XID is usually the job's own bug).
        gpu_lost_for: ``for`` of the GPU-lost alert.
        gpu_stale_for: how long the agent's NVML reading of a GPU may stay unfinished (a driver
            call that hangs) before FsdpGpuReadingStale fires.
        stall_time: no optimizer step on a rank for this long (and the rank not finished) is a
            stall.
        stall_for: ``for`` of the stall alert.
        straggler_ratio: a rank whose mean step time (5 min) exceeds this many times the run's
            median is a straggler.
        straggler_for: ``for`` of the straggler alert.
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
        receiver_training: the receiver of the run alerts (stall, straggler, throughput drop).
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
    dcgm_uuid_label: str = "UUID"
    dcgm_hostname_label: str = "Hostname"
    dcgm_model_label: str = "modelName"
    dcgm_xid_count: bool = False
    node_exporter_selector: str = 'job="node-exporter"'
    node_exporter_node_label: str = "instance"
    top_n: int = 10
    runbook_base_url: str = "https://github.com/fsdp-observe/fsdp-observe/blob/main/docs/dashboards.md"
    xid_window: str = "10m"
    xid_for: str = "1m"
    xid_application_burst: int = 3
    gpu_lost_for: str = "1m"
    gpu_stale_for: str = "5m"
    stall_time: str = "15m"
    stall_for: str = "2m"
    straggler_ratio: float = 1.5
    straggler_for: str = "10m"
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
            "gpu_lost_for",
            "gpu_stale_for",
            "stall_time",
            "stall_for",
            "straggler_for",
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
        for name in ("dcgm_uuid_label", "dcgm_hostname_label", "dcgm_model_label", "node_exporter_node_label"):
            if not is_label_name(getattr(self, name)):
                raise UserError(
                    name,
                    f"{getattr(self, name)!r} is not a Prometheus label name",
                    "give the label as dcgm-exporter prints it, e.g. UUID or Hostname",
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
        """``name{...}`` with the DCGM selector and ``matchers`` (in the dialect's label names)."""
        return self._select(name, self.dcgm_selector, *matchers)

    def dcgm_node(self, pattern: str) -> str:
        """A matcher on DCGM's node label, in this dialect: ``Hostname=~"<pattern>"``."""
        return f'{self.dcgm_hostname_label}=~"{pattern}"'

    def dcgm_normalised(self, expr: str, pci_bus: bool = False) -> str:
        """``expr`` (DCGM series) with ``node`` and ``gpu_uuid`` labels copied from the dialect's.

        With ``pci_bus``, also ``pci_bus`` in the agent's form (``0000:18:00`` from DCGM's
        ``00000000:18:00.0``; the hex digits keep the exporter's case).
        """
        for ours, theirs in (("node", self.dcgm_hostname_label), ("gpu_uuid", self.dcgm_uuid_label)):
            if ours != theirs:
                expr = f'label_replace({expr}, "{ours}", "$1", "{theirs}", "(.+)")'
        if pci_bus:
            expr = (
                f'label_replace({expr}, "pci_bus", "$1:$2", "pci_bus_id", '
                f'"0000([0-9A-Fa-f]{{4}}):([0-9A-Fa-f]{{2}}:[0-9A-Fa-f]{{2}})[.][0-9A-Fa-f]")'
            )
        return expr

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

    def dcgm(self, name: str, *matchers: str) -> str:
        """``dcgm_normalised`` of ``dcgm_raw(name, *matchers)``."""
        return self.dcgm_normalised(self.dcgm_raw(name, *matchers))

    def runbook(self, anchor: str) -> str:
        """The runbook URL of one alert: ``runbook_base_url#anchor``."""
        return f"{self.runbook_base_url}#{anchor}"
