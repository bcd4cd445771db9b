"""Samples of the Prometheus text exposition format, as every reader here needs them.

One ``Sample`` type and one parser (prometheus_client's) for the TUI's direct source, the
scaling report's local mode and the demo's scraper. Format:
https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format

The TUI reads every rank's ``/metrics`` each refresh: at 8,192 ranks prometheus_client's parser
(which reads label values a character at a time) took some 2 ms of CPU per rank, 15 s per refresh
(``benchmarks/tui_fanin.py --ranks``). Lines in the plain form exporters write,
``name{label="value",...} value`` with no escape, no space and no timestamp, are read here by two
regular expressions instead, with prometheus_client's reading of values (an integer stays an int);
a text with any other line goes to prometheus_client whole, so the samples are those it gives
(``tests/test_promtext.py`` checks both agree on real exporters' texts and on the odd forms).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families


class Sample(NamedTuple):
    """One sample: its exposition name (``fsdp_train_step_seconds_bucket``), labels and value.

    A tuple, so the TUI's fan-in can unpack millions of them cheaply.
    """

    name: str
    labels: Mapping[str, str]
    value: float


#: A label block of the plain form: ``name="value"`` pairs, comma separated (a trailing comma
#: allowed), values without quotes or backslashes; and one pair of it.
_PLAIN_LABELS = re.compile(r'(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*",)*(?:[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")?')
_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _value(text: str) -> float:
    """A sample value as prometheus_client reads one (``int`` when it is an integer, else ``float``;
    no ``_``).

    Raises:
        ValueError: not a number.
    """
    if "_" in text:
        raise ValueError(text)
    return int(text) if text.lstrip("+-").isdigit() else float(text)


def plain_parse(lines: list[str]) -> list[Sample] | None:
    """The samples of ``lines`` when every one is in the plain form (see the module's docstring),
    else ``None`` (the caller reads them with ``full_parse``)."""
    out = []
    for line in lines:
        brace = line.find("{")
        if brace < 0:
            name, _, value = line.partition(" ")
            labels: dict[str, str] = {}
        else:
            close = line.rfind("} ")
            name, block, value = line[:brace], line[brace + 1 : close], line[close + 2 :]
            if close < brace or _PLAIN_LABELS.fullmatch(block) is None:
                return None
            pairs = _PAIR.findall(block)
            labels = dict(pairs)
            if len(labels) != len(pairs) or "__name__" in labels:
                return None
        if not value or " " in value or "\t" in value or _METRIC_NAME.fullmatch(name) is None:
            return None
        try:
            out.append(Sample(name, labels, _value(value)))
        except ValueError:
            return None
    return out


def kept_lines(text: str, names: Collection[str]) -> list[str]:
    """The sample lines of ``text`` whose name is in ``names`` (comments and other samples left out)."""
    return [
        line
        for line in text.splitlines()
        if line and not line.startswith("#") and line.split("{", 1)[0].split(" ", 1)[0] in names
    ]


def full_parse(lines: list[str]) -> list[Sample]:
    """``lines`` (sample lines, no comments) through prometheus_client's parser.

    Raises:
        ValueError: a line is not the Prometheus text format.
    """
    text = "\n".join(lines) + "\n"
    return [
        Sample(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
    ]


def parse(text: str, names: Collection[str] | None = None) -> list[Sample]:
    """The samples of ``/metrics`` text, optionally only those whose family is in ``names``.

    Filtering happens on lines before parsing, which makes a rank's exposition (mostly histogram
    buckets and process series) several times cheaper to read when few families are wanted.
    ``names`` holds sample names as exposed (``x_bucket`` for a histogram's buckets).

    Raises:
        ValueError: the text is not the Prometheus text format.
    """
    if names is not None:
        lines = kept_lines(text, names)
        plain = plain_parse(lines)
        return plain if plain is not None else full_parse(lines)
    return [
        Sample(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
    ]
