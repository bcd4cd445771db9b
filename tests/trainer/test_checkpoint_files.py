"""Checkpoint directories: completeness, newest, pruning, ``--resume`` modes, the state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.errors import UserError
from trainer.runspec.checkpoint_files import (
    DCP_METADATA,
    STATE_FILE,
    TrainerState,
    check_compatible,
    damage,
    file_sizes,
    list_checkpoints,
    newest_complete,
    prune,
    resolve_resume,
    resume_candidates,
    step_dir,
)


def state(step: int) -> TrainerState:
    return TrainerState(
        step=step,
        batches_consumed=2 * step,
        scheduler={"last_epoch": step},
        layout={"seed": 0},
        run_id="run-1",
        run_started=100.0,
        productive_seconds=1.5,
        reason="periodic",
        saved_at=200.0,
    )


def make(root: Path, step: int, complete: bool = True) -> Path:
    """A checkpoint directory as a save leaves it: two shards and DCP's index, then trainer.json
    recording their sizes."""
    path = step_dir(root, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard-0" * 100)
    (path / "__1_0.distcp").write_bytes(b"shard-1" * 100)
    (path / DCP_METADATA).write_bytes(b"index")
    if complete:
        saved = state(step)
        saved.files = file_sizes(path)
        saved.write(path)
    return path


def test_state_round_trips_and_is_written_atomically(tmp_path: Path) -> None:
    state(7).write(tmp_path)
    assert TrainerState.read(tmp_path) == state(7)
    assert not (tmp_path / (STATE_FILE + ".tmp")).exists()


def test_newest_complete_ignores_interrupted_saves(tmp_path: Path) -> None:
    make(tmp_path, 5)
    make(tmp_path, 10)
    make(tmp_path, 15, complete=False)  # a save cut short by SIGKILL
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5, 10, 15]
    assert newest_complete(tmp_path) == step_dir(tmp_path, 10)
    assert newest_complete(tmp_path / "missing") is None


def test_prune_keeps_the_newest_and_drops_leftovers(tmp_path: Path) -> None:
    for step in (5, 10, 20):
        make(tmp_path, step)
    make(tmp_path, 15, complete=False)
    removed = prune(tmp_path, keep=2, newest_step=20)
    assert sorted(p.name for p, _ in removed) == ["step-00000005", "step-00000015"]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10, 20]


def harm(path: Path) -> None:
    """Cut a checkpoint's DCP index to half, as a copy cut short does."""
    meta = path / DCP_METADATA
    meta.write_bytes(meta.read_bytes()[:2])


def test_retention_counts_only_verified_checkpoints_and_keeps_the_good_one(tmp_path: Path) -> None:
    """The probe's case: step 30 damaged, step 28 good, step 32 just saved, keep 2. Before: 30 (damaged)
    and 32 were kept and the good 28 deleted; with both 28 and 30 damaged, 30 was kept."""
    make(tmp_path, 28)
    harm(make(tmp_path, 30))
    make(tmp_path, 32)
    removed = prune(tmp_path, keep=2, newest_step=32)
    assert [(p.name, why.split(" (")[0]) for p, why in removed] == [("step-00000030", "damaged")]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [28, 32]


def test_the_last_good_checkpoint_survives_any_number_of_damaged_newer_ones(tmp_path: Path) -> None:
    make(tmp_path, 10)
    for step in (12, 14, 16):
        harm(make(tmp_path, step))
    assert prune(tmp_path, keep=1, newest_step=16) == []  # damaged ones newer than it: kept as evidence
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10, 12, 14, 16]
    assert resolve_resume(str(tmp_path), "auto") == step_dir(tmp_path, 10)


def test_checkpoints_of_which_none_can_be_used_stop_the_run_naming_them(tmp_path: Path) -> None:
    """Before: every checkpoint damaged meant training silently from step 0 and exit status 0."""
    harm(make(tmp_path, 28))
    harm(make(tmp_path, 30))
    make(tmp_path, 32, complete=False)  # an interrupted save is no checkpoint: not named
    with pytest.raises(UserError) as caught:
        resolve_resume(str(tmp_path), "auto")
    text = str(caught.value)
    assert text.startswith("--resume: ") and "\n" not in text
    assert "step-00000030 (.metadata is 2 bytes, 5 bytes when saved)" in text and "step-00000028 (" in text
    assert "step-00000032" not in text and "a new --checkpoint-dir to start over" in text
    assert "pass --resume never to start over from step 0 on purpose" in text
    with pytest.raises(UserError, match="none can be resumed"):
        resolve_resume(str(tmp_path), "latest")
    assert resolve_resume(str(tmp_path), "never") is None  # the flag the error names starts over


@pytest.mark.parametrize("mode", ["auto", "latest"])
def test_resume_modes_pick_the_newest(mode: str, tmp_path: Path) -> None:
    make(tmp_path, 5)
    make(tmp_path, 10)
    assert resolve_resume(str(tmp_path), mode) == step_dir(tmp_path, 10)
    assert resolve_resume(str(tmp_path), "never") is None


def test_resume_auto_starts_fresh_but_latest_insists(tmp_path: Path) -> None:
    assert resolve_resume(str(tmp_path), "auto") is None
    with pytest.raises(UserError, match="--resume: no complete checkpoint in"):
        resolve_resume(str(tmp_path), "latest")


def test_resume_path_must_be_a_complete_checkpoint(tmp_path: Path) -> None:
    assert resolve_resume(None, str(make(tmp_path, 5))) == step_dir(tmp_path, 5)
    with pytest.raises(UserError, match="is not a complete checkpoint"):
        resolve_resume(None, str(make(tmp_path, 6, complete=False)))
    with pytest.raises(UserError, match="is not a checkpoint directory"):
        resolve_resume(None, str(tmp_path / "nope"))


def test_unknown_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text('{"format": 99}')
    with pytest.raises(UserError, match="checkpoint format 99"):
        TrainerState.read(tmp_path)


def test_compatibility_names_the_flag_and_skips_unknowns(tmp_path: Path) -> None:
    saved = {"world_size": 2, "seq_len": 64, "batch_size": 2}
    check_compatible(tmp_path, saved, {"world_size": None, "seq_len": 64, "batch_size": 2})
    with pytest.raises(UserError, match="--seq-len: checkpoint .* written with seq_len 64, this run has 128"):
        check_compatible(tmp_path, saved, {"seq_len": 128})


def test_a_damaged_newest_checkpoint_is_skipped_with_its_reason(tmp_path: Path) -> None:
    make(tmp_path, 30)
    newest = make(tmp_path, 40)
    with open(newest / "__1_0.distcp", "r+b") as f:
        f.truncate(350)  # half the shard, as a copy cut short
    skipped: list[tuple[str, str]] = []
    assert resolve_resume(str(tmp_path), "auto", lambda p, why: skipped.append((p.name, why))) == step_dir(tmp_path, 30)
    assert skipped == [("step-00000040", "__1_0.distcp is 350 bytes, 700 bytes when saved")]
    assert resolve_resume(str(tmp_path), "latest") == step_dir(tmp_path, 30)
    with pytest.raises(UserError, match="is damaged: __1_0.distcp is 350 bytes"):
        resolve_resume(None, str(newest))


@pytest.mark.parametrize(
    "harm, why",
    [
        (lambda p: (p / DCP_METADATA).unlink(), "its .metadata index is missing"),
        (lambda p: (p / DCP_METADATA).write_bytes(b""), "its .metadata index is empty"),
        (lambda p: (p / "__0_0.distcp").unlink(), "__0_0.distcp is missing"),
        (lambda p: (p / STATE_FILE).write_text('{"step": 4'), "cannot read"),
    ],
)
def test_each_kind_of_damage_is_named(tmp_path: Path, harm, why: str) -> None:
    path = make(tmp_path, 10)
    assert damage(path) is None
    harm(path)
    assert why in damage(path)
    assert resume_candidates(tmp_path) == []


def test_old_checkpoints_without_recorded_sizes_are_checked_for_empty_shards(tmp_path: Path) -> None:
    path = step_dir(tmp_path, 5)
    path.mkdir()
    (path / DCP_METADATA).write_bytes(b"index")
    (path / "__0_0.distcp").write_bytes(b"")
    state(5).write(path)  # files={} as before this was recorded
    assert damage(path) == "__0_0.distcp is empty"
    (path / "__0_0.distcp").write_bytes(b"x")
    assert damage(path) is None
