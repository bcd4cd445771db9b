"""The rank's entry point: the ``fsdp-observe-trainer`` console script, started by torchrun with
``--no-python``, so a ``trainer.py`` in the working directory cannot shadow the trainer."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from trainer.runspec.launch import installed_script

SHADOW = "raise SystemExit('the trainer.py of the working directory ran')\n"


def test_a_trainer_py_in_the_working_directory_does_not_shadow_the_trainer(
    tmp_path: Path, port_block, subprocess_env
) -> None:
    (tmp_path / "trainer.py").write_text(SHADOW)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("fsdp-observe trains on this line of text. " * 200)
    # The hazard is real: python -m trainer from this folder runs the user's file, not ours.
    shadowed = subprocess.run(
        [sys.executable, "-m", "trainer", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=60,
    )
    assert "the trainer.py of the working directory ran" in shadowed.stderr
    fsdp_observe = str(Path(sys.executable).parent / "fsdp-observe")  # the console script, as a user runs it
    proc = subprocess.run(
        [
            fsdp_observe,
            "train",
            "--nproc-per-node",
            "1",
            "--steps",
            "2",
            "--seq-len",
            "32",
            "--batch-size",
            "1",
            "--log-every",
            "1",
            "--data",
            str(corpus),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            str(port_block(1)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "working directory ran" not in proc.stdout + proc.stderr


def test_a_rank_with_a_taken_port_exits_2_in_one_line(port_block, subprocess_env) -> None:
    """The rank itself (its console script, no launcher) also refuses a taken port cleanly."""
    port = port_block(1)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        proc = subprocess.run(
            [installed_script(), "--steps", "1", "--metrics-address", "127.0.0.1", "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            env=subprocess_env,
            timeout=120,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"error: --metrics-port: port {port} on 127.0.0.1 is already in use" in proc.stderr
    assert "Traceback" not in proc.stderr
