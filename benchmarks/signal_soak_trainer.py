"""Soak: a two-rank CPU run signalled mid-training, many times; orphaned ranks, statuses and tracebacks counted.

The longer form of ``tests/e2e/test_stop_train.py``, and the before/after
count: ``--repo DIR`` runs the code of another checkout (e.g. the code before the fix, ``git
worktree add /tmp/base a6d5310``) with this checkout's driver. Each run starts either torchrun
(``--target torchrun``: ``python -m trainer.launcher`` where the checkout has it, else
``python -m torch.distributed.run``, as a pod's main process) or ``fsdp-observe train``
(``--target train``, as a container entrypoint, systemd or CI would), waits for step 3, sends
SIGTERM/SIGINT (one, or a burst of 2-3 a few ms apart), then records: the exit status (or
``hung``: no exit and no end of output within ``--hang-seconds``), the ``end`` record's status,
whether a traceback was printed, and how many rank processes were still running a second after
the command exited (then SIGKILLed). Every other run saves checkpoints.

Prints one line per run and a summary, writes JSON to ``--out``. Usage::

    python -m benchmarks.signal_soak_trainer --target train --runs 6
    python -m benchmarks.signal_soak_trainer --target torchrun --runs 6 --repo /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

from observe.supervise import running
from tests.support.stop_stress import rank_processes

REPO = Path(__file__).resolve().parents[1]

FAST = ["--seq-len", "64", "--batch-size", "2", "--lr", "3e-3", "--warmup-steps", "2", "--log-every", "1"]


def corpus(folder: Path) -> Path:
    """A ``docs.jsonl`` of standard-library paragraphs (as ``tests/e2e/conftest.py`` builds)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "docs.jsonl").open("w") as fh:
        for name in ("argparse.py", "json/decoder.py", "textwrap.py", "shlex.py"):
            for paragraph in (Path(sysconfig.get_paths()["stdlib"]) / name).read_text().split("\n\n"):
                if paragraph.strip():
                    fh.write(json.dumps({"text": paragraph}) + "\n")
    return folder


def one_run(ns: argparse.Namespace, work: Path, data: Path, checkpoints: bool, rng: random.Random) -> dict:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "PYTHONPATH": str(ns.repo),
    }
    log = work / "run.jsonl"
    args = [
        "--data",
        str(data),
        "--steps",
        "400",
        *FAST,
        "--metrics",
        "off",
        "--sigterm-grace",
        "8",
        "--log-json",
        str(log),
    ] + (["--checkpoint-dir", str(work / "ckpt"), "--checkpoint-every", "2"] if checkpoints else [])
    launcher = "trainer.launcher" if (ns.repo / "trainer" / "launcher.py").exists() else "torch.distributed.run"
    cmd = (
        [sys.executable, "-m", launcher, "--standalone", "--nproc-per-node=2", "-m", "trainer", *args]
        if ns.target == "torchrun"
        else [sys.executable, "-m", "observe.cli", "train", "--nproc-per-node", "2", *args]
    )
    proc = subprocess.Popen(
        cmd, cwd=ns.repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 180
    while not (log.exists() and '"step": 3,' in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(rng.uniform(0, 0.3))
    ranks = rank_processes(proc.pid)
    sent = [rng.choice((signal.SIGTERM, signal.SIGINT)) for _ in range(1 if rng.random() < 0.5 else rng.randint(2, 3))]
    signalled = time.monotonic()
    for signum in sent:
        proc.send_signal(signum)
        time.sleep(rng.uniform(0, 0.02))
    try:
        output, status = proc.communicate(timeout=ns.hang_seconds)[0], proc.returncode
    except subprocess.TimeoutExpired:  # the command, or what it left holding its output, is still there
        output, status = "", "hung"
    took = time.monotonic() - signalled
    time.sleep(1.0)
    left = [rank for rank, (pid, started) in ranks.items() if running(pid, started)]
    for leader in [pid for pid, _ in ranks.values()] + [proc.pid]:  # each rank leads its own session
        try:
            os.killpg(leader, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()
    lines = log.read_text().splitlines() if log.exists() else []
    ends = [json.loads(line) for line in lines if '"event": "end"' in line]
    return {
        "sent": "+".join(signal.Signals(s).name for s in sent),
        "status": status,
        "seconds": round(took, 2),
        "end_status": ends[-1]["exit_status"] if ends else None,
        "traceback": "Traceback" in output,
        "ranks_left": len(left),
        "checkpoints": checkpoints,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=("torchrun", "train"), default="train")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--hang-seconds", type=float, default=30.0)
    ap.add_argument("--repo", type=Path, default=REPO)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "signal_soak_trainer.json"
    )
    ns = ap.parse_args()
    rng = random.Random(ns.seed)
    scratch = Path(tempfile.mkdtemp(prefix="signal-soak-trainer-"))
    data = corpus(scratch / "corpus")
    load = os.getloadavg()[0]
    runs = []
    for i in range(ns.runs):
        work = scratch / f"run{i}"
        work.mkdir()
        runs.append(one_run(ns, work, data, i % 2 == 0, rng))
        print(runs[-1], flush=True)
    expected = {"SIGTERM": 143, "SIGINT": 130}
    summary = Counter()
    for r in runs:
        summary["orphaned ranks"] += r["ranks_left"] > 0
        summary["hung"] += r["status"] == "hung"
        summary["traceback"] += r["traceback"]
        summary["status not 128+signal"] += r["status"] not in [expected[s] for s in r["sent"].split("+")]
        summary["end record disagrees"] += r["end_status"] is not None and r["end_status"] != r["status"]
    print(
        f"{ns.target} of {ns.repo}, {len(runs)} runs, seed {ns.seed}, load average {load:.2f} -> "
        f"{os.getloadavg()[0]:.2f}: "
        + ", ".join(
            f"{k} {summary[k]}"
            for k in ("orphaned ranks", "hung", "traceback", "status not 128+signal", "end record disagrees")
        )
    )
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(
        json.dumps(
            {"target": ns.target, "repo": str(ns.repo), "seed": ns.seed, "runs": runs, "summary": dict(summary)},
            indent=1,
        )
    )
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
