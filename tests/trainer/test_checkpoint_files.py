"""Checkpoint directories: completeness, newest, pruning, ``--resume`` modes, the state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from observe.errors import UserError
from trainer.runspec.checkpoint_files import (
    STATE_FILE,
    TrainerState,
    check_compatible,
    list_checkpoints,
    newest_complete,
    prune,
    resolve_resume,
    step_dir,
)


def state(step: int) -> TrainerState:
    return TrainerState(step=step, batches_consumed=2 * step, scheduler={"last_epoch": step}, layout={"seed": 0},
                        run_id="run-1", run_started=100.0, productive_seconds=1.5, reason="periodic", saved_at=200.0)


def make(root: Path, step: int, complete: bool = True) -> Path:
    path = step_dir(root, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(b"shard")
    if complete:
        state(step).write(path)
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
    assert sorted(p.name for p in removed) == ["step-00000005", "step-00000015"]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10, 20]


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
