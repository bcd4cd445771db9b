"""Render the TUI's SVG snapshots to PNG, to look at them (``python -m tests.tui.snapshots_to_png [OUT]``).

Needs ``cairosvg`` (``pip install cairosvg``; not a project dependency) and a monospace font: the
SVGs ask for Fira Code, which is swapped for DejaVu Sans Mono (Debian's default) so columns line up.
Writes one PNG per SVG of ``tests/tui/__snapshots__`` into ``OUT`` (default ``/tmp/tui-png``).
"""

from __future__ import annotations

import sys
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parent / "__snapshots__"


def main(argv: list[str]) -> int:
    """Render every snapshot; return 0 (1 when cairosvg is missing)."""
    try:
        import cairosvg
    except ImportError:
        print("error: cairosvg: not installed; pip install cairosvg", file=sys.stderr)
        return 1
    out = Path(argv[0]) if argv else Path("/tmp/tui-png")
    out.mkdir(parents=True, exist_ok=True)
    for svg in sorted(SNAPSHOTS.rglob("*.svg")):
        text = (
            svg.read_text()
            .replace('"Fira Code"', '"DejaVu Sans Mono"')
            .replace("Fira Code, monospace", "DejaVu Sans Mono")
        )
        target = out / (svg.stem + ".png")
        cairosvg.svg2png(bytestring=text.encode(), write_to=str(target), output_width=1800)
        print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
