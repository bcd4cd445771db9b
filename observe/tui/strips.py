"""A fix to Textual's ``Strip`` caches: a strip never keeps itself in its own cache.

``Strip.divide(cuts)`` (textual 8.2.8, ``textual/strip.py``) returns ``[self]`` when the one
cut is the strip's whole length, and stores that list in the strip's own ``_divide_cache``;
``Strip.crop_extend`` can store ``self`` in ``_crop_extend_cache`` the same way. Each is a
reference cycle, so the strip, its caches and every ``Segment`` of it outlive the frame they were
drawn for: reference counting cannot free them, only a garbage collection of the generation they
reached. The compositor divides every line of every frame that way, so each frame left its
whole drawing behind as cyclic garbage: on the GPU grid at 4,096 nodes some 8,000 segments per
refresh, which every full collection walked (holding the GIL: the UI stalled) and whose growth set
off the next one (``benchmarks/tui_fanin.py``).

``install`` wraps the two methods so that a result that is the strip itself is returned without
being cached (it costs nothing to compute again); any other result is cached as before. Drawing
is unchanged. ``tests/tui/test_strips.py`` checks the cycle is gone, and that Textual still
makes it without the fix (so the fix is dropped when Textual stops needing it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.style import Style
from textual.strip import Strip

_divide = Strip.divide
_crop_extend = Strip.crop_extend


def _divide_uncycled(self: Strip, cuts: Iterable[int]) -> Sequence[Strip]:
    kept = [cut for cut in cuts if cut <= self.cell_length]
    if kept == [self.cell_length]:
        return [self]
    return _divide(self, kept)


def _crop_extend_uncycled(self: Strip, start: int, end: int, style: Style | None) -> Strip:
    if start == 0 and end == self.cell_length:
        return self
    return _crop_extend(self, start, end, style)


def install() -> None:
    """Make ``Strip.divide`` and ``Strip.crop_extend`` stop caching the strip in itself (idempotent)."""
    Strip.divide = _divide_uncycled  # type: ignore[method-assign]
    Strip.crop_extend = _crop_extend_uncycled  # type: ignore[method-assign]


def uninstall() -> None:
    """Textual's own methods again (for the test that shows the cycle)."""
    Strip.divide = _divide  # type: ignore[method-assign]
    Strip.crop_extend = _crop_extend  # type: ignore[method-assign]
