"""The fan-in's fast path (``observe.sources.summary``) gives the same node status as building the
whole ``NodeSnapshot``, for every recorded node and a simulated 8-GPU node, and refuses the same
bad answers."""

from __future__ import annotations

import pytest

from benchmarks.fleet import make_node  # the simulated fleet's node
from observe.agent.server import summary
from observe.model import NodeSnapshot
from observe.sources.direct import decode_node
from observe.sources.summary import read_summary
from observe.sources.view import NodeStatus, node_status
from tests.support.fleet import NODES, recorded

NOW = 1_800_000_000.0


def answers() -> list[bytes]:
    snaps = [summary(recorded(n, NOW, xid_age=60)) for n in NODES]
    snaps.append(summary(make_node(3, NOW - 1, seed=5)))
    return [s.to_json().encode() for s in snaps]


@pytest.mark.parametrize("index", range(4))
def test_the_fast_path_gives_the_same_status(index: int) -> None:
    body = answers()[index]
    slow = node_status("x", "u", NodeSnapshot.from_json(body), NOW, keep=False)
    fast = node_status("x", "u", read_summary(body), NOW, keep=False)
    assert fast == slow and fast.figures is not None
    assert fast.xid_events == slow.xid_events and fast.notices == slow.notices


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"schema_version": 2}', "schema_version 2 is not 1"),
        (b'{"schema_version": 1, "gpus": "lots"', "Expecting"),
        (b'{"schema_version": 1, "time_unix": 1}', "wrong shape"),
        (b"[1, 2]", "schema_version None"),
    ],
)
def test_bad_answers_are_malformed_on_both_paths(body: bytes, reason: str) -> None:
    previous = NodeStatus(name="n", source="u")
    for keep in (False, True):
        status = decode_node(previous, body, NOW, keep=keep)
        assert status.state == "malformed" and reason in status.error


@pytest.mark.parametrize(
    ("text", "orjson_refuses"),
    [
        ('{"a": NaN, "b": [Infinity, -Infinity]}', True),
        ('{"a": 1.5, "b": "ü", "c": [null, true]}', False),
        ('{"big": 18446744073709551615, "small": -9223372036854775808}', False),
    ],
)
def test_loads_reads_what_pythons_encoder_writes(text: str, orjson_refuses: bool) -> None:
    import contextlib
    import json

    import orjson

    from observe.sources.summary import loads

    assert json.dumps(loads(text.encode())) == json.dumps(json.loads(text))  # NaN != NaN; its text is equal
    with pytest.raises(orjson.JSONDecodeError) if orjson_refuses else contextlib.nullcontext():
        orjson.loads(text)  # the fallback is exercised where orjson alone would fail


def test_a_snapshot_with_a_nan_reading_is_read_not_malformed() -> None:
    body = answers()[3].replace(b'"power_watts":', b'"power_watts":NaN,"x":', 1)
    status = decode_node(NodeStatus(name="n", source="u"), body, NOW, keep=False)
    assert status.state == "ok", status.error
