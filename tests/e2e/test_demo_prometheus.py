"""``fsdp-observe demo --prometheus``: a real Prometheus with the generated rules scrapes the demo."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from observe import catalog as c
from observe import prometheus_local
from observe.monitoring import rules
from tests.support.processes import wait_for
from tests.support.stop_stress import kill_tree


def demo(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "observe.cli", "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.skipif(
    prometheus_local.binary() is None,
    reason="the prometheus binary is missing: apt-get install prometheus (CI installs it)",
)
def test_demo_starts_prometheus_with_the_rules_scraping_the_agent_and_ranks(
    port_block, subprocess_env, tmp_path: Path
) -> None:
    base = port_block(3)
    proc = demo(
        [
            "--steps",
            "60",
            "--log-every",
            "10",
            "--metrics-port",
            str(base),
            "--agent-port",
            "0",
            "--prometheus",
            "--prometheus-port",
            str(base + 2),
            "--out",
            str(tmp_path),
        ],
        subprocess_env,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    try:
        while not (found := re.search(r"prometheus: (http://\S+)", lines.get(timeout=90))):
            pass
        url = found.group(1)
        assert url == f"http://127.0.0.1:{base + 2}"

        def scraped() -> bool:
            targets = httpx.get(f"{url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
            steps = httpx.get(f"{url}/api/v1/query", params={"query": c.TRAIN_STEP.name}, timeout=5).json()
            return (
                sorted((t["labels"]["job"], t["health"]) for t in targets)
                == [("fsdp-observe-agent", "up"), ("fsdp-observe-trainer", "up"), ("fsdp-observe-trainer", "up")]
                and len(steps["data"]["result"]) == 2
            )

        wait_for(scraped, timeout=60, interval=0.5, what="Prometheus to scrape the agent and both ranks")
        groups = httpx.get(f"{url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert sorted(g["name"] for g in groups) == sorted(g["name"] for g in rules.rule_file()["groups"])
        assert all(r["health"] == "ok" for g in groups for r in g["rules"])
        # 60 tiny steps take 2-11 s each on a loaded 2-core machine
        assert proc.wait(timeout=900) == 0, proc.stderr.read()
    finally:
        kill_tree(proc)  # the demo and the agent, ranks and Prometheus it started in sessions of their own
    with pytest.raises(httpx.ConnectError):  # it stops with the demo
        httpx.get(f"{url}/-/ready", timeout=2)
    assert (tmp_path / "prometheus" / "fsdp-observe.rules.yaml").is_file()


def test_demo_prometheus_bad_input_is_one_line(subprocess_env, taken_port: int, tmp_path: Path) -> None:
    bin_only = {**subprocess_env, "PATH": str(Path(sys.executable).parent)}  # no prometheus on PATH
    cases = [
        (
            ["--prometheus"],
            bin_only,
            "error: --prometheus: no prometheus binary on PATH; install it "
            "(apt-get install prometheus) or leave out --prometheus",
        ),
        (
            ["--prometheus-port", "9999"],
            subprocess_env,
            "error: --prometheus-port: only applies with --prometheus; add --prometheus",
        ),
    ]
    if prometheus_local.binary() is not None:
        cases.append(
            (
                ["--prometheus", "--prometheus-port", str(taken_port), "--agent-port", "0"],
                subprocess_env,
                "error: --prometheus: Prometheus did not start: listen tcp ",
            )
        )
    for args, env, message in cases:
        proc = demo([*args, "--out", str(tmp_path)], env)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, out, err)
        assert len(err.splitlines()) == 1 and err.startswith(message), err
        assert "Traceback" not in err
    assert not any(p.name.endswith(".jsonl") for p in tmp_path.iterdir())  # no run was started
