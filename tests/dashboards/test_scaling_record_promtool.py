"""The scaling-efficiency table reads each run's ranks from a recording rule (``rules.RUN_RANKS``)
instead of counting every rank's ``fsdp_train_info`` six times: under promtool, both forms give
the same efficiency, throughput and ranks, also for a run one of whose ranks left before the end."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from observe import catalog as c
from observe.monitoring import rules
from observe.monitoring.queries import scaling_queries

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is missing: apt-get install prometheus")

INFO = 'model="llama3-8b",sharding_strategy="FULL_SHARD",job="fsdp-observe-trainer",namespace="training"'


def rank(run: str, world: int, r: int) -> str:
    return f'{c.TRAIN_INFO.name}{{{INFO},run_id="{run}",world_size="{world}",rank="{r}",node="n{r}"}}'


def tokens(run: str) -> str:
    labels = f'{INFO},run_id="{run}",rank="0",node="n0"'
    return f"{c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name}{{{labels}}}"


SERIES = [
    {"series": rank("a", 1, 0), "values": "1x30"},
    {"series": tokens("a"), "values": "1000x30"},
    {"series": rank("b", 2, 0), "values": "1x30"},
    {"series": rank("b", 2, 1), "values": "1x20"},  # rank 1 of run b left 9 minutes before the end
    {"series": tokens("b"), "values": "1800x30"},
]


def test_the_recorded_ranks_give_the_same_table_as_counting_every_rank(tmp_path: Path) -> None:
    counted = scaling_queries(range_="30m")
    recorded = scaling_queries(range_="30m", ranks_record=rules.RUN_RANKS)
    assert f"{c.TRAIN_INFO.name}{{" in counted.efficiency
    assert f"{c.TRAIN_INFO.name}{{" not in recorded.efficiency  # no per-rank series read
    labels = {
        "a": '{model="llama3-8b", run_id="a", sharding_strategy="FULL_SHARD", world_size="1"}',
        "b": '{model="llama3-8b", run_id="b", sharding_strategy="FULL_SHARD", world_size="2"}',
    }
    expected = {
        "ranks": {"a": 1, "b": 2},
        "throughput": {"a": 1000, "b": 1800},
        "efficiency": {"a": 1.0, "b": 0.9},  # (1800 / 2) / (1000 / 1)
    }
    checks = [
        {
            "expr": getattr(form, name),
            "eval_time": "29m",
            "exp_samples": [{"labels": labels[run], "value": value} for run, value in values.items()],
        }
        for form in (counted, recorded)
        for name, values in expected.items()
    ]
    (tmp_path / "rules.yaml").write_text(rules.render())
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": SERIES, "promql_expr_test": checks}],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(test, sort_keys=False, width=1000))
    done = subprocess.run([PROMTOOL, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
