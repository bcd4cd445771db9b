"""``observe.tui.strips``: Textual's ``Strip`` no longer keeps itself in its own caches, so a frame's
drawing is freed by reference counting when the next frame replaces it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator

import pytest
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from observe.tui import strips


class _Traced(Style):
    """A style that can be weakly referenced: it lives exactly as long as the strip holding it."""

    __slots__ = ("__weakref__",)


def _line() -> Strip:
    return Strip([Segment("▀", _Traced(color="red", bgcolor="blue")), Segment("▀▀", Style(color="green"))], 3)


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Automatic collection off, so an object that dies here died of reference counting."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


USES: dict[str, Callable[[Strip], object]] = {
    "divide at its length": lambda s: s.divide([s.cell_length]),
    "crop_extend to itself": lambda s: s.crop_extend(0, s.cell_length, None),
}


def _survives(use: Callable[[Strip], object]) -> bool:
    strip = _line()
    use(strip)
    ref = weakref.ref(strip._segments[0].style)  # Strip and Segment allow no weak references
    del strip
    return ref() is not None


@pytest.mark.parametrize("use", USES.values(), ids=USES.keys())
def test_textual_alone_keeps_the_strip_alive_in_a_cycle(use: Callable[[Strip], object], no_collector: None) -> None:
    strips.uninstall()
    try:
        assert _survives(use), "Textual no longer caches a strip in itself: observe.tui.strips can go"
    finally:
        strips.install()
        gc.collect()


@pytest.mark.parametrize("use", USES.values(), ids=USES.keys())
def test_with_the_fix_reference_counting_frees_the_strip(use: Callable[[Strip], object], no_collector: None) -> None:
    strips.install()
    assert not _survives(use)


def test_the_fix_draws_the_same() -> None:
    strips.install()
    strip = _line()
    assert strip.divide([3]) == [strip] and strip.crop_extend(0, 3, None) is strip
    parts = strip.divide([1, 3])
    assert [p.text for p in parts] == ["▀", "▀▀"] and strip.divide([1, 3]) is parts  # other results still cached
    assert strip.crop_extend(1, 5, None).text == "▀▀  " and strip.crop_extend(0, 2, None).text == "▀▀"
