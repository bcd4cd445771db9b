"""A run's verdict: one word, the culprit ranks with where they run and what they did, one line for a
person, and a JSON object for a program (``fsdp-observe diagnose --json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: The verdicts. ``healthy``: moving (or finished, or paused in a checkpoint or validation that a
#: rank is doing); ``hang``: some ranks wait in a collective that others never entered (behind,
#: gone, or not answering); ``mismatch``: ranks entered different collectives at one sequence
#: number; ``stopped``: no progress and no rank in a collective (the stacks say where they are);
#: ``straggler``: moving, but one rank's compute per step stands out and the others wait for it.
VERDICTS: tuple[str, ...] = ("healthy", "hang", "mismatch", "stopped", "straggler")
#: Why a rank is a culprit. ``behind``: it has not entered the collective the others wait in;
#: ``mismatch``: it entered another op than the majority at the same sequence number; ``dead``: its
#: process is gone; ``unresponsive``: its process is alive but does not answer (its training thread
#: holds the GIL); ``unobserved``: it was not asked (not in the addresses given);
#: ``straggler``: its compute per step stands out.
KINDS: tuple[str, ...] = ("behind", "mismatch", "dead", "unresponsive", "unobserved", "straggler")


@dataclass(frozen=True)
class Culprit:
    """One culprit rank.

    Attributes:
        rank, kind: who, and why (``KINDS``). pod, node, gpu_index, gpu_uuid: where (``None`` unknown).
        pg, seq, op, shapes: the collective it has not entered, or entered alone (hang, mismatch).
        seconds: how long the others have waited (hang, mismatch) or its compute per step
            (straggler). waiting_ranks: the ranks blocked in that collective.
        median_compute_seconds, excess_seconds: a straggler's run median, and its excess per step.
        stack: its stack, innermost last, ``file:line in function: code`` lines.
        where: its innermost frame of the user's code (``file:line in function``).
        note: anything else worth a line (``its process is not running``).
    """

    rank: int | None
    kind: str
    pod: str | None = None
    node: str | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pg: str | None = None
    seq: int | None = None
    op: str | None = None
    shapes: list[list[int]] = field(default_factory=list)
    seconds: float | None = None
    waiting_ranks: list[int] = field(default_factory=list)
    median_compute_seconds: float | None = None
    excess_seconds: float | None = None
    stack: list[str] = field(default_factory=list)
    where: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Verdict:
    """The verdict on one run.

    Attributes:
        verdict: one of ``VERDICTS``. run_id: the run. summary: one line for a person.
        culprits: the culprit ranks, most telling first. details: further lines (who waits, paused
        phases, ranks not seen). ranks_seen / world_size: how many ranks answered, of how many.
    """

    verdict: str
    summary: str
    run_id: str = ""
    culprits: list[Culprit] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    ranks_seen: int = 0
    world_size: int | None = None

    @property
    def culprit_ranks(self) -> list[int]:
        """The culprits' ranks (known ones), in order."""
        return [c.rank for c in self.culprits if c.rank is not None]

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``diagnose --json`` prints: ``verdict``, ``culprit_ranks``, ``culprits``
        (each with pod, node, GPU, collective, seconds, waiting ranks, stack), ``summary`` ..."""
        return {
            "verdict": self.verdict,
            "culprit_ranks": self.culprit_ranks,
            "summary": self.summary,
            "run_id": self.run_id,
            "culprits": [asdict(c) for c in self.culprits],
            "details": list(self.details),
            "ranks_seen": self.ranks_seen,
            "world_size": self.world_size,
        }


def ranks_text(ranks: list[int], most: int = 8, spans: int = 3) -> str:
    """``rank 0``, ``ranks 0, 2, 3``; past ``most``, counted with their spans of consecutive ranks:
    ``8,191 ranks (0–5119, 5121–8191)`` (so a rank left out of the crowd is not read into it);
    past ``spans`` spans, the first ones and how many more: ``600 ranks (0–99, 101–199, 201–299, 3 more spans)``.
    """
    ranks = sorted(set(ranks))
    if not ranks:
        return "no rank"
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) <= most:
        return "ranks " + ", ".join(str(r) for r in ranks)
    runs: list[list[int]] = [[ranks[0], ranks[0]]]
    for r in ranks[1:]:
        if r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    shown = [f"{a}–{b}" if a != b else str(a) for a, b in runs[:spans]]
    if len(runs) > spans:
        shown.append(f"{len(runs) - spans} more spans")
    return f"{len(ranks):,} ranks ({', '.join(shown)})"


def seconds_text(seconds: float | None) -> str:
    """``37 s``, ``4 min 10 s``, ``313 ms``."""
    if seconds is None:
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"
