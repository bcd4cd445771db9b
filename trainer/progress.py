"""How far a run got, kept beside its checkpoints, and the steps a restart makes it redo.

Rank 0 writes ``DIR/progress.json`` after every optimizer step (about 60 bytes, to a temporary
name then ``os.replace``): the run's id, the last step completed and the steps redone so far. A
run resumed from the checkpoint of step S after an attempt had reached step P > S redoes P - S
steps; rank 0 adds them to the total, writes it back at once (a second restart before the next
step keeps it) and serves it as ``fsdp_train_steps_redone_total`` on its endpoint: a counter
across restarts, in steps, beside ``fsdp_train_goodput_ratio`` (which folds the same loss into
seconds). A file that cannot be written costs that figure only: it is said once on stderr and
training goes on.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily

from observe.catalog import TRAIN_STEPS_REDONE

PROGRESS_FILE = "progress.json"


@dataclass
class Progress:
    """What ``progress.json`` holds: ``run_id``, the last ``step`` completed, ``steps_redone`` in total."""

    run_id: str
    step: int
    steps_redone: int = 0


def read_progress(root: str | Path) -> Progress | None:
    """``root/progress.json``, or ``None`` when it is missing or unreadable."""
    try:
        data = json.loads((Path(root) / PROGRESS_FILE).read_text())
        return Progress(str(data["run_id"]), int(data["step"]), int(data.get("steps_redone", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_progress(root: str | Path, progress: Progress) -> None:
    """Write ``root/progress.json`` atomically.

    Raises:
        OSError: it cannot be written.
    """
    tmp = Path(root) / (PROGRESS_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(progress)))
    os.replace(tmp, Path(root) / PROGRESS_FILE)


class RunProgress:
    """Rank 0's record of the run's progress, and its ``fsdp_train_steps_redone_total``.

    Args:
        root: the checkpoint directory.
        run_id: the run's id (a file of another run is not this one's progress).
        labels: the constant labels of the rank's series (``run_id``, ``rank``, ...).
    """

    def __init__(self, root: str | Path, run_id: str, labels: dict[str, str]) -> None:
        self.root, self.run_id, self.labels = Path(root), run_id, dict(labels)
        saved = read_progress(self.root)
        self.steps_redone = saved.steps_redone if saved is not None and saved.run_id == run_id else 0
        self._reached = saved.step if saved is not None and saved.run_id == run_id else None
        self._broken = False

    def resumed(self, step: int) -> int:
        """The run continues from the checkpoint of ``step``: add the steps an earlier attempt had
        completed past it; return how many that was."""
        redone = max(0, (self._reached or 0) - step)
        self.steps_redone += redone
        self.completed(step)
        return redone

    def completed(self, step: int) -> None:
        """An optimizer step completed (or, from ``resumed``, the step the run continues from)."""
        if self._broken:
            return
        try:
            write_progress(self.root, Progress(self.run_id, step, self.steps_redone))
        except OSError as exc:
            self._broken = True
            print(
                f"progress: cannot write {self.root / PROGRESS_FILE} ({exc.strerror}); steps redone after a "
                "restart will not be counted",
                file=sys.stderr,
                flush=True,
            )

    def collect(self) -> Iterator[CounterMetricFamily]:
        """``fsdp_train_steps_redone_total`` with the rank's labels (a prometheus_client collector)."""
        family = CounterMetricFamily(TRAIN_STEPS_REDONE.name, TRAIN_STEPS_REDONE.help, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), self.steps_redone)
        yield family
