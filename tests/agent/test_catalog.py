"""The agent section of observe/catalog.py follows the naming rules: Prometheus snake_case with base units,
``fsdp_node_``/``fsdp_gpu_`` prefixes, counters ending in ``_total``."""

from __future__ import annotations

import re

from observe import catalog as c

UNITS = ("_seconds", "_bytes", "_celsius", "_watts", "_hertz", "_ratio", "_total", "_info", "_bytes_per_second")


def test_agent_metric_names_follow_the_conventions() -> None:
    names = [m.name for m in c.AGENT_METRICS]
    assert len(names) == len(set(names))
    for m in c.AGENT_METRICS:
        assert re.fullmatch(r"fsdp_(node|gpu)_[a-z0-9_]+", m.name), m.name
        assert (m.kind == "counter") == m.name.endswith("_total"), m.name
        assert m.help.endswith(".") or m.help.endswith(")"), m.name
        assert not re.search(r"_(percent|mib|mb|kb|celcius|milliwatts)\b", m.name), m.name


def test_no_label_named_job_and_all_label_names_valid() -> None:
    for m in c.AGENT_METRICS:
        for label in (*c.AGENT_GPU_LABELS, *m.labels):
            assert label != "job" and re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label), (m.name, label)


def test_gauges_with_units_say_so_in_the_name() -> None:
    unitless = {
        "fsdp_node_load1",
        "fsdp_node_load5",
        "fsdp_node_load15",
        "fsdp_node_processes",
        "fsdp_node_threads",
        "fsdp_node_gpus",
        "fsdp_gpu_lost",
        "fsdp_gpu_reading_stale",
        "fsdp_gpu_unreadable",
        "fsdp_gpu_mig_mode",
        "fsdp_gpu_clock_throttle_reason",
        "fsdp_node_agent_source_up",
        "fsdp_gpu_info",
        "fsdp_node_process_info",
    }
    for m in c.AGENT_METRICS:
        if m.name not in unitless:
            assert m.name.endswith(UNITS), m.name
