"""``fsdp-observe demo`` as CI and newcomers run it: no terminal attached, to the end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.stop_stress import run_to_end


def test_demo_runs_headless_and_prints_a_summary(subprocess_env) -> None:
    """No --metrics-port: the ranks get a free block (before, fixed 9500/9501, which another run may hold)."""
    proc = run_to_end(
        [sys.executable, "-m", "observe.cli", "demo", "--steps", "25", "--log-every", "5"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    urls = re.findall(r"rank (\d) metrics: http://127\.0\.0\.1:(\d+)/metrics", out)
    assert [r for r, _ in urls] == ["0", "1"] and int(urls[1][1]) == int(urls[0][1]) + 1
    assert "finished" in out
    rows = dict(
        re.split(r"\s{2,}", line.strip(), maxsplit=1)
        for line in out.splitlines()
        if re.match(r"^(steps|exit status|loss, \w+ window|rank \d /metrics|JSON log)\s{2,}", line)
    )
    assert rows["steps"] == "25"
    assert rows["exit status"] == "0"
    first = float(rows["loss, first window"].split()[0])
    last = float(rows["loss, last window"].split()[0])
    assert last < first
    # the ranks served until the demo's poller scraped the end: the step counts agree (before: "last step 198")
    for rank in ("0", "1"):
        seen = rows[f"rank {rank} /metrics"]  # failed: scrapes while the ranks were still loading
        assert re.fullmatch(r"\d+ scrapes, \d+ series, step 25 \(finished\)(; \d+ failed \(\w+\))?", seen), rows
    assert Path(rows["JSON log"]).is_file()
    # the local node agent: its URL up front, what it saw in the summary
    assert re.search(r"node agent: http://127\.0\.0\.1:\d+/metrics", out)
    for label in ("node agent", "agent: CPU", "agent: memory", "agent: GPUs", "agent: XID errors"):
        assert re.search(rf"^{label}\s{{2,}}\S", out, re.M), label
