"""The ``?`` screen at 80x24: every explanation wraps inside the box, none is cut."""

from __future__ import annotations

from observe.tui.screens.help import KEYS, STATES, box_text_width, help_lines


def _text(line: list[tuple[str, str]]) -> str:
    return "".join(part for part, _ in line)


def test_help_fits_an_80_column_terminal_without_losing_a_word() -> None:
    width = box_text_width(80)
    lines = [_text(line) for line in help_lines(width)]
    assert max(map(len, lines)) <= width
    words = " ".join(lines).split()
    for _, text in KEYS:
        assert " ".join(text.split()) in " ".join(words)
    for _, _, text in STATES:
        assert " ".join(text.split()) in " ".join(words)


def test_help_uses_wide_terminals_in_one_line_per_key() -> None:
    assert len(help_lines(box_text_width(200))) < len(help_lines(box_text_width(80)))
    assert box_text_width(200) == 106
