"""Text for values: N/A for what could not be read, htop/nvtop units, ages, one-line reasons; and
the cell styles of states and XID severities that every screen shares.

Every function takes ``None`` and returns ``"N/A"`` for it (never 0). Nothing here returns Rich
markup: data (process command lines, node names, kernel messages) is shown as plain text, so a
``[red]`` or an escape sequence in a command line stays literal.
"""

from __future__ import annotations

import time

NA = "N/A"

#: A node's or rank's state -> cell style (the style names of ``top.tcss``).
STATE_STYLE = {"ok": "ok", "stale": "warn", "slow": "warn", "unreachable": "bad", "malformed": "bad", "waiting": "dim"}
#: XID severity class -> cell style.
SEVERITY_STYLE = {
    "node_reboot": "bad",
    "gpu_reset": "bad",
    "unknown": "bad",
    "nvlink_fabric": "bad",
    "application": "warn",
    "informational": "dim",
}
#: The mark after a figure taken over only some of a node's GPUs (``NodeFigures.partial``).
PARTIAL = "*"


def now() -> float:
    """The current Unix time (one place, so tests can pin the clock the screens show)."""
    return time.time()


_BINARY = ("B", "K", "M", "G", "T", "P")


def pct(value: float | None, digits: int = 0) -> str:
    """A 0..1 ratio as a percentage (``0.453`` -> ``45%``); a value that rounds to zero reads ``0%``,
    never ``-0%`` (a ratio of two float sums can come out a hair below zero)."""
    if value is None:
        return NA
    text = f"{value * 100:.{digits}f}"
    return f"{text.lstrip('-') if float(text) == 0 else text}%"


def num(value: float | None, digits: int = 1, unit: str = "") -> str:
    """A number with ``digits`` decimals and an optional unit suffix."""
    return NA if value is None else f"{value:,.{digits}f}{unit}"


def size(value: float | None) -> str:
    """Bytes in binary units as htop writes them (``1.5G``, ``512M``, ``980K``)."""
    if value is None:
        return NA
    amount = float(value)
    for unit in _BINARY:
        if abs(amount) < 1000 or unit == _BINARY[-1]:
            return f"{amount:.0f}{unit}" if unit == "B" or amount >= 100 else f"{amount:.1f}{unit}"
        amount /= 1024
    return NA  # pragma: no cover


def rate(value: float | None) -> str:
    """Bytes per second (``1.0M/s``)."""
    return NA if value is None else f"{size(value)}/s"


def hertz(value: float | None) -> str:
    """A clock in MHz (``1980 MHz``)."""
    return NA if value is None else f"{value / 1e6:.0f} MHz"


def duration(seconds: float | None) -> str:
    """A duration: ``45s``, ``12m05s``, ``3h07m``, ``2d04h``."""
    if seconds is None:
        return NA
    s = int(max(0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def cpu_time(seconds: float | None) -> str:
    """CPU time as htop's TIME+ column (``12:34.56``, ``3h25:07``)."""
    if seconds is None:
        return NA
    minutes, secs = divmod(max(0.0, seconds), 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}h{minutes:02d}:{int(secs):02d}" if hours else f"{minutes}:{secs:05.2f}"


def step_time(seconds: float | None) -> str:
    """A step time: ``850 ms`` below a second, else ``1.25 s``."""
    if seconds is None:
        return NA
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def age(seconds: float | None) -> str:
    """How old data is: ``now``, ``3s``, ``2m10s``; ``never`` for no data at all."""
    if seconds is None:
        return "never"
    return "now" if seconds < 1 else duration(seconds)


def clock(unix: float | None) -> str:
    """A local wall-clock time, with the date when it is not today."""
    if unix is None or unix <= 0:
        return NA
    local = time.localtime(unix)
    if time.strftime("%Y%m%d", local) == time.strftime("%Y%m%d", time.localtime(now())):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%m-%d %H:%M", local)


def one_line(text: str | None, width: int | None = None) -> str:
    """``text`` on one line (control characters shown as ``\\xNN``), cut to ``width`` with ``…``."""
    if text is None:
        return NA
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    if width is not None and len(text) > width:
        return text[: max(0, width - 1)] + "…"
    return text


def short_command(command: str | None) -> str | None:
    """A command line with its program and script named by their base names, as htop's "shorten
    program path" does: ``/opt/venv/bin/python3 -u /work/train.py --lr 3e-4`` ->
    ``python3 -u train.py --lr 3e-4``. Only the program and the first word after its options are
    shortened (an absolute path there is the script); every later argument is kept whole.
    ``None`` stays ``None``.
    """
    if not command:
        return command
    words = command.split(" ")
    words[0] = _base_name(words[0])
    script = next((i for i, w in enumerate(words[1:], 1) if not w.startswith("-")), None)
    if script is not None and words[script - 1] not in ("-m", "-c") and words[script].startswith("/"):
        words[script] = _base_name(words[script])
    return " ".join(words)


def _base_name(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1] or word if word.startswith("/") else word


def shorten(text: str, width: int) -> str:
    """``text`` on one line in at most ``width`` characters, cut at a word boundary with ``…``
    (mid-word only for a single word longer than ``width``)."""
    text = one_line(text)
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    cut = text[: width - 1]
    space = cut.rstrip().rfind(" ")
    if space > width // 3:  # a word boundary not too far back
        cut = cut[:space]
    return cut.rstrip(" ,;:(") + "…"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 node``, ``2 nodes``, ``1,024 nodes``."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
