"""The one-line variants, without zero-code instrumentation: the Hugging Face ``TrainerCallback``
and the Lightning ``Callback`` added to the user's ``Trainer(callbacks=[...])``, real two-rank CPU
runs (torchrun, gloo) read over HTTP. No injector runs here: the Hugging Face callback patches the
DataLoader itself (samples, labelled tokens and data wait from the batches, with no
``include_num_input_tokens_seen``); the Lightning callback counts the batches its hooks are given."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from observe import catalog as c
from observe.ports import free_port_block
from tests.support.instrumented import assert_as_the_table_says, instrument_env, start
from tests.support.own_training import SCRIPTS, TORCHRUN

SEQ, MASKED, BATCH = 32, 8, 2


def run_to_finish(script: list[str], tmp: Path, env: dict) -> dict:
    """Scrape both ranks once finished (they linger in ``on_train_end``), then let the script end."""
    base = free_port_block(2)
    environ = instrument_env(env, base, linger=8)
    environ.pop(c.INSTRUMENT_ENV)  # only the callback: no injector in these processes
    if "hf_trainer.py" in script[0]:  # its windows follow logging_steps: the setting would be said unused
        environ.pop("FSDP_OBSERVE_LOG_EVERY")
    run = start([*TORCHRUN, *script], environ, tmp / "out.log", cwd=tmp)
    try:
        scrapes = run.wait_finished([base, base + 1], timeout=300)
        assert run.wait(timeout=120) == 0, run.output()[-3000:]
    finally:
        run.stop()
    assert "fsdp-observe" not in run.output().replace("fsdp_observe", "")  # nothing to complain about
    return {p - base: s for p, s in scrapes.items()}


def test_the_hugging_face_callback_alone(tmp_path: Path, session_env) -> None:
    model = tmp_path / "tiny"
    subprocess.run(
        [sys.executable, str(SCRIPTS / "save_tiny_llama.py"), str(model)],
        env=session_env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    steps, accum = 40, 2
    ranks = run_to_finish(
        [
            str(SCRIPTS / "hf_trainer.py"),
            "--steps",
            str(steps),
            "--accum",
            str(accum),
            "--with-callback",
            "--model-dir",
            str(model),
            "--out",
            str(tmp_path / "hf"),
        ],
        tmp_path,
        session_env,
    )
    history = json.loads((tmp_path / "hf" / "log_history.json").read_text())
    logged = [h for h in history if "loss" in h]
    for rank, s in ranks.items():
        assert s.value(c.TRAIN_STEPS.name) == steps and s.value(c.TRAIN_PLANNED_STEPS.name) == steps
        assert s.value(c.TRAIN_LOSS.name) == pytest.approx(logged[-1]["loss"], rel=1e-6)
        assert s.value(c.TRAIN_GRAD_NORM.name) == pytest.approx(logged[-1]["grad_norm"], rel=1e-6)
        # the batches this rank trained on, counted where they leave its DataLoader: labels only
        assert s.value(c.TRAIN_LABELLED_TOKENS.name) == steps * accum * BATCH * (SEQ - MASKED)
        assert s.value(c.TRAIN_SAMPLES.name) == steps * accum * BATCH
        assert s.value(c.TRAIN_TOKENS_PER_SECOND.name) > 0
        assert s.value(c.TRAIN_DATA_WAIT_SECONDS.name + "_count") == steps
        info = s.labels(c.TRAIN_INFO.name)
        assert (info["instrumentation"], info["loss_source"], info["tokens_source"]) == (
            "hf",
            "hf_logged",
            "labels",
        ), (rank, info)
        assert s.phase == "finished"
        assert_as_the_table_says(s, "hf")


def test_the_lightning_callback_alone(tmp_path: Path, session_env) -> None:
    steps = 30
    ranks = run_to_finish(
        [
            str(SCRIPTS / "lightning_trainer.py"),
            "--steps",
            str(steps),
            "--accum",
            "1",
            "--val-every",
            "15",
            "--with-callback",
            "--out",
            str(tmp_path / "pl"),
        ],
        tmp_path,
        session_env,
    )
    rows = list(csv.DictReader((tmp_path / "pl" / "run" / "version_0" / "metrics.csv").open()))
    last_loss = float([r["train_loss"] for r in rows if r["train_loss"]][-1])
    for s in ranks.values():
        assert s.value(c.TRAIN_STEPS.name) == steps and s.value(c.TRAIN_PLANNED_STEPS.name) == steps
        assert s.value(c.TRAIN_LABELLED_TOKENS.name) == steps * BATCH * (SEQ - MASKED)  # the batches it trained on
        assert s.value(c.TRAIN_DATA_WAIT_SECONDS.name + "_count") == steps
        assert s.value(c.TRAIN_VALIDATION_LOSS.name) is not None
        assert s.value(c.TRAIN_PHASE_SECONDS.name, phase="validating") > 0
        assert c.TRAIN_GRAD_NORM.name not in s.names()  # no clipping, no injector: absent
        assert s.labels(c.TRAIN_INFO.name)["instrumentation"] == "lightning"
        assert_as_the_table_says(s, "lightning")
    assert ranks[0].value(c.TRAIN_LOSS.name) == pytest.approx(last_loss, rel=1e-5)
