"""``observe.promtext``: its reading of plain sample lines gives what prometheus_client's parser
gives, on the real exporters' texts (two real gloo ranks' ``/metrics``, the trainer's own exporter,
the agent's exposition of a recorded node with hostile command lines) and on every odd form, which
goes to prometheus_client whole."""

from __future__ import annotations

import math

import pytest

from observe import promtext
from observe.agent.exposition import render
from observe.sources.trainer import SAMPLE_NAMES
from tests.support.fleet import recorded, trainer_exposition
from tests.support.forensics import MODES, RECORDED
from tests.support.tui import GPU0


def _texts() -> list[str]:
    texts = [p.read_text() for mode in MODES for p in sorted((RECORDED / mode).glob("*.metrics.txt"))]
    texts.append(trainer_exposition(0, "gpu-node-1", GPU0, 0.6, 0.02, compute=0.3)().decode())
    return texts


def _same(a: list[promtext.Sample], b: list[promtext.Sample]) -> bool:
    def key(s: promtext.Sample) -> tuple:
        nan = isinstance(s.value, float) and math.isnan(s.value)
        return (s.name, dict(s.labels), "nan" if nan else s.value, type(s.value))

    return [key(s) for s in a] == [key(s) for s in b]


@pytest.mark.parametrize("index", range(len(_texts())))
def test_real_exporters_texts_read_as_prometheus_client_reads_them(index: int) -> None:
    text = _texts()[index]
    every = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"}
    for names in (SAMPLE_NAMES, every):
        lines = promtext.kept_lines(text, names)
        plain = promtext.plain_parse(lines)
        assert plain is not None and lines  # every line of a real exporter's text is plain
        assert _same(plain, promtext.full_parse(lines))


PLAIN = [
    'a_total{pg="0",rank="3"} 73.0',
    "a 1",  # no labels; an integer stays an int, as prometheus_client reads it
    'a{x=""} -2',
    'a{x="1"} NaN',
    'a{x="1"} +Inf',
    'a{x="1"} -Inf',
    'a{x="1"} 1.5e+09',
    'a{x="a, b=c} d"} 1.0',  # commas, an equals sign and a brace with a space inside a value
    'a{x="{",} 2.0',  # a trailing comma
    'a:b{x="ü"} 3.0',
]
ODD = [
    'a{x="say \\"hi\\""} 1.0',  # escapes: prometheus_client unescapes
    'a{x="a\\\\b"} 1.0',
    'a{x="line\\nbreak"} 1.0',
    'a{x="1", y="2"} 1.0',  # a space after a comma
    'a{x="1"} 1.0 1700000000000',  # a timestamp
    'a{x="1"}  1.0',  # two spaces
    "a 1_000",  # prometheus_client refuses an underscore in a value
    'a{x="1",x="2"} 1.0',  # a duplicate label: prometheus_client refuses it
    'a{__name__="b"} 1.0',
    'a{x="1"} one',
]


@pytest.mark.parametrize("line", PLAIN)
def test_plain_lines_are_read_here_as_prometheus_client_reads_them(line: str) -> None:
    plain = promtext.plain_parse([line])
    assert plain is not None and _same(plain, promtext.full_parse([line]))


@pytest.mark.parametrize("line", ODD)
def test_any_other_line_sends_the_text_to_prometheus_client_whole(line: str) -> None:
    assert promtext.plain_parse([PLAIN[0], line]) is None
    text = f"{PLAIN[0]}\n{line}\n"
    try:
        expected = promtext.full_parse([PLAIN[0], line])
    except ValueError:
        with pytest.raises(ValueError):
            promtext.parse(text, {"a", "a_total"})
        return
    assert _same(promtext.parse(text, {"a", "a_total"}), expected)


def test_an_agents_exposition_with_hostile_command_labels_reads_the_same() -> None:
    # the recorded node's hostile command lines (quotes, backslashes, an escape) as label values
    snapshot = recorded("gpu-node-1", 1_800_000_000.0)
    text = render(snapshot, command_label=True).decode()
    every = {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines() if line and line[0] != "#"}
    lines = promtext.kept_lines(text, every)
    assert promtext.plain_parse(lines) is None  # escaped label values: prometheus_client reads them
    assert _same(promtext.parse(text, every), promtext.full_parse(lines))
    commands = [s.labels["command"] for s in promtext.parse(text, every) if "command" in s.labels]
    assert any('"' in command or "\\" in command for command in commands)
