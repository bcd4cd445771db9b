"""The Alertmanager configuration of fsdp-observe's alerts, generated from ``Settings``.

Two forms of one route tree, built from the same settings as the rules (``observe.monitoring.rules``):

- ``config(settings)``: a complete ``alertmanager.yml`` (``dashboards/alertmanager.yml``) for
  people who run Alertmanager themselves; ``with_receivers`` adds their integrations (Slack,
  PagerDuty, a webhook) by receiver name, with every secret read from a file;
- ``crd_spec(settings)``: the same tree as the ``spec`` of a ``monitoring.coreos.com/v1alpha1``
  ``AlertmanagerConfig`` (wrapped by ``observe.monitoring.kube_objects`` into
  ``daemonsets/generated/alertmanagerconfig.yaml``) for kube-prometheus-stack, whose receivers a
  kustomize overlay fills in with Secret references (docs/alerting.md).

Routing (https://prometheus.io/docs/alerting/latest/configuration/#route): each XID severity
class (the alerts' ``xid_class`` label: ``node_reboot``, ``gpu_reset``, ``nvlink_fabric``,
``application``, ``unknown``) goes to the receiver its setting names, grouped by ``node`` and
``xid_class``, so one node's burst (eight GPUs falling off the bus) is one notification.
FsdpGpuLost goes with ``node_reboot`` (the same first action, a reboot), grouped by node;
FsdpGpuReadingStale (NVML calls that hang) with ``gpu_reset`` (the usual repair). The run
alerts go to ``receiver_training`` grouped by ``namespace`` and ``run_id``: every rank of an FSDP
run stalls together, and that is one notification per run.

Inhibition (https://prometheus.io/docs/alerting/latest/configuration/#inhibit_rule): a
``node_reboot`` XID on a node mutes ``gpu_reset`` and ``application`` XIDs on that node (a reboot
resets every GPU and ends every job there); a lost GPU mutes the XID alerts and the
stale-reading alert of that GPU (the lost-GPU page says all there is to do). A stalled run is not
muted by a GPU fault (it is the training team's page); its ``likely_cause`` annotation names the
fault (``rules``).

The root route matches only fsdp-observe's alert names, so under the operator's
``alertmanagerConfigMatcherStrategy: None`` the AlertmanagerConfig takes no other alert.
"""

from __future__ import annotations

import difflib
from typing import Any

from observe import yamlio
from observe.errors import UserError
from observe.monitoring import rules
from observe.monitoring.settings import Settings

CONFIG_FILE = "alertmanager.yml"
RESOURCE_FILE = "alertmanagerconfig.yaml"
#: XID severity classes that alert, each with the setting naming its receiver.
CLASS_RECEIVERS: dict[str, str] = {
    "node_reboot": "receiver_node_reboot",
    "gpu_reset": "receiver_gpu_reset",
    "nvlink_fabric": "receiver_nvlink_fabric",
    "application": "receiver_application",
    "unknown": "receiver_unknown",
}
#: The run alerts (one per rank or per run), routed to ``receiver_training``.
TRAINING_ALERTS = (
    "FsdpTrainingStalled",
    "FsdpCollectiveHang",
    "FsdpCollectiveMismatch",
    "FsdpRankGone",
    "FsdpStragglerRank",
    "FsdpThroughputDrop",
)
GROUP_BY_XID = ["node", "xid_class"]
GROUP_BY_NODE = ["node", "alertname"]
GROUP_BY_RUN = ["namespace", "run_id", "alertname"]
#: Integration fields that carry a secret inline; each has a ``*_file`` twin in Alertmanager 0.25.
INLINE_SECRETS: dict[str, str] = {
    "api_url": "api_url_file",
    "routing_key": "routing_key_file",
    "service_key": "service_key_file",
    "password": "password_file",
    "bearer_token": "bearer_token_file",
    "credentials": "credentials_file",
    "api_key": "api_key_file",
    "bot_token": "bot_token_file",
    "user_key": "user_key_file",
    "token": "token_file",
}


# --- one route tree, as plain data ---------------------------------------------------------------


def _matcher(name: str, value: str, op: str = "=") -> tuple[str, str, str]:
    return (name, op, value)


def _routes(s: Settings) -> list[dict[str, Any]]:
    """Child routes, each ``{"matchers": [(name, op, value)], "receiver", "group_by"}``."""
    routes: list[dict[str, Any]] = [
        {"matchers": [_matcher("xid_class", cls)], "receiver": getattr(s, field), "group_by": GROUP_BY_XID}
        for cls, field in CLASS_RECEIVERS.items()
    ]
    routes.append(
        {
            "matchers": [_matcher("alertname", "FsdpGpuLost")],
            "receiver": s.receiver_node_reboot,
            "group_by": GROUP_BY_NODE,
        }
    )
    routes.append(
        {
            "matchers": [_matcher("alertname", "FsdpGpuReadingStale")],
            "receiver": s.receiver_gpu_reset,
            "group_by": GROUP_BY_NODE,
        }
    )
    routes.append(
        {
            "matchers": [_matcher("alertname", "|".join(TRAINING_ALERTS), "=~")],
            "receiver": s.receiver_training,
            "group_by": GROUP_BY_RUN,
        }
    )
    return routes


def _root_matchers(s: Settings) -> list[tuple[str, str, str]]:
    return [_matcher("alertname", "|".join(rules.alert_names(s)), "=~")]


def _inhibitions() -> list[dict[str, Any]]:
    """Inhibit rules, each ``{"source": [...], "target": [...], "equal": [...]}``."""
    return [
        {
            "source": [_matcher("xid_class", "node_reboot")],
            "target": [_matcher("xid_class", "gpu_reset|application", "=~")],
            "equal": ["node"],
        },
        {
            "source": [_matcher("alertname", "FsdpGpuLost")],
            "target": [_matcher("xid_class", ".+", "=~")],
            "equal": ["node", "gpu_uuid"],
        },
        {
            "source": [_matcher("alertname", "FsdpGpuLost")],
            "target": [_matcher("alertname", "FsdpGpuReadingStale")],
            "equal": ["node", "gpu_uuid"],
        },
    ]


def receiver_names(s: Settings) -> list[str]:
    """Every receiver the route tree names: the default first, then in route order, once each."""
    return list(dict.fromkeys([s.receiver_default, *(r["receiver"] for r in _routes(s))]))


# --- alertmanager.yml ---------------------------------------------------------------------------


def _text(matchers: list[tuple[str, str, str]]) -> list[str]:
    return [f'{name}{op}"{value}"' for name, op, value in matchers]


def config(settings: Settings | None = None) -> dict[str, Any]:
    """A complete ``alertmanager.yml`` as a mapping; receivers carry no integration yet.

    A receiver without an integration drops what it receives: add integrations with
    ``with_receivers`` (or by hand where this file is your base), never secrets inline.
    """
    s = settings or Settings()
    return {
        "route": {
            "receiver": s.receiver_default,
            "group_by": GROUP_BY_NODE,
            "group_wait": s.group_wait,
            "group_interval": s.group_interval,
            "repeat_interval": s.repeat_interval,
            "routes": [
                {
                    "matchers": _text(_root_matchers(s)),
                    "receiver": s.receiver_default,
                    "group_by": GROUP_BY_NODE,
                    "routes": [
                        {"matchers": _text(r["matchers"]), "receiver": r["receiver"], "group_by": r["group_by"]}
                        for r in _routes(s)
                    ],
                }
            ],
        },
        "inhibit_rules": [
            {"source_matchers": _text(i["source"]), "target_matchers": _text(i["target"]), "equal": i["equal"]}
            for i in _inhibitions()
        ],
        "receivers": [{"name": name} for name in receiver_names(s)],
    }


def with_receivers(cfg: dict[str, Any], receivers: Any, where: str = "--receivers") -> dict[str, Any]:
    """``cfg`` with the integrations of ``receivers`` (Alertmanager's ``receivers:`` list) merged in by name.

    Args:
        cfg: a mapping from ``config``.
        receivers: a list of ``{"name": ..., "slack_configs": [...], ...}``; every name must be one
            the route tree uses.
        where: the flag or file named in errors.

    Raises:
        UserError: not a list of named mappings, a name the routes do not use (with the closest
            one), or an inline secret (``api_url``, ``routing_key``, ...: name its ``*_file`` twin).
    """
    if not isinstance(receivers, list) or not all(
        isinstance(r, dict) and isinstance(r.get("name"), str) for r in receivers
    ):
        raise UserError(
            where,
            "expected a list of receivers, each a mapping with a name",
            "write it as Alertmanager's receivers: list (docs/alerting.md)",
        )
    known = [r["name"] for r in cfg["receivers"]]
    merged = {name: {"name": name} for name in known}
    for receiver in receivers:
        name = receiver["name"]
        if name not in merged:
            close = difflib.get_close_matches(name, known, n=1)
            raise UserError(
                f"{where}: {name}",
                "no route sends to this receiver",
                f"did you mean {close[0]}?" if close else f"use one of {', '.join(known)}",
            )
        _refuse_inline_secrets(receiver, f"{where}: {name}")
        merged[name] = receiver
    return {**cfg, "receivers": [merged[name] for name in known]}


def _refuse_inline_secrets(obj: Any, where: str) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in INLINE_SECRETS and value:
                raise UserError(
                    f"{where}: {key}",
                    "a secret written into the configuration",
                    f"put it in a file readable by Alertmanager and use {INLINE_SECRETS[key]}",
                )
            _refuse_inline_secrets(value, where)
    elif isinstance(obj, list):
        for item in obj:
            _refuse_inline_secrets(item, where)


def render(settings: Settings | None = None, receivers: Any = None) -> str:
    """YAML text of ``config(settings)`` (with ``receivers`` merged in when given)."""
    cfg = config(settings)
    return yamlio.dump(cfg if receivers is None else with_receivers(cfg, receivers))


# --- AlertmanagerConfig (prometheus-operator) -----------------------------------------------------


def _crd_matchers(matchers: list[tuple[str, str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "matchType": op, "value": value} for name, op, value in matchers]


def crd_spec(settings: Settings | None = None) -> dict[str, Any]:
    """The route tree as the ``spec`` of a ``monitoring.coreos.com/v1alpha1`` ``AlertmanagerConfig``
    (the version kube-prometheus-stack serves and stores): camelCase keys, matchers as objects."""
    s = settings or Settings()
    route = {
        "receiver": s.receiver_default,
        "matchers": _crd_matchers(_root_matchers(s)),
        "groupBy": GROUP_BY_NODE,
        "groupWait": s.group_wait,
        "groupInterval": s.group_interval,
        "repeatInterval": s.repeat_interval,
        "routes": [
            {"matchers": _crd_matchers(r["matchers"]), "receiver": r["receiver"], "groupBy": r["group_by"]}
            for r in _routes(s)
        ],
    }
    return {
        "route": route,
        "inhibitRules": [
            {"sourceMatch": _crd_matchers(i["source"]), "targetMatch": _crd_matchers(i["target"]), "equal": i["equal"]}
            for i in _inhibitions()
        ],
        "receivers": [{"name": name} for name in receiver_names(s)],
    }
