"""Soak: the node agent signalled at random moments, many times; how many runs hang, and how fast the rest exit.

The longer form of ``tests/e2e/test_stop_agent.py``. Each iteration starts the real
agent (stand-in NVML from tests/support/fake_nvml.c, a kernel log being appended to), waits
until its SIGTERM handler is in place, then sends SIGTERM/SIGINT at a random moment, alone or
in a burst; ``--rapid`` bursts are up to 12 signals at most 1 ms apart, the pattern most likely
to re-enter a handler that takes a lock. A run that has not exited ``--hang-seconds`` after its
first signal is counted as hung and SIGKILLed. ``--repo DIR`` runs the agent of another
checkout (e.g. the code before the fix, ``git worktree add /tmp/base a6d5310``) with this
checkout's stress driver, so the two counts come from the same loop.

Prints a table per scenario (runs, verdicts: ok / late / hung / status N, slowest exit) with the
load average, and writes JSON to ``--out``. Usage::

    python -m benchmarks.signal_soak                                   # 1,000 runs, all scenarios
    python -m benchmarks.signal_soak --iterations 20 --at-once 2       # smoke test
    python -m benchmarks.signal_soak --repo /tmp/base --scenarios collecting serving --rapid
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.fake_nvml import FakeNvml
from tests.support.native import build_fake_nvml
from tests.support.stop_stress import (
    AGENT_SCENARIOS,
    KernelLogWriter,
    Outcome,
    Shot,
    Tally,
    random_shot,
    run_agent_once,
)

REPO = Path(__file__).resolve().parents[1]
GRACE_SECONDS = 5.0  # observe.cli.agent.STOP_GRACE_SECONDS (a literal, so --repo can point at older code)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=1800, help="stop starting runs after this long")
    ap.add_argument("--at-once", type=int, default=2, help="agents running at the same time")
    ap.add_argument("--scenarios", nargs="+", choices=sorted(AGENT_SCENARIOS), default=sorted(AGENT_SCENARIOS))
    ap.add_argument("--rapid", action="store_true", help="bursts of up to 12 signals at most 1 ms apart")
    ap.add_argument(
        "--hang-seconds",
        type=float,
        default=30.0,
        help="a run not gone this long after its first signal counts as hung",
    )
    ap.add_argument("--repo", type=Path, default=REPO, help="the checkout whose agent runs (default: this one)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "fsdp-observe-bench" / "signal_soak.json")
    ns = ap.parse_args()

    seed = ns.seed if ns.seed is not None else time.time_ns() % 2**32
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="signal-soak-"))
    lib = build_fake_nvml(work / "nvml")
    envs = {}
    for name in ns.scenarios:
        fake = FakeNvml(lib, work / f"{name}.conf")
        fake.set(AGENT_SCENARIOS[name][0])
        env = fake.env()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ns.repo), env.get("PYTHONPATH")]))
        envs[name] = env
    burst, gap = (12, 0.001) if ns.rapid else (4, 0.03)
    kinds = (signal.SIGTERM, signal.SIGTERM, signal.SIGINT)
    names = [ns.scenarios[i % len(ns.scenarios)] for i in range(ns.iterations)]
    shots = [random_shot(rng, name, AGENT_SCENARIOS[name][1], kinds, max_burst=burst, max_gap=gap) for name in names]
    tally = Tally(grace=GRACE_SECONDS)
    load_before = os.getloadavg()
    started = time.monotonic()

    def run(shot: Shot) -> Outcome | None:
        if time.monotonic() - started > ns.seconds:
            return None
        return run_agent_once(shot, envs[shot.scenario], log, ns.hang_seconds, repo=ns.repo)

    log = work / "kern.log"
    with KernelLogWriter(log), ThreadPoolExecutor(ns.at_once) as pool:
        for outcome in pool.map(run, shots):
            if outcome is not None:
                tally.add(outcome)
    wall = time.monotonic() - started
    load_after = os.getloadavg()
    print(
        f"signal soak: agent of {ns.repo}, seed {seed}, {'rapid ' if ns.rapid else ''}bursts, "
        f"grace {GRACE_SECONDS:g} s, hung after {ns.hang_seconds:g} s, {ns.at_once} at once, {wall:.0f} s, "
        f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(tally.table())
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(
        json.dumps(
            {
                "repo": str(ns.repo),
                "seed": seed,
                "rapid": ns.rapid,
                "grace_seconds": GRACE_SECONDS,
                "hang_seconds": ns.hang_seconds,
                "at_once": ns.at_once,
                "wall_seconds": wall,
                "load_average": [load_before[0], load_after[0]],
                "machine": platform.platform(),
                "runs": [
                    {
                        "scenario": o.shot.scenario,
                        "signals": [int(s) for s in o.shot.signals],
                        "delay": o.shot.delay,
                        "verdict": tally.verdict(o),
                        "status": o.status,
                        "seconds": o.seconds,
                    }
                    for o in tally.outcomes
                ],
            },
            indent=1,
        )
    )
    print(f"wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
