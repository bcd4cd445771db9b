"""``benchmarks/redaction_false_positives.py`` stays runnable, and its figures hold the rule's claims
(docs/agent.md, "What leaves the node"): no case without a secret touched, under 1 % of the
standard library's paths and none of its module names; random base62 caught, hexadecimal left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.benchmark import run_benchmark

#: Runs a benchmark script as a subprocess: not the inner loop.
pytestmark = pytest.mark.e2e


def test_false_positive_rates_stay_low_and_random_tokens_are_caught(tmp_path: Path, subprocess_env) -> None:
    out = tmp_path / "fp.json"
    proc = run_benchmark(
        "redaction_false_positives", "--samples", "300", "--out", str(out), env=subprocess_env, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    fp = {c["corpus"]: c for c in report["false_positives"]}
    assert fp["redaction cases without a secret"]["items"] >= 15
    assert fp["redaction cases without a secret"]["changed"] == 0
    assert fp["stdlib file paths"]["items"] > 1000 and fp["stdlib file paths"]["changed_rate"] < 0.01
    assert fp["stdlib module names"]["items"] > 500 and fp["stdlib module names"]["changed_rate"] < 0.001
    tp = {c["kind"]: c["rate"] for c in report["true_positives"]}
    assert tp["base62, 20-64 chars"] > 0.98 and tp["AWS secret key shape (40)"] > 0.98
    assert tp["hex, 40 chars (left alone)"] == 0
    assert "stdlib file paths" in proc.stdout
