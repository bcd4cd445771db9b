"""The dashboard's efficiency PromQL: shape and validation (evaluated for real in tests/e2e)."""

from __future__ import annotations

import re

import pytest

from observe import catalog as c
from observe.monitoring.queries import scaling_queries


def selectors(expr: str) -> list[str]:
    return re.findall(r"(fsdp_train_\w+)\{([^}]*)\}", expr)


def test_every_selector_carries_the_dashboard_matchers() -> None:
    q = scaling_queries(matchers='namespace=~"$namespace"', info_matchers='model=~"$model"')
    found = selectors(q.efficiency)
    assert {name for name, _ in found} == {c.TRAIN_INFO.name, c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name}
    for name, inner in found:
        assert 'namespace=~"$namespace"' in inner
        assert ('model=~"$model"' in inner) == (name == c.TRAIN_INFO.name)
        if name == c.TRAIN_GLOBAL_TOKENS_PER_SECOND.name:
            assert 'rank="0"' in inner
    assert "[$__range]" in q.efficiency and "quantile_over_time(0.5," in q.throughput
    assert q.efficiency.count("(") == q.efficiency.count(")")


def test_plain_selectors_without_matchers() -> None:
    q = scaling_queries(range_="6h", quantile=0.9)
    assert f"{c.TRAIN_INFO.name}{{}}[6h]" in q.ranks
    assert "quantile_over_time(0.9," in q.efficiency


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"matchers": '{namespace="x"}'}, "without braces"),
        ({"info_matchers": "}"}, "without braces"),
        ({"range_": "six hours"}, "neither $__range nor a duration"),
        ({"quantile": 0}, "quantile must be in"),
        ({"quantile": 1.5}, "quantile must be in"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        scaling_queries(**kwargs)
