"""``fsdp-observe demo`` as CI and newcomers run it: no terminal attached, to the end."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_runs_headless_and_prints_a_summary(port_block, subprocess_env) -> None:
    base = port_block(2)
    proc = subprocess.run([sys.executable, "-m", "observe.cli", "demo", "--steps", "25", "--log-every", "5",
                           "--metrics-port", str(base)],
                          capture_output=True, text=True, env=subprocess_env, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"rank 1 metrics: http://127.0.0.1:{base + 1}/metrics" in out
    assert "finished" in out
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in out.splitlines()
                if re.match(r"^(steps|exit status|loss, \w+ window)\s{2,}", line))
    assert rows["steps"] == "25"
    assert rows["exit status"] == "0"
    first = float(rows["loss, first window"].split()[0])
    last = float(rows["loss, last window"].split()[0])
    assert last < first
    assert "scrapes ok" in out
    # the local node agent: its URL up front, what it saw in the summary
    assert re.search(r"node agent: http://127\.0\.0\.1:\d+/metrics", out)
    for label in ("node agent", "agent: CPU", "agent: memory", "agent: GPUs", "agent: XID errors"):
        assert re.search(rf"^{label}\s{{2,}}\S", out, re.M), label
