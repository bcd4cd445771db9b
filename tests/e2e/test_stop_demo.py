"""``fsdp-observe demo`` stopped by a signal: Ctrl-C on the headless demo, SIGTERM
with the terminal UI open. Either way the run stops as one, the summary, the JSON ``end`` record
and the shell give the same status (130 SIGINT, 143 SIGTERM), the summary says "stopped", not
"FAILED", nothing says "saving" (the demo has no checkpoint directory), no traceback is
printed, and no rank, torchrun or agent process is left (checked in ``/proc``)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from observe.supervise import running, start_time
from tests.support.stop_stress import descendants, kill_tree, rank_processes
from tests.support.terminal import read_until, wait_exit

pytestmark = pytest.mark.serial("the stopped run must save and exit within its grace period")


def end_record(out: Path) -> dict:
    (log,) = out.glob("demo-*.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines() if '"event": "end"' in line][-1]


def wait_for_ranks(pid: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while len(ranks := rank_processes(pid)) < 2:
        assert time.monotonic() < deadline, "the ranks never started"
        time.sleep(0.1)
    return ranks


def wait_for_a_window(out: Path, timeout: float = 120) -> None:
    """Until rank 0 has logged a window: the ranks are training."""
    deadline = time.monotonic() + timeout
    while not any('"event": "window"' in log.read_text() for log in out.glob("demo-*.jsonl")):
        assert time.monotonic() < deadline, "no log window"
        time.sleep(0.1)


def assert_nothing_left(processes: list[tuple[int, int | None]]) -> None:
    assert not [pid for pid, started in processes if running(pid, started)]


def test_ctrl_c_on_the_headless_demo_stops_the_run_with_130_everywhere(port_block, subprocess_env, tmp_path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "observe.cli",
            "demo",
            "--no-tui",
            "--steps",
            "5000",
            "--log-every",
            "5",
            "--metrics-port",
            str(port_block(2)),
            "--out",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=subprocess_env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ranks = wait_for_ranks(proc.pid)
        wait_for_a_window(tmp_path)
        below = [(pid, start_time(pid)) for pid in descendants(proc.pid)]
        proc.send_signal(signal.SIGINT)  # what the terminal sends for Ctrl-C
        out = proc.communicate(timeout=60)[0]
    finally:
        kill_tree(proc)
    assert proc.returncode == 130, out[-3000:]
    assert "stopped by SIGINT (Ctrl-C)" in out and "FAILED" not in out
    assert re.search(r"^exit status\s+130$", out, re.M)
    assert end_record(tmp_path)["exit_status"] == 130 and end_record(tmp_path)["stopped_by"] == "SIGINT"
    assert "saving" not in out and "nothing is saved" in out and "Traceback" not in out
    assert_nothing_left(below + list(ranks.values()))


def test_sigterm_with_the_tui_open_closes_it_and_stops_the_run_with_143(port_block, subprocess_env, tmp_path) -> None:
    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
    env = {**subprocess_env, "TERM": "xterm-256color", "COLUMNS": "140", "LINES": "40"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "observe.cli",
            "demo",
            "--steps",
            "5000",
            "--log-every",
            "5",
            "--metrics-port",
            str(port_block(2)),
            "--out",
            str(tmp_path),
        ],
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        start_new_session=True,
    )
    os.close(child)
    try:
        read_until(main, r"\bok\b", 90)  # the TUI is up and the node's row is in
        ranks = wait_for_ranks(proc.pid)
        wait_for_a_window(tmp_path)  # training, not loading: the stop then names its step
        below = [(pid, start_time(pid)) for pid in descendants(proc.pid)]
        proc.send_signal(signal.SIGTERM)
        text = read_until(main, r"exit status\s+\d+", 60)
        assert wait_exit(main, proc, 30)[0] == 143
    finally:
        kill_tree(proc)
        os.close(main)
    assert "stopped by SIGTERM" in text and re.search(r"exit status\s+143", text)
    assert end_record(tmp_path)["exit_status"] == 143
    assert "Traceback" not in text and "saving" not in text
    assert (tmp_path / "train.log").read_text().count("SIGTERM: all ranks stop after step") == 1
    assert_nothing_left(below + list(ranks.values()))
