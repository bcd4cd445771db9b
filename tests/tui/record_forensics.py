"""Records tests/tui/recorded/forensics/: what two real gloo ranks serve on ``/metrics`` and
``/debug/state`` while healthy, while one straggles, while one hangs and while one holds the GIL.

Run from the repository root: ``python -m tests.tui.record_forensics [MODE ...]`` (modes: healthy,
straggle, hang, gil; default all; about a minute each on 2 cores). Each mode is a real run of
``spike_train.py`` (an unchanged user script: FSDP2 over 2 CPU ranks with gloo) under
``fsdp-observe run`` and torchrun, with the stall watchdog's floor at 5 s; ``SPIKE_MODE`` makes rank
1 sleep 0.3 s every step (straggle), sleep for good at step 7 (hang) or spin in a regular expression
holding the GIL at step 7 (gil). When the mode's moment comes, both ranks' pages are fetched over
HTTP and written as they came, with ``meta.json`` (when, and which pages did not answer).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from observe.ports import free_port, free_port_block
from tests.support.env import child_env

OUT = Path(__file__).resolve().parent / "recorded" / "forensics"
SCRIPT = OUT / "spike_train.py"
MODES = ("healthy", "straggle", "hang", "gil")
#: Seconds a rank's page may take before it counts as not answering (a rank holding the GIL).
PAGE_TIMEOUT = 3.0


def _get(url: str) -> str | None:
    try:
        answer = httpx.get(url, timeout=PAGE_TIMEOUT)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None


def _value(text: str | None, name: str) -> float | None:
    for line in (text or "").splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _state(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.startswith("fsdp_train_state{") and line.endswith(" 1.0"):
            return line.split('state="', 1)[1].split('"', 1)[0]
    return None


def _ready(mode: str, base: int) -> Callable[[], bool]:
    """When the mode's moment has come, from what the ranks' ``/metrics`` say."""

    def check() -> bool:
        pages = [_get(f"http://127.0.0.1:{base + r}/metrics") for r in (0, 1)]
        if mode in ("healthy", "straggle"):
            return all(
                (_value(p, "fsdp_train_step") or 0) >= 25 and _value(p, "fsdp_train_window_compute_seconds") is not None
                for p in pages
            )
        if mode == "hang":
            return all(_value(p, "fsdp_train_stalled") == 1 for p in pages)
        state = _get(f"http://127.0.0.1:{base}/debug/state")  # gil: rank 0 vouches for rank 1
        peer = (json.loads(state).get("peers") or {}).get("1", {}) if state else {}
        return pages[1] is None and _value(pages[0], "fsdp_train_stalled") == 1 and bool(peer.get("gil_stacks"))

    return check


def record(mode: str) -> None:
    """Run the spike in ``mode`` and write its ranks' pages into ``OUT / mode``."""
    base, master = free_port_block(2), free_port()
    env = child_env()
    env.update(FSDP_OBSERVE_STALL_SECONDS="5", FSDP_OBSERVE_PORT_BASE=str(base), STEPS="400")
    env["SPIKE_MODE"] = "" if mode == "healthy" else mode
    argv = ["fsdp-observe", "run", "--", "torchrun", "--nproc-per-node", "2", f"--master-port={master}", str(SCRIPT)]
    target = OUT / mode
    target.mkdir(parents=True, exist_ok=True)
    log = open(target / "run.log", "wb")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        check = _ready(mode, base)
        deadline = time.monotonic() + 240
        while not check():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{mode}: the run ended or took too long; see {target / 'run.log'}")
            time.sleep(0.5)
        recorded_at = time.time()
        missing = []
        for rank in (0, 1):
            for page, name in (("/metrics", f"rank{rank}.metrics.txt"), ("/debug/state", f"rank{rank}.state.json")):
                text = _get(f"http://127.0.0.1:{base + rank}{page}")
                if text is None:
                    missing.append(f"rank {rank} {page}")
                    (target / name).unlink(missing_ok=True)
                    continue
                if name.endswith(".json"):
                    text = json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
                (target / name).write_text(text)
        meta = {"mode": mode, "recorded_unix": recorded_at, "port_base": base, "not_answering": missing}
        (target / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        print(f"{mode}: recorded into {target} (not answering: {', '.join(missing) or 'none'})")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
        (target / "run.log").unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    for mode in argv or MODES:
        if mode not in MODES:
            print(f"error: mode {mode!r}: not one of {', '.join(MODES)}", file=sys.stderr)
            return 2
        record(mode)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
