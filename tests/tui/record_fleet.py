"""Records tests/tui/recorded/*.json: real node-agent ``/snapshot`` answers under field scenarios.

Run from the repository root (needs gcc): ``python -m tests.tui.record_fleet``. Each node is a real
``python -m observe.cli agent`` process; its GPUs come from the fake ``libnvidia-ml.so.1`` (the test
suite's stand-in for a driver, scenarios from tests/cases/nvml-scenarios.md), its XIDs from the
field case's kernel log, and its processes from this machine plus sleepers started with the
exposition case's hostile command lines. What is kept of the process list: the sleepers, the GPU
processes and the agent itself (this machine's other processes are not the tests' business).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tests.support.cases import CASES
from tests.support.fake_nvml import FakeNvml
from tests.support.native import build_fake_nvml, build_sleeper
from tests.support.processes import AgentProcess, spawn_sleeper, wait_for

OUT = Path(__file__).resolve().parent / "recorded"
#: Command lines from tests/cases/exposition.md (and a secret the agent must redact).
HOSTILE = [
    ["python", "-c", 'print("}{")'],
    ["bash", "-c", "echo a\necho b"],
    ["printf", "foo\\"],
    ["\x1b[31mred\x1b[0m", "[bold red]not markup[/]"],
    [b"bad-\xff\xfe-utf8", "--hf_token", "hf_QmW3rT7yU1iO5pA9sD2fG6hJ0kL4zX8c"],
]
NODES = {
    # node: (fake NVML scenario, with a kernel log of the XID case?)
    "gpu-node-1": ("gpus 4\nbus@0 0x3b\nproc 0 {p0} 21474836480\nproc 1 {p1} 17179869184\n", True),
    "gpu-node-2": ("gpus 4\nlost@3 1\nmig@2 1\nfan ns\nproc 0 31999 8589934592\nproc 1 {p0} 4294967296\n", False),
    "cpu-node-3": ("init library_not_found\n", False),
}


def record() -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        lib = build_fake_nvml(tmp / "nvml")
        sleeper = build_sleeper(tmp / "bin")
        sleepers = [spawn_sleeper(sleeper, argv) for argv in HOSTILE]
        pids = {"p0": sleepers[0].pid, "p1": sleepers[3].pid}
        try:
            for node, (scenario, kernel_log) in NODES.items():
                fake = FakeNvml(lib, tmp / f"{node}.conf")
                fake.set(scenario.format(**pids))
                args = ["--node", node, "--interval", "0.5", "--max-processes", "400"]
                args += (
                    ["--kernel-log", str(CASES / "xid" / "kernel-log.txt")]
                    if kernel_log
                    else ["--kernel-log", str(tmp / "empty.log")]
                )
                (tmp / "empty.log").touch()
                agent = AgentProcess(args, fake.env(), tmp)
                try:
                    wait_for(lambda agent=agent: agent.snapshot()["agent"]["collections"] >= 3, what="3 collections")
                    data = agent.snapshot()
                finally:
                    agent.stop()
                keep = {s.pid for s in sleepers} | {p["pid"] for p in data["gpu_processes"]} | {agent.proc.pid}
                data["processes"] = [p for p in data["processes"] if p["pid"] in keep]
                (OUT / f"{node}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
                print(
                    f"recorded {node}: {len(data['gpus'])} GPUs, {len(data['processes'])} processes, "
                    f"{len(data['xid_events'])} XID events"
                )
        finally:
            for proc in sleepers:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    os.environ.setdefault("NODE_NAME", "recorder")
    record()
