"""``fsdp-observe demo`` on a terminal opens ``fsdp-observe top`` over its run; ``q`` closes it and
stops the run cleanly. A real pseudo-terminal (``os.openpty``) stands in for the user's."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from tests.support.stop_stress import kill_tree
from tests.support.terminal import read_until, wait_exit


def test_the_demo_opens_the_tui_on_a_terminal_and_q_stops_the_run(port_block, subprocess_env) -> None:
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
        ],
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        start_new_session=True,
    )
    os.close(child)
    try:
        read_until(main, r"Cluster .*1 agent, 2 trainer endpoints", 60)
        read_until(main, r"\bok\b", 60)  # the node's row
        os.write(main, b"q")
        text = read_until(main, r"exit status\s+\d+", 90)
        assert (
            wait_exit(main, proc, 60)[0] == 130
        )  # as Ctrl-C: the same status in the summary, the JSON log and the shell
        assert "the terminal UI was closed; stopping the run" in text and "stopped (the terminal UI was closed)" in text
        assert re.search(r"exit status\s+130", text)
    finally:
        kill_tree(proc)  # the demo and the agent and ranks it started in sessions of their own
        os.close(main)


def _terminal(env: dict[str, str]) -> tuple[int, int, dict[str, str]]:
    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    return main, child, {**env, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}


def test_a_port_taken_after_the_check_is_shown_as_the_failure_it_is(port_block, subprocess_env, tmp_path) -> None:
    """Another process binds the ranks' first port after the demo's check, while torch loads.

    Before: the TUI showed that process's run as the demo's, then 'unreachable' forever, and the
    summary named a JSON log that did not exist. Now: the foreign run is an error line only, the
    TUI says the training exited and why, and the summary points at train.log.
    """
    from tests.support.fleet import RecordedFleet, trainer_exposition

    base = port_block(2)
    main, child, env = _terminal(subprocess_env)
    out = tmp_path / "demo"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "observe.cli",
            "demo",
            "--steps",
            "200",
            "--metrics-port",
            str(base),
            "--agent-port",
            "0",
            "--out",
            str(out),
        ],
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        start_new_session=True,
    )
    os.close(child)
    fleet = RecordedFleet()
    try:
        read_until(main, r"training output: ", 60)  # printed after the port check, before torchrun starts
        fleet.trainer_on(base, trainer_exposition(0, "vm", None, 0.5, 0.02, run_id="someone-else"))
        shown = read_until(main, r"training exited with status \d+", 120)
        read_until(main, r"answers for run 'someone-else'", 30)
        os.write(main, b"2")  # the Run screen
        # Rank 1 may have served the demo's run for a moment before the group failed (then it is a
        # row, unreachable); either way the Run screen says the training exited.
        shown += read_until(main, r"no training run seen: the training process exited|training exited with status", 30)
        assert not re.search(r"\brun someone-else\b", shown)  # never shown as the demo's run
        os.write(main, b"q")
        summary = read_until(main, r"JSON log\s+\S+", 60)
        status = wait_exit(main, proc, 60)[0]
        assert status not in (0, 130, 143)
        assert re.search(r"demo-\S+ FAILED", summary)
        assert re.search(rf"why\s+error: --metrics-port: port {base} on 127\.0\.0\.1 is already in use", summary)
        assert re.search(r"training output\s+\S+train\.log", summary) and (out / "train.log").is_file()
        named = re.search(r"JSON log\s+(.+?)\s*$", summary, re.M)
        assert named and (
            named.group(1).startswith("none (training ended before its first step)") or Path(named.group(1)).is_file()
        )  # rank 0 logs its start before it binds the port
        assert re.search(
            r"rank 0 /metrics\s+0 ok, \d+ failed \(last: another run \(someone-else\) on this port\)", summary
        )
    finally:
        kill_tree(proc)  # the demo and the agent and ranks it started in sessions of their own
        fleet.close()
        os.close(main)


def test_a_finished_run_is_shown_finished_with_its_final_figures(subprocess_env) -> None:
    """The ranks stopped serving the moment the last step ended, so the TUI froze at 199/200 with
    the step-180 loss and 'unreachable'. Now they serve until the TUI scraped the end once more."""
    main, child, env = _terminal(subprocess_env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "observe.cli", "demo", "--steps", "30", "--log-every", "10", "--agent-port", "0"],
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        start_new_session=True,
    )
    os.close(child)
    try:
        read_until(main, r"Cluster .*1 agent, 2 trainer endpoints", 60)
        os.write(main, b"2")  # the Run screen
        shown = read_until(main, r"Step\s+30 / 30 .*ETA done", 240)
        read_until(main, r"finished", 30)
        os.write(main, b"q")
        summary = read_until(main, r"JSON log\s+\S+", 60)
        assert wait_exit(main, proc, 60)[0] == 0
        last_loss = re.search(r"loss, last window\s+(\d+\.\d+) \(to step 30\)", summary)
        assert last_loss and last_loss.group(1) in shown  # the TUI showed the final window's loss
        assert "unreachable" not in shown.rsplit("30 / 30", 1)[-1]
    finally:
        kill_tree(proc)  # the demo and the agent and ranks it started in sessions of their own
        os.close(main)
