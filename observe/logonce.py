"""Log once and count: the first occurrence of each kind of fault is logged, every one is counted.

The agent's collectors (process table, NVML, sampler sections) and the training exporter meet
faults that repeat every collection (a driver that lacks a function, an unreadable ``/proc``
entry, a failing scrape). The project's failure rule: such a fault is logged once and counted,
never raised into the loop it runs in. ``OnceLog`` is that rule in one place; the counts are what
``fsdp_node_agent_errors_total{kind}`` and ``fsdp_train_exporter_errors_total`` export.

Standard library only: a leaf module every package may import. Not locked: each instance is used
by the one thread that collects (a count read from another thread may be one behind).
"""

from __future__ import annotations

import logging
from collections import Counter


class OnceLog:
    """Counts faults by kind and logs the first of each kind.

    Args:
        logger: where the first occurrence of each kind is logged.
        counts: the counter to add to (default: a new one); share it to count into an existing
            ``errors`` counter.

    Attributes:
        counts: occurrences by kind (only those reported with ``count=True``).
    """

    def __init__(self, logger: logging.Logger, counts: Counter[str] | None = None) -> None:
        self.logger = logger
        self.counts: Counter[str] = Counter() if counts is None else counts
        self._seen: set[str] = set()

    def report(
        self,
        kind: str,
        message: str,
        *args: object,
        level: int = logging.WARNING,
        count: bool = True,
        exc_info: bool = False,
    ) -> bool:
        """Count one ``kind`` fault (unless ``count`` is false); log ``message % args`` the first time.

        Returns:
            Whether this was the first report of ``kind`` (and so was logged).
        """
        if count:
            self.counts[kind] += 1
        if kind in self._seen:
            return False
        self._seen.add(kind)
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True
