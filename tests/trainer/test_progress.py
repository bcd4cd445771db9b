"""The run's progress beside its checkpoints, and the steps a restart redoes, as a series."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from observe import catalog as c
from trainer.progress import PROGRESS_FILE, Progress, RunProgress, read_progress, write_progress

LABELS = {"run_id": "r1", "rank": "0", "local_rank": "0", "node": "n1"}


def series(progress: RunProgress) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(progress)
    return generate_latest(registry).decode()


def test_a_restart_adds_the_steps_done_past_its_checkpoint(tmp_path: Path) -> None:
    first = RunProgress(tmp_path, "r1", LABELS)
    for step in range(1, 18):
        first.completed(step)
    assert read_progress(tmp_path) == Progress("r1", 17, 0)
    second = RunProgress(tmp_path, "r1", LABELS)  # the restart: resumes from the checkpoint of step 15
    assert second.resumed(15) == 2
    assert read_progress(tmp_path) == Progress("r1", 15, 2)  # kept at once: a second restart adds to it
    third = RunProgress(tmp_path, "r1", LABELS)
    assert third.resumed(15) == 0 and third.steps_redone == 2
    line = f'{c.TRAIN_STEPS_REDONE.name}{{local_rank="0",node="n1",rank="0",run_id="r1"}} 2.0'
    assert line in series(third)


def test_another_runs_progress_is_not_this_ones(tmp_path: Path) -> None:
    write_progress(tmp_path, Progress("other", 90, 7))
    progress = RunProgress(tmp_path, "r1", LABELS)
    assert progress.resumed(10) == 0 and progress.steps_redone == 0


def test_an_unwritable_directory_costs_only_the_figure(tmp_path: Path, capsys, unwritable_dir: Path) -> None:
    progress = RunProgress(unwritable_dir, "r1", LABELS)
    progress.completed(1)
    progress.completed(2)
    err = capsys.readouterr().err
    assert err.count(f"cannot write {unwritable_dir / PROGRESS_FILE}") == 1
    assert "0.0" in series(progress).splitlines()[-1]
