"""``observe.monitoring.settings.Settings``: validation naming the field, selectors, retired dialect settings."""

from __future__ import annotations

import pytest

from observe.errors import UserError
from observe.monitoring.settings import Settings
from observe.promql import duration_seconds


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("15m", 900), ("1h30m", 5400), ("500ms", 0.5), ("2d", 172800)])
def test_durations(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("stall_time", "15 minutes", "stall_time: '15 minutes' is not a Prometheus duration"),
        ("xid_for", "", "xid_for: '' is not a Prometheus duration"),
        ("trainer_selector", '{cluster="a"}', "trainer_selector: label matchers are given without braces"),
        ("xid_application_burst", 0, "xid_application_burst: 0 is below 1; give 1 or more"),
        ("xid_application_burst", 2.5, "xid_application_burst: expected int, got 2.5"),
        ("throughput_drop_ratio", 1.2, "throughput_drop_ratio: 1.2 is not between 0 and 1"),
        ("runbook_base_url", "docs/dashboards.md", "runbook_base_url: 'docs/dashboards.md' is not an http(s) URL"),
        ("straggler_ratio", True, "straggler_ratio: expected float, got True"),
        ("straggler_share", 1.0, "straggler_share: 1.0 is not from 0 to below 1"),
        ("hang_interval", "0s", "hang_interval: 0 is not an evaluation interval"),
        ("hang_for", "1 minute", "hang_for: '1 minute' is not a Prometheus duration"),
    ],
)
def test_a_bad_value_names_its_field(field: str, value, message: str) -> None:
    with pytest.raises(UserError) as err:
        Settings.from_mapping({field: value})
    assert err.value.field == field
    assert str(err.value).startswith(message) and err.value.fix


def test_unknown_fields_are_refused_with_a_close_match() -> None:
    with pytest.raises(UserError, match=r"^dcgm_selectr: unknown field; did you mean dcgm_selector\?"):
        Settings.from_mapping({"dcgm_selectr": 'job="x"'})
    with pytest.raises(UserError, match=r"^zzz: unknown field; known fields: agent_selector, "):
        Settings.from_mapping({"zzz": 1})
    assert Settings.from_mapping({"straggler_ratio": 2}).straggler_ratio == 2  # an int where a float goes


def test_selectors_carry_the_cluster_matchers() -> None:
    s = Settings(trainer_selector='cluster="eu-1"', agent_selector='job="agent"', dcgm_selector='job="dcgm"')
    assert s.trainer("fsdp_train_loss", 'rank="0"') == 'fsdp_train_loss{cluster="eu-1",rank="0"}'
    assert s.agent("fsdp_gpu_lost") == 'fsdp_gpu_lost{job="agent"}'
    assert Settings().trainer("fsdp_train_loss") == "fsdp_train_loss"
    assert s.dcgm_raw("DCGM_FI_DEV_GPU_TEMP", 'gpu="0"') == 'DCGM_FI_DEV_GPU_TEMP{job="dcgm",gpu="0"}'
    assert s.dcgm_raw("", '__name__=~"A|B"') == '{job="dcgm",__name__=~"A|B"}'


@pytest.mark.parametrize("field", ["dcgm_hostname_label", "dcgm_uuid_label", "dcgm_model_label"])
def test_the_retired_dialect_settings_say_why_and_what_to_do(field: str) -> None:
    """Every dcgm-exporter dialect is read at once now; an old settings file gets one clear line."""
    with pytest.raises(UserError) as err:
        Settings.from_mapping({field: "hostname"})
    assert err.value.field == field
    assert "no longer a setting" in err.value.problem and "Hostname and hostname" in err.value.problem
    assert err.value.fix == "remove it from the settings file"


def test_node_exporter_series_get_our_node_label() -> None:
    assert Settings().node_exporter("node_uname_info") == (
        'label_replace(node_uname_info{job="node-exporter"}, "node", "$1", "instance", "(.+)")'
    )
    assert Settings(node_exporter_node_label="node").node_exporter("node_uname_info") == (
        'node_uname_info{job="node-exporter"}'
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("dcgm_xid_count", "yes", "dcgm_xid_count: expected bool, got 'yes'"),
        ("top_n", True, "top_n: expected int, got True"),
        ("top_n", 200, "top_n: 200 is outside 1..50"),
        ("node_exporter_node_label", "node name", "node_exporter_node_label: 'node name' is not a Prometheus label"),
    ],
)
def test_the_new_settings_name_their_field(field: str, value, message: str) -> None:
    with pytest.raises(UserError) as err:
        Settings.from_mapping({field: value})
    assert str(err.value).startswith(message)
    assert Settings.from_mapping({"dcgm_xid_count": True}).dcgm_xid_count is True
