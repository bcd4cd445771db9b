"""Helpers for end-to-end trainer tests: start torchrun, read the JSON log, find and signal ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.stop_stress import run_to_end
from trainer.runspec.launch import installed_script

#: Small, fast settings shared by the multi-process trainer tests (tiny preset, 2 x 64 tokens).
FAST = ["--seq-len", "64", "--batch-size", "2", "--lr", "3e-3", "--warmup-steps", "2", "--log-every", "1"]


def torchrun_cmd(
    trainer_args: list[str], nproc: int = 2, rdzv: list[str] | None = None, max_restarts: int = 0
) -> list[str]:
    """``python -m torch.distributed.run ... --no-python fsdp-observe-trainer ARGS`` (standalone c10d unless ``rdzv``)."""
    launch = rdzv if rdzv is not None else ["--standalone"]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *launch,
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "--no-python",
        installed_script(),
        *trainer_args,
    ]


def run_trainer(
    trainer_args: list[str], env: dict[str, str], nproc: int = 2, timeout: float = 240, **kw
) -> subprocess.CompletedProcess:
    """Run a trainer under torchrun to the end; stdout and stderr captured together. On the timeout its
    ranks are killed with it (``run_to_end``)."""
    return run_to_end(
        torchrun_cmd(trainer_args, nproc, **kw),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start ``cmd`` in its own session (so ``stop_group`` can end it and every rank it started)."""
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL the session ``start`` made (torchrun and its ranks), if anything of it is left."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def sigterm_at_step(
    cmd: list[str], env: dict[str, str], log: Path, step: int, seconds: float = 240, exit_seconds: float = 90
) -> tuple[int, str]:
    """Start ``cmd`` (``start``), SIGTERM its first process once ``log`` has a window at ``step`` or
    later, as the kubelet signals a container's first process; ``(exit status, output)``.

    Raises:
        AssertionError: the run ended, or reached no such window within ``seconds``.
    """
    import signal

    proc = start(cmd, env)
    try:
        deadline = time.monotonic() + seconds
        while not [w for w in events(read_log(log), "window") if w["step"] >= step]:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, f"training did not reach step {step}"
            time.sleep(0.1)
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=exit_seconds)
    finally:
        if proc.poll() is None:
            stop_group(proc)
    return proc.returncode, out


def read_log(path: Path) -> list[dict]:
    """The complete records of a ``--log-json`` file (a line still being written is left out)."""
    if not path.exists():
        return []
    text = path.read_text()
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]


def events(records: list[dict], kind: str) -> list[dict]:
    """The records whose ``event`` is ``kind``."""
    return [r for r in records if r["event"] == kind]


def losses(records: list[dict]) -> dict[int, list[float]]:
    """Step → every loss logged for it (a step redone after a restart appears twice)."""
    out: dict[int, list[float]] = {}
    for r in events(records, "window"):
        out.setdefault(r["step"], []).append(r["loss"])
    return out


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def rank_pids(torchrun_pid: int) -> dict[int, int]:
    """Global rank → pid of the trainer processes that torchrun started (read from /proc)."""
    ranks = {}
    for pid in _children(torchrun_pid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                ranks[int(item[5:])] = pid
    return ranks


def final_weights(checkpoint: Path, tmp: Path) -> dict:
    """The model weights of a DCP checkpoint as full tensors (``dcp_to_torch_save``), by name."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    out = tmp / f"{checkpoint.name}-{os.getpid()}-{time.monotonic_ns()}.pt"
    dcp_to_torch_save(str(checkpoint), str(out))
    return torch.load(out, weights_only=False)["model"]


class LastScrape:
    """Scrapes a ``/metrics`` URL every ``interval`` seconds on a thread; keeps the last good parse.

    ``samples`` maps a sample name to ``[(labels, value), ...]``.
    """

    def __init__(self, url: str, interval: float = 0.2) -> None:
        import threading

        self.url, self.interval = url, interval
        self.samples: dict[str, list[tuple[dict, float]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> LastScrape:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        import httpx
        from prometheus_client.parser import text_string_to_metric_families

        with httpx.Client(timeout=1.0) as client:
            while not self._stop.wait(self.interval):
                try:
                    families = text_string_to_metric_families(client.get(self.url).text)
                    parsed: dict[str, list] = {}
                    for family in families:
                        for s in family.samples:
                            parsed.setdefault(s.name, []).append((s.labels, s.value))
                except Exception:  # noqa: BLE001 - the rank is starting, restarting or gone
                    continue
                self.samples = parsed

    def value(self, name: str, **labels) -> float | None:
        """The value of the sample ``name`` whose labels include ``labels`` (``None`` if absent)."""
        for have, value in self.samples.get(name, []):
            if all(have.get(k) == v for k, v in labels.items()):
                return value
        return None
