"""Every panel's PromQL lives in ``observe/monitoring/queries.py`` (the monitoring-mixin way): a
board module is a list of panels that names its queries, so no string in it is PromQL."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from observe.monitoring import board_gpu, board_nodes, board_training

#: What PromQL looks like inside a string: a function or aggregation call, a range selector, or a
#: label matcher.
PROMQL = re.compile(
    r"\b(rate|irate|increase|sum|max|min|avg|count|topk|bottomk|label_values|label_replace|"
    r"histogram_quantile|quantile|[a-z]+_over_time|query_result)\s*(by\s*\([^)]*\)\s*)?\("
    r"|\[\$?[\w]+\]"
    r'|\{[^}]*=~?"'
)
#: Prose that shows the user a query to type (a panel description), not a query the panel runs.
TOLD_TO_THE_USER = ("or query count by (node, dialect) (",)


def strings(module: object) -> list[tuple[int, str]]:
    """Every string constant of ``module``'s source (f-string parts included), with its line."""
    tree = ast.parse(Path(module.__file__).read_text())  # type: ignore[attr-defined]
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


@pytest.mark.parametrize("module", [board_gpu, board_nodes, board_training], ids=lambda m: m.__name__)
def test_a_board_module_holds_no_promql(module: object) -> None:
    name = module.__name__  # type: ignore[attr-defined]
    found = [
        f"{name}:{line}: {text[:80]!r}"
        for line, text in strings(module)
        if PROMQL.search(text) and not any(t in text for t in TOLD_TO_THE_USER)
    ]
    assert not found, "PromQL belongs in observe/monitoring/queries.py:\n" + "\n".join(found)


def test_the_pattern_finds_promql() -> None:
    """The check above could fail: the shapes the boards used to hold inline are caught."""
    for inline in (
        'sum by (phase) (rate(fsdp_train_phase_seconds_total{run_id=~"$run_id"}[$__rate_interval]))',
        "label_values(fsdp_train_info, run_id)",
        "max_over_time(x[5m])",
    ):
        assert PROMQL.search(inline), inline
    assert not PROMQL.search("Compute time per step (5m: step time less data wait and collective wait) over the run's")
