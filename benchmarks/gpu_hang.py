"""The hang-and-straggler check of ``benchmarks/gpu_check.py`` on a lent GPU (NCCL).

**Not yet run on a GPU.** What it does: the user script of the e2e tests
(``tests/e2e/scripts/faulty_fsdp2.py --backend nccl``) as two ranks on the one GPU under
``fsdp-observe run``; rank 1 stops before its forward at step 5 (``hang``), then a second run where
rank 1 sleeps 0.3 s per step (``straggle``). For each: ``fsdp-observe diagnose --json`` asked every
second until it names rank 1 (or 120 s pass), the verdict, and the seconds from the fault to it.
What it shows that gloo cannot: whether Flight Recorder's NCCL counts (``last_enqueued`` above
``last_completed`` on the waiting rank) name the culprit when ``Work.wait`` does not block the host,
and whether the host-side compute split still names a straggler whose slowness is on the host.

NCCL refuses two ranks on one device ("Duplicate GPU detected") in most versions: the check then
says so in one line (``refused``) and records NCCL's message; it never falls back silently.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "e2e" / "scripts" / "faulty_fsdp2.py"
#: NCCL's words when two ranks share a GPU.
DUPLICATE = re.compile(r"Duplicate GPU detected|same CUDA device|ncclInvalidUsage")


def _diagnose(ports: list[int]) -> dict | None:
    done = subprocess.run(
        [sys.executable, "-m", "observe.cli", "diagnose", "--trainer", *(f"127.0.0.1:{p}" for p in ports), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        return json.loads(done.stdout)
    except ValueError:
        return None


def one(fault: str, env: dict[str, str], workdir: Path, port_base: int, seconds: float = 120) -> dict:
    """Run ``fault`` (``hang`` or ``straggle``) with two NCCL ranks on the GPU; what diagnose said."""
    from observe.ports import free_port

    log = workdir / f"nccl-{fault}.log"
    environ = {
        **env,
        "FSDP_OBSERVE_PORT_BASE": str(port_base),
        "FSDP_OBSERVE_ADDRESS": "127.0.0.1",
        "FSDP_OBSERVE_LINGER_SECONDS": "0",
        "FSDP_OBSERVE_STALL_SECONDS": "10",
        "FSDP_OBSERVE_DUMP_DIR": str(workdir / f"dumps-{fault}"),
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_ENABLE_TIMING": "1",
    }
    cmd = [
        sys.executable, "-m", "observe.cli", "run", "--", sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={free_port()}", str(SCRIPT),
        "--backend", "nccl", "--fault", fault, "--culprit", "1", "--at", "5", "--steps", "400", "--width", "2048",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=environ, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    verdict, took = None, None
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            text = log.read_text(errors="replace")
            if DUPLICATE.search(text):
                return {"fault": fault, "refused": DUPLICATE.search(text).group(0)}  # type: ignore[union-attr]
            verdict = _diagnose([port_base, port_base + 1])
            if verdict and verdict.get("culprit_ranks") == [1]:
                started = re.search(rf"FAULT {fault} rank 1 step \d+ at ([0-9.]+)", text)
                took = time.time() - float(started.group(1)) if started else None
                break
            time.sleep(1.0)
    finally:
        if proc.poll() is None:
            import os
            import signal

            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    tail = log.read_text(errors="replace")[-1500:]
    return {
        "fault": fault,
        "verdict": verdict,
        "seconds_to_verdict": took,
        "named_rank_1": bool(verdict and verdict.get("culprit_ranks") == [1]),
        "log_tail": tail if not (verdict and verdict.get("culprit_ranks") == [1]) else "",
    }


def check_hang(env: dict[str, str], workdir: Path | None = None) -> dict:
    """Both faults; ``passed`` when each named rank 1 with the right verdict within 60 s."""
    from observe.ports import free_port_block

    workdir = workdir or Path(tempfile.mkdtemp(prefix="gpu-hang-"))
    results = [one(fault, env, workdir, free_port_block(2)) for fault in ("hang", "straggle")]
    refused = [r for r in results if "refused" in r]
    passed = not refused and all(
        r["named_rank_1"]
        and r["verdict"]["verdict"] == ("hang" if r["fault"] == "hang" else "straggler")
        and (r["fault"] != "hang" or (r["seconds_to_verdict"] or 1e9) < 60)
        for r in results
    )
    return {"passed": passed, "runs": results, "nccl_refused_two_ranks_on_one_gpu": bool(refused)}
