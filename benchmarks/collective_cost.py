"""What collective tracking costs: per collective, per step, and in instructions of a whole run.

Three measurements, each side by side in one run (these machines are shared and noisy):

1. **Per collective** (wall clock, in process): a one-rank gloo group; blocks of ``--calls``
   synchronous ``all_reduce`` calls, and of async ``all_reduce`` + ``wait``, through torch's own
   functions and through fsdp-observe's wrappers (``observe.training.collectives``), alternated for
   ``--blocks`` pairs; the median of the per-pair differences, in microseconds per call.
2. **Per step** (wall clock, in process): ``RankForensics.step_ended`` (the compute/wait split and
   the step's figures), the median of ``--calls`` calls.
3. **Instructions** (``valgrind --tool=callgrind``, which counts instructions, not seconds, so load
   does not move it): a one-rank FSDP2 run of the e2e tests' user script (``faulty_fsdp2.py``,
   width 512) with zero-code instrumentation and collective tracking, against the same run with
   instrumentation on and tracking off (``FSDP_OBSERVE_COLLECTIVES=0``), and against no
   instrumentation; each at ``--short`` and ``--long`` steps, so start-up cancels out:
   instructions per step = (I(long) - I(short)) / (long - short). Counted per thread
   (``--separate-threads=yes``): the main thread is the training loop, where every collective's
   bookkeeping runs, and its ratio is the figure; all threads together add the watchdog's ticks
   and gloo's threads, which wake per wall second, and a run under callgrind is some 50x slower, so
   their share there is about 50x what it is at full speed: that ratio is an upper bound.

Run it at normal priority: under ``nice`` on a busy machine the wall-clock rows measure the
scheduler, not the wrapper.

    python -m benchmarks.collective_cost [--calls 2000] [--blocks 15] [--short 6] [--long 26]
        [--modes plain untracked tracked] [--no-callgrind] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "e2e" / "scripts" / "faulty_fsdp2.py"
#: The runs compared under callgrind: no instrumentation, instrumentation with tracking off, and on.
MODES = ("plain", "untracked", "tracked")


def per_collective(calls: int, blocks: int) -> dict[str, float]:
    """Median added microseconds per collective (sync, async + wait) of the wrappers."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from observe.training import collectives

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    plain_reduce = c10d.all_reduce
    plain_wait = torch._C._distributed_c10d.Work.wait
    collectives.install(torch)
    tracked_reduce, tracked_wait = dist.all_reduce, torch._C._distributed_c10d.Work.wait
    x = torch.ones(16)

    def block(reduce, wait, async_op: bool) -> float:  # noqa: ANN001 - functions under test
        torch._C._distributed_c10d.Work.wait = wait
        started = time.perf_counter()
        for _ in range(calls):
            if async_op:
                reduce(x, async_op=True).wait()
            else:
                reduce(x)
        seconds = time.perf_counter() - started
        torch._C._distributed_c10d.Work.wait = tracked_wait
        return seconds / calls

    out = {}
    for async_op in (False, True):
        diffs = []
        for i in range(blocks):
            pair = [(plain_reduce, plain_wait), (tracked_reduce, tracked_wait)]
            if i % 2:
                pair.reverse()
            times = {id(r): block(r, w, async_op) for r, w in pair}
            diffs.append(times[id(tracked_reduce)] - times[id(plain_reduce)])
        out["async_wait" if async_op else "sync"] = statistics.median(diffs) * 1e6
        out[("async_wait" if async_op else "sync") + "_plain_us"] = block(plain_reduce, plain_wait, async_op) * 1e6
    return out


def per_step(calls: int) -> float:
    """Median microseconds of ``RankForensics.step_ended``."""
    from observe.training.collectives import CollectiveTracker
    from observe.training.forensics import RankForensics

    f = RankForensics(CollectiveTracker(), {"rank": 0}, lambda: "training", lambda: 1)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        f.step_ended(1, 0.0, 0.4, 0.01)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def instructions(mode: str, steps: int, folder: Path) -> tuple[int, int]:
    """Instructions of a one-rank run of ``steps`` steps under callgrind: the main thread's (the
    training loop's, where a collective's bookkeeping runs) and all threads' (with the watchdog's
    ticks and gloo's threads, which callgrind's slowdown multiplies)."""
    from observe.ports import free_port

    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "OMP_NUM_THREADS": "1",
        "FSDP_OBSERVE_PORT_BASE": str(free_port()),
        "FSDP_OBSERVE_ADDRESS": "127.0.0.1",
        "FSDP_OBSERVE_LINGER_SECONDS": "0",
        "FSDP_OBSERVE_DUMP_DIR": str(folder / "dumps"),
    }
    env.pop("FSDP_OBSERVE_INSTRUMENT", None)
    env.pop("FSDP_OBSERVE_COLLECTIVES", None)
    if mode != "plain":
        env["FSDP_OBSERVE_INSTRUMENT"] = "1"
    if mode == "untracked":
        env["FSDP_OBSERVE_COLLECTIVES"] = "0"
    out = folder / f"callgrind.{mode}.{steps}"
    cmd = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no", "--separate-threads=yes",
        sys.executable, str(SCRIPT), "--steps", str(steps), "--width", "512",
    ]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"callgrind run ({mode}, {steps} steps) failed:\n{done.stderr[-2000:]}")
    per_thread = {}
    for part in folder.glob(f"{out.name}-*"):  # one file per thread: <out>-01 is the main thread
        text = part.read_text()
        summary = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^totals: (\d+)", text, re.M)
        if summary is None:
            raise SystemExit(f"no instruction count in {part}")
        per_thread[int(part.name.rsplit("-", 1)[1])] = int(summary.group(1))
    if 1 not in per_thread:
        raise SystemExit(f"no main-thread file {out}-01")
    return per_thread[1], sum(per_thread.values())


def per_step_instructions(short: int, long: int, folder: Path, modes: tuple[str, ...] = MODES) -> dict[str, dict]:
    """Instructions per step, ``{mode: {"main": ..., "all": ...}}`` (main thread, all threads), for
    ``plain``, ``untracked`` (instrumented, tracking off) and ``tracked``."""
    out = {}
    for mode in modes:
        counts = {steps: instructions(mode, steps, folder) for steps in (short, long)}
        out[mode] = {
            which: (counts[long][i] - counts[short][i]) / (long - short) for i, which in enumerate(("main", "all"))
        }
        print(f"callgrind {mode} (main thread, all threads): {counts}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--short", type=int, default=6)
    ap.add_argument("--long", type=int, default=26)
    ap.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts (minutes)")
    ap.add_argument(
        "--modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="the callgrind runs (untracked and tracked at least)",
    )
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "collective_cost.json"))
    ns = ap.parse_args(argv)
    from benchmarks.report_table import print_and_write

    load = os.getloadavg()
    coll = per_collective(ns.calls, ns.blocks)
    step_us = per_step(ns.calls)
    report: dict = {"load_average_before": load, "per_collective_us": coll, "per_step_us": step_us}
    rows = [
        (
            "wrapper: added per sync all_reduce",
            f"{coll['sync']:.2f} us (the call itself: {coll['sync_plain_us']:.1f} us)",
        ),
        (
            "wrapper: added per async all_reduce + wait",
            f"{coll['async_wait']:.2f} us (the call itself: {coll['async_wait_plain_us']:.1f} us)",
        ),
        ("step split (RankForensics.step_ended)", f"{step_us:.2f} us per step"),
    ]
    if not ns.no_callgrind:
        if shutil.which("valgrind") is None:
            print(
                "error: valgrind is not installed (apt-get install valgrind), or pass --no-callgrind", file=sys.stderr
            )
            return 2
        with tempfile.TemporaryDirectory() as tmp:
            counts = per_step_instructions(ns.short, ns.long, Path(tmp), tuple(ns.modes))
        report["instructions_per_step"] = counts
        for which in ("main", "all"):
            report[f"ratio_tracked_to_untracked_{which}"] = counts["tracked"][which] / counts["untracked"][which]
        rows += [
            (
                f"instructions per step, {which}: " + " / ".join(counts),
                " / ".join(f"{counts[m][which]:,.0f}" for m in counts),
            )
            for which in ("main", "all")
        ]
        rows += [
            ("tracking on / off, main thread (the training loop)",
             f"{report['ratio_tracked_to_untracked_main']:.4f} (target <= 1.01)"),
            ("tracking on / off, all threads (watchdog ticks x callgrind's slowdown)",
             f"{report['ratio_tracked_to_untracked_all']:.4f} (an upper bound)"),
        ]  # fmt: skip
    report["load_average_after"] = os.getloadavg()
    rows.append(("load average before / after", f"{load[0]:.2f} / {report['load_average_after'][0]:.2f}"))
    print_and_write(rows, report, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
