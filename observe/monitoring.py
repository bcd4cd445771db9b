"""The one settings object of the generated dashboards and rules, and the PromQL pieces they share.

What differs between clusters lives in ``Settings`` (as a monitoring mixin's ``_config``): the
datasource variable's plugin type, extra selectors per source, the label names of the
dcgm-exporter release in use, thresholds and windows of the alerts, and the runbook base URL.
``observe.dashboards`` and ``observe.rules`` take every choice from it, and every metric name from
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
import re
from dataclasses import dataclass, fields
from typing import Any

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

_DURATION = re.compile(r"^(?:(\d+)(ms|s|m|h|d|w|y))+$")
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def duration_seconds(text: str) -> float:
    """Seconds in a Prometheus duration (``90s``, ``15m``, ``1h30m``).

    Raises:
        ValueError: not a Prometheus duration.
    """
    if not isinstance(text, str) or not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a Prometheus duration like 30s, 15m or 1h30m")
    return sum(int(n) * _SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


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
        for f in fields(self):
            value = getattr(self, f.name)
            expected = {"int": int, "float": (int, float), "str": str}[str(f.type)]
            if isinstance(value, bool) or not isinstance(value, expected):
                raise ValueError(f"{f.name}: expected {str(f.type)}, got {value!r}")
        for name in ("xid_window", "xid_for", "gpu_lost_for", "stall_time", "stall_for", "straggler_for",
                     "throughput_baseline", "throughput_offset", "throughput_for"):
            try:
                duration_seconds(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        for name in ("dcgm_uuid_label", "dcgm_hostname_label", "dcgm_model_label"):
            if not _LABEL.match(getattr(self, name)):
                raise ValueError(f"{name}: {getattr(self, name)!r} is not a Prometheus label name")
        for name in ("trainer_selector", "agent_selector", "dcgm_selector"):
            if any(ch in getattr(self, name) for ch in "{}"):
                raise ValueError(f"{name}: give label matchers without braces, e.g. cluster=\"eu-1\"")
        if self.xid_application_burst < 1:
            raise ValueError("xid_application_burst: must be 1 or more")
        if self.straggler_ratio <= 1:
            raise ValueError("straggler_ratio: must be above 1 (1.5 = 50 % slower than the run's median)")
        if not 0 < self.throughput_drop_ratio < 1:
            raise ValueError("throughput_drop_ratio: must be between 0 and 1 (0.7 = below 70 % of the recent level)")
        if not self.runbook_base_url.startswith(("http://", "https://")):
            raise ValueError("runbook_base_url: must be an http(s) URL")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> Settings:
        """Defaults overridden by ``values`` (e.g. a YAML settings file).

        Raises:
            ValueError: an unknown field (named, with the known ones) or a bad value.
        """
        if not isinstance(values, dict):
            raise ValueError("settings must be a mapping of field: value")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown field {unknown[0]!r}; known fields: {', '.join(sorted(known))}")
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
