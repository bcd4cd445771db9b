"""Checkpoint directories on disk: names, completeness, the trainer state file, resume checks.

Torch-free, so ``fsdp-observe train`` can check ``--resume`` before any rank starts.

Layout of ``--checkpoint-dir DIR``::

    DIR/step-00000040/         one checkpoint per saved step
        __0_0.distcp ...       torch.distributed.checkpoint shards (model, optimizer, RNG)
        .metadata              DCP's index, written by rank 0 after every rank's shards
        trainer.json           step, data position, scheduler, run clock; written last

A checkpoint is *complete* when ``trainer.json`` exists: rank 0 writes it (to a temporary
name, then ``os.replace``) only after ``torch.distributed.checkpoint.save`` has returned, which
happens after every rank's shards and the metadata are on disk. A save cut short by a crash
or SIGKILL leaves a directory without it, which resume ignores and the next save removes.

A complete checkpoint can still be *damaged* afterwards (a disk error, a copy cut short, a file
deleted by hand): ``damage`` tells why, without torch, from what ``trainer.json`` recorded at
save time (every file's size) and the DCP index ``.metadata``. ``--resume auto`` and ``latest``
skip damaged checkpoints (``resume_candidates``) and the trainer falls back to the next older one
when loading fails anyway (a shard overwritten in place keeps its size). A directory that holds
complete checkpoints none of which can be used is an error, not a fresh start: ``--resume auto``
stops with one line naming them; a new ``--checkpoint-dir`` starts over from step 0 on purpose.

Retention (``prune``) counts only *verified* checkpoints, checked as resume checks them (complete
and undamaged): it keeps the newest ``keep`` of them, so a damaged one never takes a good one's
place and the last good one is never deleted; a damaged checkpoint older than the newest verified
one is removed (it can never be resumed from), a newer damaged one is kept as evidence.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from observe.errors import UserError

STATE_FILE = "trainer.json"
#: The index torch.distributed.checkpoint writes last (rank 0), after every rank's shards.
DCP_METADATA = ".metadata"
FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d{8})$")

#: Settings that fix which tokens every rank sees at every step. A resume is exact only when
#: they are unchanged, so a checkpoint written under other values is refused, naming the flag.
LAYOUT_FLAGS: dict[str, str] = {
    "world_size": "--nproc-per-node",
    "seq_len": "--seq-len",
    "batch_size": "--batch-size",
    "grad_accum_steps": "--grad-accum-steps",
    "seed": "--seed",
    "model": "--model/--preset",
    "tokenizer": "--tokenizer",
    "data": "--data",
    "val_fraction": "--val-fraction",
}


def step_dir(root: str | Path, step: int) -> Path:
    """``root/step-NNNNNNNN`` (eight digits, so names sort by step)."""
    return Path(root) / f"step-{step:08d}"


def is_complete(path: Path) -> bool:
    """Whether the checkpoint directory ``path`` holds its ``trainer.json`` (written last)."""
    return (path / STATE_FILE).is_file()


def verified(path: Path) -> bool:
    """Whether ``path`` is a checkpoint resume would take: complete, and no damage shows (``damage``)."""
    return is_complete(path) and damage(path) is None


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """All ``step-*`` directories under ``root`` as ``(step, path)``, oldest first (complete or not)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return sorted(found)


def newest_complete(root: str | Path) -> Path | None:
    """The complete checkpoint with the highest step under ``root``, or ``None``."""
    for _, path in reversed(list_checkpoints(root)):
        if is_complete(path):
            return path
    return None


@dataclass
class TrainerState:
    """What ``trainer.json`` holds besides the DCP shards.

    Attributes:
        step: optimizer steps completed when the checkpoint was taken.
        batches_consumed: micro-batches each rank has drawn from its data iterator.
        blocks_before: blocks of the global stream read before this world size's ranks started
            counting ``batches_consumed`` (0 unless the run was resumed at another world size):
            the run has read ``blocks_before + batches_consumed * batch_size * world_size`` blocks.
        scheduler: ``LambdaLR.state_dict()`` (plain numbers).
        layout: the values of ``LAYOUT_FLAGS`` the run used (see ``layout_fingerprint``).
        run_id: the run's ``run_id`` label.
        run_started: Unix time at which the run's first attempt started (goodput's wall clock).
        productive_seconds: step time of the steps up to ``step`` (goodput's numerator); steps
            done after this checkpoint by an attempt that then failed are not in it.
        reason: why it was saved: ``periodic``, ``final``, ``sigterm`` or ``sigint`` (a stop on that signal).
        saved_at: Unix time of the save.
        save_seconds: how long the DCP save took.
        files: name -> size in bytes of every file the save wrote (``trainer.json`` aside), as
            rank 0 saw them when the save finished; empty for checkpoints written before it was kept.
        format: version of this file's layout.
    """

    step: int
    batches_consumed: int
    scheduler: dict
    layout: dict
    run_id: str
    run_started: float
    productive_seconds: float
    reason: str
    saved_at: float
    save_seconds: float = 0.0
    files: dict[str, int] = field(default_factory=dict)
    blocks_before: int = 0
    format: int = FORMAT_VERSION

    def write(self, path: Path) -> None:
        """Write ``path/trainer.json`` atomically (temporary file, then ``os.replace``)."""
        tmp = path / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path / STATE_FILE)

    @classmethod
    def read(cls, path: Path) -> TrainerState:
        """Read ``path/trainer.json``.

        Raises:
            UserError: the file is missing, unreadable or of an unknown format (``--resume``).
        """
        try:
            data = json.loads((path / STATE_FILE).read_text())
        except FileNotFoundError:
            raise UserError(
                "--resume",
                f"{str(path)!r} is not a complete checkpoint (no {STATE_FILE})",
                "pass a step-NNNNNNNN directory whose save finished, or --resume auto",
            ) from None
        except (OSError, ValueError) as exc:
            raise UserError(
                "--resume", f"cannot read {path / STATE_FILE}: {exc}", "pass another checkpoint or --resume never"
            ) from None
        if data.get("format") != FORMAT_VERSION:
            raise UserError(
                "--resume",
                f"{path} has checkpoint format {data.get('format')!r}, this trainer reads {FORMAT_VERSION}",
                "resume with the trainer that wrote it",
            )
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def file_sizes(path: Path) -> dict[str, int]:
    """Name -> size of the files in checkpoint directory ``path`` (``trainer.json`` and temporaries aside)."""
    return {
        p.name: p.stat().st_size
        for p in sorted(path.iterdir())
        if p.is_file() and p.name != STATE_FILE and not p.name.endswith(".tmp")
    }


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def damage(path: Path) -> str | None:
    """Why the complete checkpoint ``path`` cannot be loaded, or ``None`` when nothing shows.

    Checked without torch: ``trainer.json`` readable and of this format; DCP's ``.metadata``
    present and not empty; every file ``trainer.json`` recorded present with its recorded size
    (or, for older checkpoints, no empty shard). Damage that keeps sizes (bytes overwritten in
    place) shows only when loading; the trainer then falls back too.
    """
    try:
        state = TrainerState.read(path)
    except UserError as exc:
        return exc.problem
    meta = path / DCP_METADATA
    if not meta.is_file() or meta.stat().st_size == 0:
        return f"its {DCP_METADATA} index is {'empty' if meta.is_file() else 'missing'}"
    have = file_sizes(path)
    for name, size in sorted(state.files.items()):
        if name not in have:
            return f"{name} is missing"
        if have[name] != size:
            return f"{name} is {_mb(have[name])}, {_mb(size)} when saved"
    empty = [name for name, size in have.items() if size == 0 and name.endswith(".distcp")]
    return f"{empty[0]} is empty" if empty else None


def resume_candidates(root: str | Path, on_damaged: Callable[[Path, str], None] | None = None) -> list[Path]:
    """Complete, undamaged checkpoints under ``root``, newest first (what ``--resume auto`` tries).

    Args:
        on_damaged: called with each damaged checkpoint newer than the first usable one, and why.
    """
    out: list[Path] = []
    for _, path in reversed(list_checkpoints(root)):
        if not is_complete(path):
            continue
        why = damage(path)
        if why is None:
            out.append(path)
        elif not out and on_damaged is not None:
            on_damaged(path, why)
    return out


def data_digest(files: list[Path]) -> str:
    """A short digest of the corpus: sorted paths and sizes (contents are not read)."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{path}\0{path.stat().st_size}\n".encode())
    return f"{len(files)} files, sha256 {h.hexdigest()[:16]}"


def layout_fingerprint(values: dict) -> dict:
    """Keep only the ``LAYOUT_FLAGS`` keys of ``values`` (their order fixed)."""
    return {key: values.get(key) for key in LAYOUT_FLAGS}


def check_compatible(path: Path, saved: dict, current: dict) -> None:
    """Refuse a resume whose data layout differs from the checkpoint's.

    Args:
        path: the checkpoint (for the message).
        saved: its ``TrainerState.layout``.
        current: this run's ``layout_fingerprint``; a ``None`` value is not checked (unknown
            here, e.g. the world size before torchrun starts on several nodes).

    Raises:
        UserError: naming the first flag that differs, the saved and the current value.
    """
    for key, flag in LAYOUT_FLAGS.items():
        have = current.get(key)
        if have is None:
            continue
        if saved.get(key) != have:
            resharded = (
                ", --resume-any-world-size to continue it resharded (not bit-exact)," if key == "world_size" else ""
            )
            raise UserError(
                flag,
                f"checkpoint {path.name} was written with {key} {saved.get(key)!r}, this run "
                f"has {have!r}, so it cannot continue exactly",
                f"use the checkpoint's value ({saved.get(key)!r}) to continue that run{resharded} or a "
                "new --checkpoint-dir to start another",
            )


#: How to go on when checkpoints exist but none loads: the fix of that one-line error.
START_OVER = (
    "restore one of them, or pass --resume never to start over from step 0 on purpose (a save replaces the "
    "damaged checkpoint of its step), or move them away or pass a new --checkpoint-dir to start over"
)


def resolve_resume(
    checkpoint_dir: str | None, resume: str, on_damaged: Callable[[Path, str], None] | None = None
) -> Path | None:
    """The checkpoint to resume from, per ``--resume``.

    Args:
        checkpoint_dir: ``--checkpoint-dir`` (may be ``None``).
        resume: ``auto`` (newest complete, undamaged checkpoint if any), ``latest`` (the same,
            required), ``never``, or the path of one checkpoint directory.
        on_damaged: called with each damaged checkpoint skipped for an older one, and why.

    Raises:
        UserError: ``latest`` with no usable checkpoint, or a path that is not one (or damaged).
    """
    if resume == "never":
        return None
    if resume in ("auto", "latest"):
        candidates = resume_candidates(checkpoint_dir, on_damaged) if checkpoint_dir else []
        if not candidates and checkpoint_dir and (unusable := _damaged(checkpoint_dir)):
            raise UserError(
                "--resume",
                f"{checkpoint_dir!r} holds checkpoints but none can be resumed: {'; '.join(unusable)}",
                START_OVER,
            )
        if not candidates and resume == "latest":
            where = repr(checkpoint_dir) if checkpoint_dir else "(no --checkpoint-dir given)"
            raise UserError(
                "--resume",
                f"no complete checkpoint in {where}",
                "pass --checkpoint-dir holding step-* checkpoints, or --resume auto",
            )
        return candidates[0] if candidates else None
    path = Path(resume)
    if not path.is_dir():
        raise UserError(
            "--resume",
            f"{resume!r} is not a checkpoint directory",
            "pass a step-NNNNNNNN directory, or auto, latest or never",
        )
    if not is_complete(path):
        raise UserError(
            "--resume",
            f"{resume!r} is not a complete checkpoint (no {STATE_FILE})",
            "pass a checkpoint whose save finished, or --resume auto",
        )
    if (why := damage(path)) is not None:
        raise UserError(
            "--resume",
            f"checkpoint {resume!r} is damaged: {why}",
            "pass an older checkpoint, or --resume auto to take the newest undamaged one",
        )
    return path


def _damaged(root: str | Path) -> list[str]:
    """``step-NNNNNNNN (why)`` for every complete checkpoint under ``root`` that is damaged, newest first."""
    return [f"{p.name} ({why})" for _, p in reversed(list_checkpoints(root)) if is_complete(p) and (why := damage(p))]


def prune(root: str | Path, keep: int, newest_step: int) -> list[tuple[Path, str]]:
    """Apply retention (module docstring): keep the ``keep`` newest verified checkpoints (all when
    ``keep`` is 0 or less), remove older verified ones, damaged ones older than the newest verified
    one, and incomplete ones older than ``newest_step`` (left by interrupted saves).

    Returns:
        ``(path, why)`` for each directory removed. Rank 0 only.
    """
    entries = list_checkpoints(root)
    good = [(step, p) for step, p in entries if verified(p)]
    newest_good = good[-1][0] if good else None
    doomed = [(p, f"older than the newest {keep} verified") for _, p in (good[:-keep] if keep > 0 else [])]
    for step, path in entries:
        if not is_complete(path):
            if step < newest_step:
                doomed.append((path, "an interrupted save"))
        elif newest_good is not None and step < newest_good and (why := damage(path)) is not None:
            doomed.append((path, f"damaged ({why}); {step_dir(root, newest_good).name} is newer and verified"))
    for path, _ in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
