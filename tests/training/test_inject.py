"""Zero-code instrumentation of an unchanged loop (``scripts/loop.py``), one process per test.

Each test starts the user's script as a real process with ``FSDP_OBSERVE_INSTRUMENT=1`` (the
``.pth`` that ``pip install -e .`` put into this virtualenv) or under ``fsdp-observe run``, reads
its endpoint over HTTP, and compares with what the script recorded of its own loop.
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import httpx
import pytest

from observe import catalog as c
from observe.cli.run import python_flag_warnings
from observe.training.inject import hooks
from tests.support.instrumented import instrument_env, scrape, start

SCRIPT = Path(__file__).parent / "scripts" / "loop.py"
FSDP_OBSERVE = [sys.executable, "-m", "observe.cli", "run", "--"]


def run_loop(
    tmp_path: Path,
    env: dict,
    base: int,
    *args: str,
    launcher: list[str] | None = None,
    python: list[str] | None = None,
    ports: int = 1,
) -> tuple[dict, dict, str]:
    """Run the script to its finish; (scrapes by local rank, its record, its output)."""
    record = tmp_path / "record.json"
    cmd = [*(launcher or []), *(python or [sys.executable]), str(SCRIPT), "--record", str(record), *args]
    run = start(cmd, env, tmp_path / "out.log")
    try:
        scrapes = run.wait_finished([base + r for r in range(ports)], timeout=240)
    finally:
        run.stop()
    return {p - base: s for p, s in scrapes.items()}, json.loads(record.read_text()), run.output()


@pytest.fixture
def env(subprocess_env, port_block) -> tuple[dict, int]:
    base = port_block(2)
    return instrument_env(
        {**subprocess_env, "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}, base, log_every=3
    ), base


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_gradient_accumulation_counts_optimizer_steps_and_the_backward_loss(tmp_path, env) -> None:
    environ, base = env
    scrapes, record, output = run_loop(tmp_path, environ, base, "--steps", "7", "--accum", "3")
    s = scrapes[0]
    assert s.value(c.TRAIN_STEPS.name) == 7 == len(record["step_loss"])
    assert s.value(c.TRAIN_LABELLED_TOKENS.name) == 7 * 3 * 4 * (16 - 5)  # labels != -100, every micro-batch
    assert s.value(c.TRAIN_SAMPLES.name) == 7 * 3 * 4
    assert s.value(c.TRAIN_DATA_WAIT_SECONDS.name + "_count") == 7
    # the last window (log every 3: steps 1, 3, 6, then 7 alone) holds step 7
    assert s.value(c.TRAIN_LOSS.name) == pytest.approx(record["step_loss"][-1], rel=1e-5)
    assert s.value(c.TRAIN_GRAD_NORM.name) == pytest.approx(record["clip"][-1], rel=1e-5)
    assert s.value(c.TRAIN_LEARNING_RATE.name, optimizer="AdamW", param_group="0") == 1e-3
    info = s.labels(c.TRAIN_INFO.name)
    assert (info["instrumentation"], info["loss_source"], info["grad_norm_source"], info["tokens_source"]) == (
        "auto",
        "backward_heuristic",
        "clip_grad_norm_heuristic",
        "labels",
    )
    seconds = {p: s.value(c.TRAIN_PHASE_SECONDS.name, phase=p) for p in ("loading_weights", "training")}
    assert all(v and v > 0 for v in seconds.values()), seconds
    assert "fsdp-observe" not in output  # nothing to say


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
@pytest.mark.parametrize("under", ["no_grad", "inference_mode"])
def test_the_loops_own_validation_batches_are_not_training_data(tmp_path, env, under: str) -> None:
    environ, base = env
    scrapes, record, _ = run_loop(tmp_path, environ, base, "--steps", "6", "--val-every", "2", "--val-under", under)
    s = scrapes[0]
    assert s.value(c.TRAIN_STEPS.name) == 6 == len(record["step_loss"])
    # three validations of two batches each were drawn; only the training batches count
    assert s.value(c.TRAIN_SAMPLES.name) == 6 * 4
    assert s.value(c.TRAIN_LABELLED_TOKENS.name) == 6 * 4 * (16 - 5)
    assert s.value(c.TRAIN_DATA_WAIT_SECONDS.name + "_count") == 6


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
@pytest.mark.parametrize("optimizers", ["two", "container"])
def test_several_optimizers_count_each_step_once(tmp_path, env, optimizers: str) -> None:
    environ, base = env
    scrapes, record, _ = run_loop(tmp_path, environ, base, "--steps", "5", "--optimizers", optimizers)
    assert scrapes[0].value(c.TRAIN_STEPS.name) == 5 == len(record["step_loss"])
    assert scrapes[0].value(c.TRAIN_STEP.name) == 5


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
@pytest.mark.parametrize("optimizers", ["two", "container"])
def test_each_optimizer_has_its_own_learning_rate_series(tmp_path, env, optimizers: str) -> None:
    environ, base = env
    scrapes, _, _ = run_loop(tmp_path, environ, base, "--steps", "4", "--optimizers", optimizers)
    rates = {
        (x.labels["optimizer"], x.labels["param_group"]): x.value
        for x in scrapes[0].samples
        if x.name == c.TRAIN_LEARNING_RATE.name
    }
    assert rates == {("AdamW", "0"): 1e-3, ("SGD", "0"): 1e-2}  # the script's two optimizers


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_grad_norm_is_absent_when_the_loop_does_not_clip(tmp_path, env) -> None:
    environ, base = env
    scrapes, _, _ = run_loop(tmp_path, environ, base, "--steps", "3", "--no-clip")
    assert scrapes[0].value(c.TRAIN_STEPS.name) == 3
    assert c.TRAIN_GRAD_NORM.name not in scrapes[0].names()
    assert "grad_norm_source" not in scrapes[0].labels(c.TRAIN_INFO.name)


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_a_rank_serves_from_its_process_group_on_while_it_loads(tmp_path, env) -> None:
    environ, base = env
    record = tmp_path / "record.json"
    cmd = [sys.executable, str(SCRIPT), "--record", str(record), "--steps", "3", "--init-group"]
    run = start([*cmd, "--store", str(tmp_path / "store"), "--load-seconds", "60"], environ, tmp_path / "out.log")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the 60 s of loading: the endpoint answers within them
            try:
                s = scrape(base)
                break
            except httpx.HTTPError:
                assert run.proc.poll() is None, run.output()[-3000:]
                time.sleep(0.2)
        else:
            raise AssertionError(f"no endpoint while loading:\n{run.output()[-3000:]}")
        assert s.phase == "loading_weights" and s.value(c.TRAIN_STEPS.name) == 0
        assert s.labels(c.TRAIN_INFO.name)["instrumentation"] == "auto"
    finally:
        run.stop()


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_spawned_dataloader_workers_stay_silent(tmp_path, env) -> None:
    """Spawn workers start a fresh interpreter that inherits the variable; they never step, so
    they never bind (a worker that tried would find the rank's port taken and say so)."""
    environ, base = env
    scrapes, record, output = run_loop(
        tmp_path, environ, base, "--steps", "4", "--workers", "2", "--mp-context", "spawn"
    )
    assert scrapes[0].value(c.TRAIN_STEPS.name) == 4
    assert scrapes[0].value(c.TRAIN_LABELLED_TOKENS.name) == 4 * 4 * 11
    assert "fsdp-observe" not in output and c.TRAIN_INSTRUMENTATION_PROBLEM.name not in scrapes[0].names()


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_a_taken_port_is_one_line_and_a_series_never_a_crash(tmp_path, env, taken_port) -> None:
    environ, _ = env
    environ = {**environ, "FSDP_OBSERVE_PORT_BASE": str(taken_port), "FSDP_OBSERVE_LINGER_SECONDS": "0"}
    record = tmp_path / "record.json"
    run = start([sys.executable, str(SCRIPT), "--record", str(record), "--steps", "3"], environ, tmp_path / "o.log")
    assert run.wait(timeout=120) == 0, run.output()
    lines = [line for line in run.output().splitlines() if line.startswith("fsdp-observe")]
    assert len(lines) == 1 and f"port {taken_port} is taken: serving on 127.0.0.1:" in lines[0], lines
    assert "set FSDP_OBSERVE_PORT_BASE" in lines[0] and "user script done" in run.output()


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_a_taken_port_still_serves_the_run_on_the_fallback(tmp_path, env, taken_port) -> None:
    environ, _ = env
    environ = {**environ, "FSDP_OBSERVE_PORT_BASE": str(taken_port)}
    run = start(
        [sys.executable, str(SCRIPT), "--record", str(tmp_path / "r.json"), "--steps", "2"], environ, tmp_path / "o.log"
    )
    try:
        import re
        import time

        deadline, port = time.monotonic() + 120, None
        while port is None and time.monotonic() < deadline:
            if m := re.search(r"serving on 127\.0\.0\.1:(\d+)", run.output()):
                port = int(m.group(1))
            time.sleep(0.2)
        assert port, run.output()
        found = run.wait_finished([port])[port]
        assert found.value(c.TRAIN_INSTRUMENTATION_PROBLEM.name, problem="port_taken") == 1
        assert found.value(c.TRAIN_STEPS.name) == 2
    finally:
        run.stop()


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_torch_compile_recompiles_no_more_than_without_us(tmp_path, env, subprocess_env) -> None:
    environ, base = env
    args = ("--steps", "6", "--compile")
    _, plain, _ = run_loop_plain(tmp_path / "plain", subprocess_env, *args)
    scrapes, instrumented, _ = run_loop(tmp_path, environ, base, *args)
    assert scrapes[0].value(c.TRAIN_STEPS.name) == 6
    assert instrumented["recompiles"] == plain["recompiles"] == 0
    assert instrumented["graph_breaks"] == plain["graph_breaks"]
    assert instrumented["frames"] == plain["frames"]


def run_loop_plain(folder: Path, env: dict, *args: str) -> tuple[None, dict, str]:
    import subprocess

    folder.mkdir()
    record = folder / "record.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--record", str(record), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return None, json.loads(record.read_text()), done.stdout


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_a_launcher_without_local_rank_is_reported(tmp_path, env) -> None:
    """``mp.spawn`` sets no LOCAL_RANK: each rank serves on base + its global rank and says why."""
    environ, base = env
    environ = {k: v for k, v in environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
    scrapes, _, output = run_loop(
        tmp_path, environ, base, "--steps", "3", "--spawn-ranks", "2", "--store", str(tmp_path / "store"), ports=2
    )
    for rank in (0, 1):
        s = scrapes[rank]
        assert s.value(c.TRAIN_STEPS.name) == 3
        assert s.value(c.TRAIN_INSTRUMENTATION_PROBLEM.name, problem="no_local_rank") == 1
        assert s.labels(c.TRAIN_STEP.name)["rank"] == str(rank)
    assert output.count("no LOCAL_RANK in the environment") == 2
    run_ids = {scrapes[r].labels(c.TRAIN_STEP.name)["run_id"] for r in (0, 1)}
    assert len(run_ids) == 1  # the ranks of one launcher share a run id without a collective


def test_nothing_happens_without_the_variable(tmp_path, subprocess_env) -> None:
    import subprocess

    code = (
        "import sys, torch; print(sorted(m for m in sys.modules if m.startswith('observe')), "
        "torch.optim.Optimizer.step.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=subprocess_env, capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("[] "), done.stdout + done.stderr  # the .pth imported nothing of ours


def test_importing_torch_installs_the_hooks_and_nothing_heavy(env) -> None:
    import subprocess

    environ, _ = env
    code = (
        "import sys, torch; from observe.training import session; "
        "print(session.hooks_installed, 'torch._dynamo' in sys.modules, 'prometheus_client' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "False", "False"], done.stdout + done.stderr  # no endpoint before a step


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_fsdp_observe_run_chains_to_the_sitecustomize_it_shadows(tmp_path, env) -> None:
    environ, base = env
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIR_SITECUSTOMIZE'] = 'ran'\n")
    environ = {k: v for k, v in environ.items() if k != c.INSTRUMENT_ENV}  # fsdp-observe run sets it
    environ["PYTHONPATH"] = str(theirs)
    code = (
        "import os, sys, torch; print(os.environ.get('THEIR_SITECUSTOMIZE'), sys.modules['sitecustomize'].__file__);"
        "opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1); opt.step()"
    )
    run = start([*FSDP_OBSERVE, sys.executable, "-c", code], environ, tmp_path / "o.log")
    try:
        s = run.wait_finished([base])[base]
        assert s.value(c.TRAIN_STEPS.name) == 1
    finally:
        run.stop()
    assert f"ran {theirs / 'sitecustomize.py'}" in run.output()


def test_python_flags_that_defeat_injection_are_named() -> None:
    assert python_flag_warnings(["python3", "-S", "x.py"]) == [
        "python -S skips site: nothing can be instrumented in that process; drop -S"
    ]
    assert python_flag_warnings(["torchrun", "-I", "x.py"]) == []
    assert python_flag_warnings(["python", "-u", "x.py", "-I"]) == []  # a flag of the script, not Python's


@pytest.mark.e2e  # the user's script as a real process, serving /metrics over HTTP
def test_python_flags_that_defeat_injection_are_said(tmp_path, env) -> None:
    environ, base = env
    # -I ignores PYTHONPATH, but this virtualenv has the .pth: still instrumented, and said so
    run = start(
        [
            *FSDP_OBSERVE,
            sys.executable,
            "-I",
            "-c",
            "import torch; o = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1); o.step()",
        ],
        environ,
        tmp_path / "o.log",
    )
    try:
        assert run.wait_finished([base])[base].value(c.TRAIN_STEPS.name) == 1
    finally:
        run.stop()
    assert "python -I ignores PYTHONPATH: the installed .pth still instruments it" in run.output()
    run = start([*FSDP_OBSERVE, sys.executable, "-S", "-c", "print('ran')"], environ, tmp_path / "s.log")
    assert run.wait(timeout=60) == 0
    assert "python -S skips site" in run.output() and "ran" in run.output()
    with pytest.raises(httpx.ConnectError):
        scrape(base)


def test_hf_callback_falls_back_to_trainer_init_without_default_callbacks() -> None:
    added = []

    class Trainer:
        def __init__(self, x: int) -> None:
            self.x = x

        def add_callback(self, cb: object) -> None:
            added.append(cb)

    module = types.SimpleNamespace(Trainer=Trainer)  # a transformers without DEFAULT_CALLBACKS
    hooks.attach_hf(module)
    assert Trainer(3).x == 3 and len(added) == 1
    listed = types.SimpleNamespace(DEFAULT_CALLBACKS=[])
    hooks.attach_hf(listed)
    hooks.attach_hf(listed)
    assert [cb.__name__ for cb in listed.DEFAULT_CALLBACKS] == ["FsdpObserveCallback"]
    hooks.attach_hf(types.SimpleNamespace())  # neither: nothing, no error
