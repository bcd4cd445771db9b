"""Lightning's log windows close on fsdp-observe's cadence (``FSDP_OBSERVE_LOG_EVERY``), not on
Lightning's ``log_every_n_steps`` (default 50): an unchanged Lightning script (``scripts/lightning_loop.py``)
run as a real process under the variable, its endpoint polled while it trains."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import httpx
import pytest

from observe import catalog as c
from tests.support.instrumented import instrument_env, scrape, start

SCRIPT = Path(__file__).parent / "scripts" / "lightning_loop.py"
pytest.importorskip("lightning")


def test_windows_close_every_log_every_steps_whatever_lightnings_interval(tmp_path, subprocess_env, port_block) -> None:
    base = port_block(1)
    env = instrument_env({**subprocess_env, "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}, base, log_every=4)
    record = tmp_path / "record.json"
    run = start([sys.executable, str(SCRIPT), "--steps", "12", "--record", str(record)], env, tmp_path / "out.log")
    seen: dict[int, set[float]] = {}  # step -> the losses shown while it was the last step
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                s = scrape(base)
            except httpx.HTTPError:
                assert run.proc.poll() is None, run.output()[-3000:]
                time.sleep(0.05)
                continue
            step, loss = s.value(c.TRAIN_STEP.name), s.value(c.TRAIN_LOSS.name)
            if step is not None and loss is not None:
                seen.setdefault(int(step), set()).add(loss)
            if s.phase == "finished":
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no finish in 300 s:\n{run.output()[-3000:]}")
    finally:
        run.stop()
    losses = json.loads(record.read_text())["step_loss"]
    assert len(losses) == 12
    # Windows end at steps 1, 4, 8 and 12 (Lightning's own interval, 50, would give none): while the
    # last step is s, the window ending at s // 4 * 4 shows. On a window's last step a scrape can
    # also come after the step is counted and before its window closes (the log step reads the
    # device, and with a global loss all-reduces, in between): then the window before it shows.
    means = {1: statistics.fmean(losses[0:1]), 4: statistics.fmean(losses[1:4]), 8: statistics.fmean(losses[4:8])}
    live = {s: shown for s, shown in seen.items() if 4 <= s < 12}
    assert live, f"no scrape between steps 4 and 11: {seen}"
    for s, shown in live.items():
        end = s // 4 * 4
        allowed = [means[end]] + ([means[1 if end == 4 else end - 4]] if s == end else [])
        for loss in shown:
            assert any(loss == pytest.approx(m, rel=1e-5) for m in allowed), (s, loss, allowed, losses)
    assert "fsdp-observe" not in run.output()  # a valid setting: nothing to say
