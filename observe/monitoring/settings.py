"""The one settings object of the generated dashboards and rules, and the PromQL pieces they share.

What differs between clusters lives in ``Settings`` (as a monitoring mixin's ``_config``): the
datasource variable's plugin type, extra selectors per source, the label names of the
dcgm-exporter release in use, thresholds and windows of the alerts, and the runbook base URL.
``observe.monitoring.dashboards`` and ``observe.monitoring.rules`` take every choice from it, and every metric name from
``observe.catalog`` (ours) or ``DCGM`` below (NVIDIA's).

dcgm-exporter spells its identity labels differently by release (``/work/shared/cases/dcgm``,
``tests/cases/dcgm``): ``UUID``/``uuid``/``gpu_uuid`` for the GPU UUID, ``Hostname``/``hostname``
for the node, ``modelName``/``model_name`` for the model. ``Settings.dcgm`` turns a DCGM series
into one carrying our names (``node``, ``gpu_uuid``) with ``label_replace``, so joins with the
trainer's and the agent's series (which carry ``node`` and ``gpu_uuid``, DESIGN.md) read the same
whatever the dialect.

Standard library only; nothing here talks to a server.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from observe.errors import UserError
from observe.promql import duration_seconds, is_label_name

#: NVIDIA dcgm-exporter's field names (not ours; named once here). The first six are the fields
#: the original EKS GPU-monitoring walkthrough charts.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
DCGM_MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"  # percent
DCGM_XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"  # the last XID code seen (sticky gauge; err_code, err_msg)
DCGM_SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # MHz
DCGM_GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"  # degrees C
DCGM_POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"  # W
#: XID records per GPU and code (label ``xid``) in the exporter's sliding window: a gauge.
DCGM_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
DCGM: tuple[str, ...] = (DCGM_GPU_UTIL, DCGM_MEM_COPY_UTIL, DCGM_XID_ERRORS, DCGM_SM_CLOCK, DCGM_GPU_TEMP,
                         DCGM_POWER_USAGE, DCGM_XID_COUNT)

@dataclass(frozen=True)
class Settings:
    """Everything the generated dashboards and rules let a cluster choose.

    Attributes:
        datasource_type: plugin id of the ``${datasource}`` template variable (every panel and
            query points at that variable, never at a fixed datasource UID).
        trainer_selector, agent_selector, dcgm_selector: extra label matchers (no braces) for
            the trainer's, the agent's and dcgm-exporter's series, e.g. ``'cluster="eu-1"'``.
        dcgm_uuid_label: the GPU-UUID label of the dcgm-exporter in use (``UUID``, ``uuid`` or
            ``gpu_uuid``).
        dcgm_hostname_label: its node label (``Hostname`` up to 3.x, ``hostname`` in newer
            releases).
        dcgm_model_label: its GPU model label (``modelName`` or ``model_name``).
        runbook_base_url: the page the alerts' ``runbook_url`` points into (``#anchor`` appended).
        xid_window: look-back of the XID alerts (a Prometheus duration).
        xid_for: ``for`` of the XID alerts.
        xid_application_burst: application-class XIDs on one GPU within ``xid_window`` that make
            a burst (one such XID is usually the job's own bug).
        gpu_lost_for: ``for`` of the GPU-lost alert.
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
    """

    datasource_type: str = "prometheus"
    trainer_selector: str = ""
    agent_selector: str = ""
    dcgm_selector: str = ""
    dcgm_uuid_label: str = "UUID"
    dcgm_hostname_label: str = "Hostname"
    dcgm_model_label: str = "modelName"
    runbook_base_url: str = "https://github.com/fsdp-observe/fsdp-observe/blob/main/docs/dashboards.md"
    xid_window: str = "10m"
    xid_for: str = "1m"
    xid_application_burst: int = 3
    gpu_lost_for: str = "1m"
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

    def __post_init__(self) -> None:
        """Check every field.

        Raises:
            UserError: naming the field, the problem and the fix.
        """
        for f in fields(self):
            value = getattr(self, f.name)
            kinds: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "str": str}
            expected = kinds[str(f.type)]
            if isinstance(value, bool) or not isinstance(value, expected):
                raise UserError(f.name, f"expected {str(f.type)}, got {value!r}", f"give a {str(f.type)} value")
        for name in ("xid_window", "xid_for", "gpu_lost_for", "stall_time", "stall_for", "straggler_for",
                     "throughput_baseline", "throughput_offset", "throughput_for"):
            try:
                duration_seconds(getattr(self, name))
            except ValueError as exc:
                raise UserError(name, str(exc), "give a duration such as 90s, 15m or 1h30m") from None
        for name in ("dcgm_uuid_label", "dcgm_hostname_label", "dcgm_model_label"):
            if not is_label_name(getattr(self, name)):
                raise UserError(name, f"{getattr(self, name)!r} is not a Prometheus label name",
                                "give the label as dcgm-exporter prints it, e.g. UUID or Hostname")
        for name in ("trainer_selector", "agent_selector", "dcgm_selector"):
            if any(ch in getattr(self, name) for ch in "{}"):
                raise UserError(name, "label matchers are given without braces", 'write e.g. cluster="eu-1"')
        if self.xid_application_burst < 1:
            raise UserError("xid_application_burst", f"{self.xid_application_burst} is below 1", "give 1 or more")
        if self.straggler_ratio <= 1:
            raise UserError("straggler_ratio", f"{self.straggler_ratio} is not above 1",
                            "give a ratio above 1 (1.5 = 50 % slower than the run's median)")
        if not 0 < self.throughput_drop_ratio < 1:
            raise UserError("throughput_drop_ratio", f"{self.throughput_drop_ratio} is not between 0 and 1",
                            "give e.g. 0.7 (below 70 % of the recent level)")
        if not self.runbook_base_url.startswith(("http://", "https://")):
            raise UserError("runbook_base_url", f"{self.runbook_base_url!r} is not an http(s) URL",
                            "give the https:// address of the runbook page")

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
            raise UserError(unknown[0], "unknown field", f"did you mean {close[0]}?" if close else
                            f"known fields: {', '.join(sorted(known))}")
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

    def dcgm_normalised(self, expr: str) -> str:
        """``expr`` (DCGM series) with ``node`` and ``gpu_uuid`` labels copied from the dialect's."""
        for ours, theirs in (("node", self.dcgm_hostname_label), ("gpu_uuid", self.dcgm_uuid_label)):
            if ours != theirs:
                expr = f'label_replace({expr}, "{ours}", "$1", "{theirs}", "(.+)")'
        return expr

    def dcgm(self, name: str, *matchers: str) -> str:
        """``dcgm_normalised`` of ``dcgm_raw(name, *matchers)``."""
        return self.dcgm_normalised(self.dcgm_raw(name, *matchers))

    def runbook(self, anchor: str) -> str:
        """The runbook URL of one alert: ``runbook_base_url#anchor``."""
        return f"{self.runbook_base_url}#{anchor}"
