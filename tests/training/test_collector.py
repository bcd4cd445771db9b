"""The trainer's exporter: exposition text, absent-not-zero, errors counted, taken port."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from observe import catalog as c
from observe.errors import UserError
from observe.training.collector import DeviceMemory, process_resident_memory_peak_bytes
from observe.training.server import serve
from observe.training.window import WindowStats
from tests.support.collector import INFO, make, scrape, value


def test_step_and_window_series_with_labels() -> None:
    m = make()
    for step in range(1, 4):
        m.on_step(step, step_seconds=0.2, data_wait_seconds=0.01, labelled_tokens=512, samples=2, learning_rate=1e-3)
    m.on_window(WindowStats(3, 0.6, 0.03, 1536), loss=2.5, grad_norm=1.25, global_tokens_per_second=5120.0, memory=None)
    s = scrape(m)
    assert value(s, c.TRAIN_STEPS.name) == 3
    assert value(s, c.TRAIN_LABELLED_TOKENS.name) == 1536
    assert value(s, c.TRAIN_SAMPLES.name) == 6
    assert value(s, c.TRAIN_STEP.name) == 3
    assert value(s, c.TRAIN_LOSS.name) == 2.5
    assert value(s, c.TRAIN_GRAD_NORM.name) == 1.25
    assert value(s, c.TRAIN_TOKENS_PER_SECOND.name) == pytest.approx(2560)
    assert value(s, c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name) == 5120
    assert value(s, c.TRAIN_WINDOW_STEP_SECONDS.name) == pytest.approx(0.2)
    assert value(s, c.TRAIN_STEP_SECONDS.name + "_count") == 3
    assert value(s, c.TRAIN_STEP_SECONDS.name + "_bucket", le="0.15") == 0
    assert value(s, c.TRAIN_STEP_SECONDS.name + "_bucket", le="0.2") == 3  # le is inclusive
    assert value(s, c.TRAIN_STEP_SECONDS.name + "_bucket", le="600.0") == 3
    assert value(s, c.TRAIN_INFO.name, **INFO) == 1
    assert "job" not in {k for series in s.values() for key in series for k, _ in key}


def test_cpu_run_has_no_mfu_and_no_device_memory() -> None:
    m = make(peak=None)
    m.on_step(1, 0.1, 0.0, 10, 1, 1e-3)
    m.on_window(WindowStats(1, 0.1, 0.0, 10), 3.0, 1.0, 100.0, memory=None)
    s = scrape(m)
    for metric in (
        c.TRAIN_MFU,
        c.TRAIN_DEVICE_MEMORY_ALLOCATED,
        c.TRAIN_DEVICE_MEMORY_PEAK,
        c.TRAIN_DEVICE_ALLOC_RETRIES,
    ):
        assert metric.name not in s


def test_mfu_and_memory_on_a_known_gpu() -> None:
    m = make(peak=1e10)
    m.on_window(
        WindowStats(1, 1.0, 0.0, 2_000),
        3.0,
        1.0,
        4_000.0,
        memory=DeviceMemory(allocated=100, reserved=200, peak_allocated=150, alloc_retries=2),
    )
    s = scrape(m)
    assert value(s, c.TRAIN_MFU.name) == pytest.approx(1_000_000 * 2_000 / 1e10)
    assert value(s, c.TRAIN_DEVICE_MEMORY_RESERVED.name) == 200
    assert value(s, c.TRAIN_DEVICE_ALLOC_RETRIES.name) == 2


def test_only_rank_zero_exports_the_global_rate() -> None:
    m = make(export_global=False)
    m.on_window(WindowStats(1, 1.0, 0.0, 10), 3.0, 1.0, 20.0, None)
    assert c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name not in scrape(m)


def test_nothing_is_exported_before_it_is_known() -> None:
    s = scrape(make())
    for metric in (c.TRAIN_LOSS, c.TRAIN_TOKENS_PER_SECOND, c.TRAIN_LAST_STEP_TIMESTAMP, c.TRAIN_LEARNING_RATE):
        assert metric.name not in s


def test_exporter_failure_is_counted_not_raised(monkeypatch, caplog) -> None:
    m = make()
    monkeypatch.setattr(m, "_families", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    first, second = scrape(m), scrape(m)
    assert value(second, c.TRAIN_EXPORTER_ERRORS.name) == 2
    assert value(first, c.TRAIN_EXPORTER_ERRORS.name) == 1
    assert sum("metrics exporter failed" in r.message for r in caplog.records) == 1


def test_served_over_http_and_a_taken_port_is_a_config_error(port_block) -> None:
    port = port_block(1)
    m = make()
    m.on_step(1, 0.1, 0.0, 10, 1, 1e-3)
    serve(m, "127.0.0.1", port)
    body = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    assert 'fsdp_train_steps_total{local_rank="0",node="n1",rank="0",run_id="r1"} 1.0' in body
    assert "process_resident_memory_bytes" in body
    with pytest.raises(UserError, match=f"--metrics-port: port {port} on 127.0.0.1 is already in use"):
        serve(make(), "127.0.0.1", port)


def test_every_trainer_metric_follows_the_naming_rules() -> None:
    assert c.TRAIN_INFO.labels == (*INFO, "instrumentation", "loss_source", "grad_norm_source", "tokens_source")
    for metric in c.TRAINER_METRICS:
        assert metric.name.startswith("fsdp_train_")
        assert (metric.kind == "counter") == metric.name.endswith("_total")
        assert not any(unit in metric.name for unit in ("_ms", "_mb", "_percent", "(%)"))


def test_peak_resident_memory_is_the_kernels_high_water_mark(tmp_path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t 9999 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n")
    assert process_resident_memory_peak_bytes(str(status)) == 2048 * 1024
    status.write_text("Name:\tpython\n")  # a kernel that does not report it: absent, never 0
    assert process_resident_memory_peak_bytes(str(status)) is None
    assert process_resident_memory_peak_bytes(str(tmp_path / "missing")) is None


def test_peak_resident_memory_is_exported_and_not_below_current_rss() -> None:
    # Linux /proc, as on every machine the trainer targets (and CI).
    current = next(
        int(line.split()[1]) * 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    peak = value(scrape(make()), c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK.name)
    assert peak >= current > 0
