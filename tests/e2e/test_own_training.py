"""Third-party trainers, unchanged, instrumented with no code: exact figures, the TUI, the dashboard.

Each trainer is a real two-rank CPU run (gloo) of a script under ``tests/e2e/scripts`` that knows
nothing of fsdp-observe: a hand-written FSDP2 loop and Lightning Fabric with
``ModelParallelStrategy`` (FSDP2) under ``fsdp-observe run -- torchrun``; the Hugging Face Trainer
with DDP and with its native FSDP2 (``DistributedConfig(fsdp_size=2)``) and the Lightning Trainer
with ``ModelParallelStrategy`` with only ``FSDP_OBSERVE_INSTRUMENT=1`` set (the installed ``.pth``,
and Lightning's entry point). Not counted as FSDP here: Hugging Face ``fsdp="full_shard"``, which
silently runs DDP on CPU, and Lightning's ``FSDPStrategy``, which refuses CPU (FIELD-NOTES).

One run per trainer serves every test of it (a module-scoped fixture, one trainer at a time).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from observe import catalog as c
from observe import prometheus_local
from tests.support.instrumented import assert_as_the_table_says
from tests.support.own_training import SCRIPTS, WatchedRun, dashboard_panels_showing, instant, run_screen_lines
from tests.support.own_training import watched_run as watch

pytestmark = pytest.mark.skipif(
    prometheus_local.binary() is None,
    reason="the prometheus binary is missing: apt-get install prometheus (CI installs it)",
)

SEQ, MASKED, BATCH = 32, 8, 2  # tests/e2e/scripts/tiny_llama.py
#: Panels of the training-run dashboard every instrumented run fills, whatever the entry point.
ALWAYS = {
    "Loss",
    "Global tokens/s",
    "Tokens/s: the 10 slowest ranks and the median",
    "Step time: the 10 slowest ranks",
    "Mean step time of the 10 slowest ranks, by rank",
    "Compute per step vs the run's median rank",
    "Worst 10 ranks",
    "Data-wait share: the 10 highest ranks",
    "Device memory across ranks",
    "Wall time by phase",
    "Goodput",
    "Restarts",
    "Learning rate",
    "Phase of each run",
}


@dataclass(frozen=True)
class Trainer:
    """One third-party trainer: how it is started and what it must show."""

    script: tuple[str, ...]
    steps: int
    accum: int
    via_run_command: bool
    instrumentation: str
    phases: tuple[str, ...] = ("loading_weights", "training", "finished")
    panels: frozenset[str] = field(default_factory=frozenset)


TRAINERS = {
    "fsdp2-loop": Trainer(
        # its own validation every 20 steps (under no_grad): not training data
        ("fsdp2_loop.py", "--steps", "60", "--accum", "2", "--val-every", "20", "--record", "own"),
        60,
        2,
        True,
        "auto",
        panels=frozenset({"Gradient norm"}),
    ),
    "hf-ddp": Trainer(
        ("hf_trainer.py", "--steps", "240", "--accum", "2", "--eval-and-save-at", "120"),
        240,
        2,
        False,
        "hf",
        ("loading_weights", "training", "validating", "checkpointing", "finished"),
        frozenset({"Gradient norm", "Progress", "Checkpoints"}),
    ),
    "hf-fsdp2": Trainer(
        ("hf_trainer.py", "--fsdp", "--steps", "240", "--accum", "2"),
        240,
        2,
        False,
        "hf",
        panels=frozenset({"Gradient norm", "Progress"}),
    ),
    "lightning-trainer": Trainer(
        ("lightning_trainer.py", "--steps", "50", "--accum", "1", "--val-every", "25"),
        50,
        1,
        False,
        "lightning",
        ("loading_weights", "training", "validating", "finished"),
        frozenset({"Progress"}),
    ),
    "lightning-fabric": Trainer(("fabric_loop.py", "--steps", "50", "--record", "own"), 50, 1, True, "auto"),
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, session_env) -> Path:
    """The tiny Llama saved with save_pretrained, as a user's downloaded model."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    subprocess.run(
        [sys.executable, str(SCRIPTS / "save_tiny_llama.py"), str(folder)],
        env=session_env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return folder


@pytest.fixture(scope="module", params=sorted(TRAINERS))
def run(request, tmp_path_factory, session_env, tiny_model) -> WatchedRun:
    spec = TRAINERS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    script = [str(SCRIPTS / spec.script[0]), *spec.script[1:]]
    if spec.script[0] == "hf_trainer.py":
        script += ["--model-dir", str(tiny_model), "--out", str(tmp / "hf")]
    if spec.script[0] == "lightning_trainer.py":
        script += ["--out", str(tmp / "pl")]
    yield from watch(request.param, script, tmp, session_env, spec.via_run_command)


def spec_of(run: WatchedRun) -> Trainer:
    return TRAINERS[run.name]


def framework_losses(run: WatchedRun) -> dict[int, float]:
    """The loss each rank's series must equal, from the framework's (or script's) own log."""
    spec = spec_of(run)
    if spec.instrumentation == "hf":  # the Trainer's last logged loss: one value, every rank
        history = json.loads((run.folder / "hf" / "log_history.json").read_text())
        last = [h["loss"] for h in history if "loss" in h][-1]
        return {0: last, 1: last}
    if spec.instrumentation == "lightning":  # rank 0's CSVLogger, a row per step; our window is 5 steps
        rows = list(csv.DictReader((run.folder / "pl" / "run" / "version_0" / "metrics.csv").open()))
        return {0: sum([float(r["train_loss"]) for r in rows if r["train_loss"]][-5:]) / 5}
    # auto: the mean, over the last log window (5 steps), of what the script passed to backward()
    return {r: sum(run.record("own", r)["step_loss"][-5:]) / 5 for r in (0, 1)}


#: Classes a framework wraps the user's model in: never the model label.
WRAPPERS = {"FSDPModule", "OptimizedModule", "FullyShardedDataParallel", "DistributedDataParallel", "_FabricModule"}


def test_steps_tokens_and_loss_match_the_frameworks_own(run: WatchedRun) -> None:
    spec = spec_of(run)
    for rank, scrape in run.ranks.items():
        assert scrape.value(c.TRAIN_STEPS.name) == spec.steps, rank
        assert scrape.value(c.TRAIN_STEP.name) == spec.steps, rank
        assert scrape.value(c.TRAIN_LABELLED_TOKENS.name) == spec.steps * spec.accum * BATCH * (SEQ - MASKED), rank
        assert scrape.value(c.TRAIN_SAMPLES.name) == spec.steps * spec.accum * BATCH, rank
        info = scrape.labels(c.TRAIN_INFO.name)
        assert info["instrumentation"] == spec.instrumentation and info["world_size"] == "2", info
        assert info["tokens_source"] == "labels", info
        assert_as_the_table_says(scrape, spec.instrumentation)
    for rank, loss in framework_losses(run).items():
        assert run.ranks[rank].value(c.TRAIN_LOSS.name) == pytest.approx(loss, rel=1e-5), rank
    assert "Traceback" not in run.output.split("SIGTERM")[0]


def test_one_model_is_one_flops_figure_and_each_learning_rate_says_whose(run: WatchedRun) -> None:
    """The ranks of one model export one FLOPs-per-token figure under the model's own class name
    (never a wrapper's), and every learning-rate series names its optimizer and param group."""
    flops = {rank: s.value(c.TRAIN_FLOPS_PER_TOKEN.name) for rank, s in run.ranks.items()}
    if any(v is not None for v in flops.values()):
        assert len(set(flops.values())) == 1, flops
    for rank, scrape in run.ranks.items():
        model = scrape.labels(c.TRAIN_INFO.name).get("model", "")
        assert model not in WRAPPERS and not model.startswith(("FSDP", "Optimized")), (rank, model)
        rates = [x for x in scrape.samples if x.name == c.TRAIN_LEARNING_RATE.name]
        assert rates, rank
        assert all(x.labels.get("optimizer") and x.labels.get("param_group") for x in rates), (rank, rates)


def test_phase_transitions_are_in_prometheus(run: WatchedRun) -> None:
    """Prometheus saw each rank training, then finished; every phase the run went through has
    its seconds (phases shorter than a scrape, such as a tiny evaluation, show only there)."""
    since = f"{int(time.time() - run.started) + 5}s"
    selector = f'run_id="{run.run_id}"'
    for phase, expr in (
        ("training", f'max_over_time({c.TRAIN_PHASE.name}{{{selector},phase="training"}}[{since}])'),
        ("finished", f'{c.TRAIN_PHASE.name}{{{selector},phase="finished"}}'),
    ):
        seen = instant(run.prometheus, expr)
        assert len(seen) == 2 and all(float(s["value"][1]) == 1 for s in seen), (phase, seen)
    for phase in spec_of(run).phases[:-1]:
        spent = instant(run.prometheus, f'{c.TRAIN_PHASE_SECONDS.name}{{{selector},phase="{phase}"}}')
        assert len(spent) == 2 and all(float(s["value"][1]) > 0 for s in spent), (phase, spent)
    for scrape in run.ranks.values():
        assert scrape.phase == "finished"


def test_the_training_run_dashboard_shows_it(run: WatchedRun) -> None:
    shown = dashboard_panels_showing(run)
    missing = (ALWAYS | spec_of(run).panels) - shown
    assert not missing, f"panels without this run: {sorted(missing)} (shown: {sorted(shown)})"


@pytest.mark.anyio
async def test_the_tui_run_screen_shows_it(run: WatchedRun) -> None:
    lines = await run_screen_lines(run)
    assert any(f"run {run.run_id}" in line and "world size 2" in line for line in lines), lines
    ranks = [line for line in lines if line.split()[:1] in (["0"], ["1"])]
    assert len(ranks) == 2 and all(" ok" in line or " finished" in line for line in ranks), lines
