"""Samples of the Prometheus text exposition format, as every reader here needs them.

One ``Sample`` type and one parser (prometheus_client's) for the TUI's direct source, the
scaling report's local mode and the demo's scraper. Format:
https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
"""

from __future__ import annotations

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


def parse(text: str, names: Collection[str] | None = None) -> list[Sample]:
    """The samples of ``/metrics`` text, optionally only those whose family is in ``names``.

    Filtering happens on lines before parsing, which makes a rank's exposition (mostly histogram
    buckets and process series) several times cheaper to read when few families are wanted.
    ``names`` holds sample names as exposed (``x_bucket`` for a histogram's buckets).

    Raises:
        ValueError: the text is not the Prometheus text format.
    """
    if names is not None:
        text = (
            "\n".join(
                line
                for line in text.splitlines()
                if line and not line.startswith("#") and line.split("{", 1)[0].split(" ", 1)[0] in names
            )
            + "\n"
        )
    return [
        Sample(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
    ]
