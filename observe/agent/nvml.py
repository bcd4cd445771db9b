"""The agent's one door to NVML (``pynvml`` from nvidia-ml-py): every call, what its errors mean, and
what a device's text may hold.

Every NVML call goes through ``Nvml.call``:

- NOT_SUPPORTED becomes ``None`` (absent; the TUI shows N/A, never 0);
- a function the driver's library lacks (FUNCTION_NOT_FOUND, or pynvml's library-mismatch error)
  is logged once and never called again, so that field is absent from then on;
- GPU_IS_LOST raises ``GpuLost``;
- any other NVML error is counted by kind (``nvml_<error>``), logged once per kind, and the field
  is absent; on a thread inside ``Nvml.tally`` it is also counted in that tally, so one GPU's
  reading knows which of its calls failed (``observe.agent.gpu`` calls a GPU that answered no
  figure at all *unreadable*);
- text that is not UTF-8 (a name or UUID from a failing InfoROM: pynvml's own ``decode()``
  raises) is kept, its bad bytes as ``\\xff`` escapes, and counted as ``nvml_invalid_text``;
- any other exception (a binding or driver bug) is counted by its type (``nvml_runtime_error``),
  logged once, and that value is absent, like an NVML error.

NVML text is untrusted input: ``device_text`` decodes it with escapes for bad bytes, escapes
control and bidirectional formatting characters (an ESC or a RIGHT-TO-LEFT OVERRIDE in a board
name must not drive a terminal) and cuts it to ``MAX_NAME_CHARS``.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from observe.agent.redact import MAX_NAME_CHARS, cut, escape_controls
from observe.logonce import OnceLog

log = logging.getLogger(__name__)


class GpuLost(Exception):
    """NVML answered GPU_IS_LOST for a GPU."""


def snake_case(name: str) -> str:
    """A class name in snake case: ``RuntimeError`` -> ``runtime_error``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def error_kind(exc: pynvml.NVMLError) -> str:
    """``nvml_<error>`` for an NVML error: ``nvml_unknown`` for NVML_ERROR_UNKNOWN, ``nvml_no_permission``..."""
    return "nvml_" + snake_case(type(exc).__name__.partition("_")[2] or "unknown")


def device_text(value: Any) -> str | None:
    """Text NVML returned (``bytes`` or ``str``) made safe to export: bad UTF-8 bytes as ``\\xff``,
    controls escaped, at most ``MAX_NAME_CHARS`` characters; ``None`` stays ``None``."""
    if value is None:
        return None
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)
    return cut(escape_controls(text), MAX_NAME_CHARS)


class Nvml:
    """The agent's one door to NVML (rules in the module docstring).

    Attributes:
        available: ``nvmlInit`` succeeded.
        reason: why NVML is unavailable (``None`` when it is available).
        errors: ``nvml_<error>`` -> count.
        missing: functions the library lacks (logged once each).
    """

    def __init__(self) -> None:
        self.available = False
        self.reason: str | None = "not started"
        self.errors: Counter[str] = Counter()
        self.missing: set[str] = set()
        self._once = OnceLog(log, self.errors)
        self._lock = threading.Lock()  # calls come from one worker thread per GPU
        self._local = threading.local()

    def start(self) -> bool:
        """``nvmlInit``; on failure (no library, no driver: a CPU-only node) say so once and return False."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.available, self.reason = False, f"no GPUs on this node: NVML unavailable ({exc})"
            log.warning("%s; serving host data only (reported once)", self.reason)
            return False
        self.available, self.reason = True, None
        return True

    def shutdown(self) -> None:
        """``nvmlShutdown`` if started."""
        if self.available:
            self.available = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass

    @contextmanager
    def tally(self) -> Iterator[Counter[str]]:
        """Count, by kind, the NVML errors of the calls this thread makes inside the block."""
        counts: Counter[str] = Counter()
        self._local.tally = counts
        try:
            yield counts
        finally:
            self._local.tally = None

    def _count(self, kind: str, message: str, *args: object) -> None:
        tally = getattr(self._local, "tally", None)
        if tally is not None:
            tally[kind] += 1
        with self._lock:  # OnceLog is not locked; several GPU threads report here
            self._once.report(kind, message, *args)

    def call(self, function: str, *args: Any, expected: tuple[type[Exception], ...] = ()) -> Any:
        """``pynvml.<function>(*args)``, or ``None`` when the value cannot be read.

        Args:
            function: a pynvml function name, e.g. ``nvmlDeviceGetFanSpeed``.
            expected: NVML errors that mean "nothing here" for this call (returned as ``None``
                without counting, e.g. NOT_FOUND for an empty MIG slot).

        Returns:
            The value; for a text that is not UTF-8, its raw ``bytes`` (``device_text`` makes
            them safe).

        Raises:
            GpuLost: NVML answered GPU_IS_LOST.
        """
        if function in self.missing:
            return None
        try:
            return getattr(pynvml, function)(*args)
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError_GpuIsLost:
            raise GpuLost(function) from None
        except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLLibraryMismatchError):
            with self._lock:
                first = function not in self.missing
                self.missing.add(function)
            if first:
                log.warning(
                    "the NVIDIA driver's NVML has no %s; that field is absent from now on (reported once)", function
                )
            return None
        except expected:
            return None
        except pynvml.NVMLError as exc:
            self._count(error_kind(exc), "NVML %s failed: %s (reported once per kind)", function, exc)
            return None
        except UnicodeDecodeError as exc:  # pynvml decodes text itself, strictly
            self._count(
                "nvml_invalid_text", "NVML %s returned text that is not UTF-8: %r (reported once)", function, exc.object
            )
            return exc.object
        except Exception as exc:  # noqa: BLE001 - a binding or driver bug costs this one value, nothing more
            self._count(
                "nvml_" + snake_case(type(exc).__name__),
                "NVML %s raised %s: %s; that value is absent (reported once per kind)",
                function,
                type(exc).__name__,
                exc,
            )
            return None

    def field(self, struct: Any, name: str) -> Any:
        """``struct.<name>`` of a structure NVML filled (pynvml decodes its text fields on access, strictly):
        its raw ``bytes`` when they are not UTF-8, counted as ``nvml_invalid_text``."""
        try:
            return getattr(struct, name)
        except UnicodeDecodeError as exc:
            self._count(
                "nvml_invalid_text", "NVML returned a %s that is not UTF-8: %r (reported once)", name, exc.object
            )
            return exc.object
