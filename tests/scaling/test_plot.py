"""``report.png`` is a real PNG, whatever the report holds (nodes, GiB, no memory series)."""

from __future__ import annotations

from pathlib import Path

import pytest
from matplotlib.image import imread

from observe.scaling.figures import build_report
from observe.scaling.plot import render
from tests.support.scaling import run


@pytest.mark.parametrize(
    "sizes",
    [
        lambda: [
            run(8, nodes=1),
            run(16, nodes=2, step_s=1.1),
            run(32, nodes=4, step_s=1.2),
            run(128, nodes=16, step_s=1.3),
        ],
        lambda: [run(1, memory=None), run(2, memory=None, step_s=1.5)],
        lambda: [run(2, batch=4), run(3, batch=4, step_s=1.2)],
    ],
    ids=["16-nodes-GiB", "no-memory-series", "linear-axis"],
)
def test_png_is_a_valid_image(sizes, tmp_path: Path) -> None:
    path = tmp_path / "report.png"
    render(build_report("cluster", sizes(), 10), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    height, width = image.shape[:2]
    assert width > 1000 and height > 500
    assert image.std() > 0.05  # something was drawn
