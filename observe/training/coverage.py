"""What each entry point gives: the one source of the README's entry-point table.

Each row names the series it stands for (``observe.catalog`` names) and, per entry point, a mark:
exact, approximate (a heuristic) or absent, with a short note. ``markdown()`` renders the table the
README carries (a test keeps the two equal); the end-to-end runs of each entry point check their
scrapes against ``expected(entry)``: every series of a row marked exact or approximate without a
condition is there, every series of a row marked absent is not. A mark whose figure depends on
what the script does (``conditional``: it evaluates, it clips, it passes ``model=``) is not checked
for presence, only shown.

Entry points are named as ``fsdp_train_info{instrumentation}`` names them: ``trainer``, ``api``
(``TrainingMetrics``), ``hf``, ``lightning``, ``auto`` (zero code).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from observe import catalog as c

#: Entry points in the table's column order, with their column headings.
ENTRY_POINTS: dict[str, str] = {
    "trainer": "our trainer",
    "api": "`TrainingMetrics`",
    "hf": "Hugging Face callback",
    "lightning": "Lightning callback",
    "auto": "zero code (plain loop / Fabric)",
}


@dataclass(frozen=True)
class Mark:
    """One cell: how an entry point gives a row's series.

    ``kind``: ``exact`` (✓), ``approximate`` (~, a heuristic) or ``absent`` (blank: the series is
    not exported, never 0). ``note``: what the cell adds in words. ``conditional``: the series is
    there only when the script does something (so end-to-end runs do not check its presence).
    """

    kind: Literal["exact", "approximate", "absent"]
    note: str = ""
    conditional: bool = False

    def cell(self) -> str:
        """The Markdown cell text: ``✓``/``~`` and the note, or empty when absent."""
        if self.kind == "absent":
            return self.note
        symbol = "✓" if self.kind == "exact" else "~"
        return f"{symbol} {self.note}".rstrip()


def exact(note: str = "", when: bool = False) -> Mark:
    """An exact figure (``when``: only when the script does what ``note`` says)."""
    return Mark("exact", note, when)


def approx(note: str = "", when: bool = False) -> Mark:
    """A heuristic figure (``when``: only when the script does what ``note`` says)."""
    return Mark("approximate", note, when)


ABSENT = Mark("absent")


@dataclass(frozen=True)
class Row:
    """One line of the table: a label, the series it stands for, a mark per entry point."""

    label: str
    series: tuple[str, ...]
    marks: dict[str, Mark]


def _row(label: str, series: tuple[c.Metric, ...], *marks: Mark) -> Row:
    return Row(label, tuple(m.name for m in series), dict(zip(ENTRY_POINTS, marks, strict=True)))


TABLE: tuple[Row, ...] = (
    _row(
        "steps, step time, last-step time, restarts, goodput, RSS",
        (
            c.TRAIN_STEPS,
            c.TRAIN_STEP_SECONDS,
            c.TRAIN_LAST_STEP_TIMESTAMP,
            c.TRAIN_RESTARTS,
            c.TRAIN_GOODPUT,
            c.TRAIN_PROCESS_RESIDENT_MEMORY_PEAK,
        ),
        exact(),
        exact(),
        exact(),
        exact(),
        exact(),
    ),
    _row(
        "loss",
        (c.TRAIN_LOSS,),
        exact("global, token-weighted"),
        exact("per rank (`global_loss=True`: global)", when=True),
        exact("as logged (mean of rank means)"),
        exact("per rank"),
        approx("sum of `backward()` scalars"),
    ),
    _row(
        "grad norm",
        (c.TRAIN_GRAD_NORM,),
        exact(),
        exact("if given", when=True),
        exact("as logged"),
        approx("under the variable, when clipping", when=True),
        approx("`clip_grad_norm_`'s value", when=True),
    ),
    _row(
        "learning rate",
        (c.TRAIN_LEARNING_RATE,),
        exact(),
        exact("with `optimizer=`", when=True),
        exact(),
        exact(),
        exact(),
    ),
    _row(
        "data wait, samples, labelled tokens, tokens/s",
        (c.TRAIN_DATA_WAIT_SECONDS, c.TRAIN_SAMPLES, c.TRAIN_LABELLED_TOKENS, c.TRAIN_TOKENS_PER_SECOND),
        exact(),
        exact("with `batches()`", when=True),
        exact("from its DataLoader"),
        exact(),
        exact(
            "from `DataLoader` batches drawn with gradients on (your own validation under "
            "`no_grad`/`inference_mode` is left out)"
        ),
    ),
    _row(
        "planned steps (progress, ETA)",
        (c.TRAIN_PLANNED_STEPS,),
        exact(),
        exact("if given", when=True),
        exact(),
        exact(),
        ABSENT,
    ),
    _row(
        "FLOPs per token, MFU (on a known GPU)",
        (c.TRAIN_FLOPS_PER_TOKEN,),
        exact(),
        exact("with `model=`", when=True),
        exact(),
        exact(),
        ABSENT,
    ),
    _row(
        "phases",
        (c.TRAIN_PHASE, c.TRAIN_PHASE_SECONDS),
        exact("all"),
        exact("with `phase()`"),
        exact("all"),
        exact("loading, training, validating, finished"),
        exact("loading, training, finished"),
    ),
    _row(
        "validation loss",
        (c.TRAIN_VALIDATION_LOSS,),
        exact(when=True),
        exact("`validation()`", when=True),
        exact("`eval_loss`", when=True),
        exact("a logged `val_loss`", when=True),
        ABSENT,
    ),
    _row(
        "checkpoint times",
        (c.TRAIN_CHECKPOINT_SAVE_SECONDS,),
        exact(when=True),
        exact('`phase("checkpointing")`', when=True),
        exact(when=True),
        ABSENT,
        ABSENT,
    ),
    _row(
        "global tokens/s (rank 0)",
        (c.TRAIN_GLOBAL_TOKENS_PER_SECOND,),
        exact(when=True),
        exact("with `global_loss=True`", when=True),
        ABSENT,
        ABSENT,
        ABSENT,
    ),
)


def markdown() -> str:
    """The table as the README carries it (a heading row, a rule, a line per row; ``\\n``-ended)."""
    lines = [
        "| series | " + " | ".join(ENTRY_POINTS.values()) + " |",
        "|---|" + "---|" * len(ENTRY_POINTS),
    ]
    for row in TABLE:
        cells = [row.marks[e].cell() for e in ENTRY_POINTS]
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def expected(entry: str) -> tuple[set[str], set[str]]:
    """The series ``entry`` must export and must not, by the table's unconditional marks.

    Returns:
        ``(present, absent)``: series names (``observe.catalog``; a histogram by its base name).

    Raises:
        KeyError: ``entry`` is not one of ``ENTRY_POINTS``.
    """
    present: set[str] = set()
    absent: set[str] = set()
    for row in TABLE:
        mark = row.marks[entry]
        if mark.conditional:
            continue
        (absent if mark.kind == "absent" else present).update(row.series)
    return present, absent
