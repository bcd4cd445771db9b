"""What the demo's TUI follows: its own run only, and its training process's end.

Real HTTP endpoints (``tests.support.fleet``) and real processes; the TUI's screens are drawn from
the snapshots these sources produce.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from observe import demo
from observe.sources.direct import DirectSource, Endpoint
from observe.sources.view import ClusterSnapshot
from observe.tui.screens.run import no_run_lines
from tests.support.fleet import RecordedFleet, trainer_exposition
from tests.support.tui import GPU0


def text(lines) -> str:
    return "\n".join("".join(piece[0] for piece in line) for line in lines)


def test_a_source_that_follows_one_run_never_shows_another() -> None:
    """Before: another job's run on port 9500 was shown as the demo's run."""
    fleet = RecordedFleet()
    try:
        foreign = fleet.trainer("foreign", trainer_exposition(0, "vm", GPU0, 0.5, 0.02, run_id="someone-else"))
        ours = fleet.trainer("ours", trainer_exposition(1, "vm", GPU0, 0.5, 0.02, run_id="demo-1"))
        source = DirectSource([], [Endpoint(foreign), Endpoint(ours)], timeout=1.0, run_id="demo-1")
        snapshot = asyncio.run(source.cycle(None, 2.0))
        source.close()
        (run,) = snapshot.runs
        assert run.run_id == "demo-1" and [r.rank for r in run.ranks] == [1]
        (error,) = [e for e in snapshot.errors if foreign in e]
        assert "answers for run 'someone-else', not 'demo-1': another process holds this port" in error
        alone = DirectSource([], [Endpoint(foreign)], timeout=1.0, run_id="demo-1")
        nothing = asyncio.run(alone.cycle(None, 2.0))
        alone.close()
        assert nothing.runs == () and "someone-else" not in text(no_run_lines(nothing, 200)).replace(
            "'someone-else'", ""
        )  # named in the error only, never as the run
    finally:
        fleet.close()


@dataclass
class _Run:
    """What ``RunWatch`` reads of the demo's ``Supervised``: its process."""

    proc: subprocess.Popen


class _Empty:
    description = "1 agent, 2 trainer endpoints"

    async def cycle(self, focus, deadline) -> ClusterSnapshot:
        return ClusterSnapshot(time_unix=1.0, source=self.description, errors=("trainer x: unreachable",), trainers=2)

    def close(self) -> None:
        pass


def test_a_training_that_exited_early_is_said_on_every_screen(tmp_path: Path) -> None:
    """Before: both ranks 'unreachable' indefinitely, no sign the demo's training had exited."""
    log = tmp_path / "train.log"
    log.write_text(
        "W0101 some torch warning\nerror: --metrics-port: port 9500 on 127.0.0.1 is already in use; "
        "stop what holds it\nTraceback (most recent call last):\n  ...\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(2)"])
    watch = demo.RunWatch(_Empty(), _Run(proc), log)  # type: ignore[arg-type]
    proc.wait()
    snapshot = asyncio.run(watch.cycle(None, 1.0))
    assert snapshot.errors[0] == (
        f"training exited with status 2: error: --metrics-port: port 9500 on 127.0.0.1 is "
        f"already in use; stop what holds it (all its output: {log})"
    )
    assert snapshot.errors[1:] == ("trainer x: unreachable",)
    shown = text(no_run_lines(snapshot, 300))
    assert "the training process exited" in shown and "status 2: error: --metrics-port" in shown


def test_a_running_or_finished_training_adds_nothing(tmp_path: Path) -> None:
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert demo.RunWatch(_Empty(), _Run(running), tmp_path / "x").exit_line() is None  # type: ignore[arg-type]
    finally:
        running.kill()
        running.wait()
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    assert demo.RunWatch(_Empty(), _Run(done), tmp_path / "x").exit_line() is None  # type: ignore[arg-type]


def test_the_first_error_line_of_a_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    assert demo.first_error_line(log) is None
    log.write_text("starting\nTraceback:\nValueError: bad thing\n\n")
    assert demo.first_error_line(log) == "ValueError: bad thing"  # no error: line: the last line said
    log.write_text("x\nerror: rank 0: OSError: disk full\nerror: rank 1: RuntimeError: peer closed\n")
    assert demo.first_error_line(log) == "error: rank 0: OSError: disk full"


def test_the_summary_names_only_files_that_exist(tmp_path: Path) -> None:
    """Before: 'JSON log: /tmp/.../demo-....jsonl' for a file that did not exist, and no reason."""
    log_json, train_log = tmp_path / "run.jsonl", tmp_path / "train.log"
    train_log.write_text("error: --metrics-port: port 9500 on 127.0.0.1 is already in use; pass another\n")
    rows = dict(demo.outputs_rows(log_json, train_log, status=1))
    assert rows["why"].startswith("error: --metrics-port: port 9500")
    assert rows["training output"] == str(train_log)
    assert rows["JSON log"].startswith("none (training ended before its first step)")
    log_json.write_text("{}\n")
    assert dict(demo.outputs_rows(log_json, None, status=0)) == {"JSON log": str(log_json)}


def test_the_scrape_rows_say_what_the_last_scrape_saw() -> None:
    seen = demo.ScrapeRecord("u", ok=12, series=165, last_step=200, last_phase="finished")
    foreign = demo.ScrapeRecord("v", failed=7, last_error="another run (someone-else) on this port")
    rows = dict(demo.summary_rows([], {"step": 200, "steps": 200}, [seen, foreign], 0))
    assert rows["steps"] == "200"
    assert rows["rank 0 /metrics"] == "12 scrapes, 165 series, step 200 (finished)"
    assert rows["rank 1 /metrics"] == "0 ok, 7 failed (last: another run (someone-else) on this port)"


def test_a_run_stopped_after_its_last_scrape_says_why_the_steps_differ(capsys, monkeypatch) -> None:
    """``q`` at step 46: the trainer stops at the agreed step 50 without lingering for a scrape."""
    seen = demo.ScrapeRecord("u", ok=46, series=165, last_step=46, last_phase="training")
    rows = dict(demo.summary_rows([], {"step": 50, "steps": 50}, [seen, seen], 130))
    assert rows["steps"] == "50 (after the last scrape, at step 46)"
    assert rows["rank 0 /metrics"] == "46 scrapes, 165 series, step 46 (training)"
    monkeypatch.setenv("COLUMNS", "80")
    demo.print_table("fsdp-observe demo: summary", list(rows.items()))
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) < 80


def test_scrapes_refused_before_a_rank_serves_are_not_failures() -> None:
    scraper = demo.Scraper(["http://127.0.0.1:1/metrics"])
    with httpx.Client(timeout=1.0) as client:
        scraper._scrape(client, scraper.records[0])  # nothing listens on port 1: the rank is starting
    (record,) = scraper.records
    assert (record.failed, record.starting) == (0, 1)
    rows = dict(demo.summary_rows([], None, [record], 0))
    assert rows["rank 0 /metrics"] == "never answered (the rank had not bound its port)"


def test_the_summary_fits_80_columns(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    seen = demo.ScrapeRecord("u", ok=46, series=165, last_step=200, last_phase="finished")
    windows = [{"loss": 6.9, "step": 10, "global_tokens_per_second": 12345.0}] * 2
    end = {"step": 200, "steps": 200, "step_seconds_p50": 0.2, "step_seconds_p95": 0.3}
    demo.print_table("fsdp-observe demo: summary", demo.summary_rows(windows, end, [seen, seen], 0))
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) < 80, lines


def test_demo_help_is_plain_text(capsys) -> None:
    from tests.support.cli import run_cli

    result = run_cli(["demo", "--help"], capsys)
    assert result.status == 0 and "``" not in result.stdout and "fine-tune on this machine" in result.stdout
    assert "--log-every N" in result.stdout and "steps per log window" in result.stdout
    # the trainer's linger line names --metrics-linger 0: the demo takes it too
    assert "--metrics-linger SECONDS" in result.stdout


@pytest.mark.parametrize("width", [80, 60])
def test_the_run_screen_without_trainers_says_the_whole_fix_at_80_columns(width: int) -> None:
    from observe.sources.view import ClusterSnapshot

    shown = text(no_run_lines(ClusterSnapshot(time_unix=0.0, trainers=0), width))
    assert all(len(line.rstrip()) <= width for line in shown.splitlines()), shown
    assert "…" not in shown
    words = " ".join(shown.split())
    assert "give trainer endpoints (--trainer URL), --kube to find trainer pods, or --prometheus" in words, shown
