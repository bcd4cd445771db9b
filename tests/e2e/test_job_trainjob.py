"""A rendered TrainJob's command, run as Kubeflow Trainer v2 runs it: two nodes, static rendezvous,
progress pushed to Trainer's status endpoint.

In a cluster, Trainer's torch plugin gives each node's container torchrun's ``PET_NNODES``,
``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``, and (with
the ``TrainJobStatus`` gate) ``KUBEFLOW_TRAINER_SERVER_URL``, ``_CA_CERT`` and ``_TOKEN``; the
container runs ``spec.trainer.command`` with ``spec.trainer.env``. Here two processes stand in for
the two nodes' containers: each gets exactly that (``tests/support/trainer_v2.py``), and the
rendered command carries no rendezvous flag of ours. The substitutions, because both "nodes" are
this machine: ``PET_MASTER_ADDR`` is 127.0.0.1 instead of the headless Service's name, and node 1
serves its rank's metrics on another port base (two nodes cannot both own local rank 0's port on
one host). The status endpoint is a stand-in over HTTPS with its own CA, checking the token and
each body against the CRD (``tests/support/progress_server.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from observe import catalog as c
from observe.k8s.job_settings import settings_from_mapping
from observe.k8s.kinds.trainjob import render
from observe.ports import free_port
from observe.training.progress import INTERVAL_ENV
from tests.support.instrumented import Scrape, scrape
from tests.support.progress_server import ProgressServer, metrics_of
from tests.support.trainer_runs import events, read_log, start, stop_group
from tests.support.trainer_v2 import pet_env

STEPS = 60


def node_env(job: dict, rank: int, master_port: int, base: dict[str, str], status: dict[str, str]) -> dict[str, str]:
    """What node ``rank``'s container holds: the rendered env, the torch plugin's and the status plugin's."""
    env = dict(base)
    env.update({v["name"]: v["value"] for v in job["spec"]["trainer"]["env"] if "value" in v})
    env["NODE_NAME"] = f"node-{'ab'[rank]}"  # fieldRef spec.nodeName
    env.update(pet_env(job, rank, master_addr="127.0.0.1", master_port=master_port))
    env.update(status)
    return env


def test_two_nodes_train_from_trainers_variables_alone_and_rank_0_pushes_progress(
    tmp_path: Path, corpus: Path, port_block, subprocess_env
) -> None:
    log = tmp_path / "run.jsonl"
    ports = port_block(2)
    job = render(
        settings_from_mapping(
            {
                "IMAGE_URI": "fsdp-observe:test",
                "JOB_KIND": "TrainJob",
                "JOB_NAME": "llama2-7b-trainjob",
                "NUM_NODES": 2,
                "GPU_PER_NODE": 0,
                "NPROC_PER_NODE": 1,
                "MODEL": "tiny",
                "DATA": str(corpus),
                "METRICS_PORT": ports,
                "TRAINER_ARGS": f"--steps {STEPS} --seq-len 64 --batch-size 2 --log-every 5 "
                f"--metrics-address 127.0.0.1 --metrics-linger 15 --log-json {log}",
            }
        ),
        run_id="tj-e2e-1",
    )
    command = job["spec"]["trainer"]["command"]
    launcher = command[: command.index("fsdp-observe-trainer")]
    assert launcher == ["fsdp-observe-torchrun", "--no-python"]  # nproc, nnodes, rendezvous: all PET_*
    node1 = [*command]
    node1[node1.index("--metrics-port") + 1] = str(ports + 1)  # the one substitution of the port

    endpoint = ProgressServer(tmp_path / "endpoint", name="llama2-7b-trainjob")
    status = {**endpoint.env(), INTERVAL_ENV: "0"}  # every window offered; the gate is the unit tests'
    node1_token = tmp_path / "node-1-token"
    node1_token.write_text("node-1-projected-token\n")  # each pod has its own token
    master_port = free_port()
    procs = [
        start(command, node_env(job, 0, master_port, subprocess_env, status)),
        start(
            node1,
            node_env(
                job, 1, master_port, subprocess_env, {**status, "KUBEFLOW_TRAINER_SERVER_TOKEN": str(node1_token)}
            ),
        ),
    ]
    last: dict[int, Scrape] = {}
    try:
        deadline = time.monotonic() + 480
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, "the two nodes did not finish"
            for port in (ports, ports + 1):  # each node's rank, while it serves (linger included)
                try:
                    last[port] = scrape(port)
                except Exception:  # noqa: BLE001 - not serving yet, or done
                    pass
            time.sleep(0.2)
        outputs = [p.stdout.read() if p.stdout else "" for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    finally:
        for p in procs:
            stop_group(p)
        endpoint.close()

    # torchrun met through PET_* alone: a static rendezvous of two nodes, one rank each
    assert "master_addr=127.0.0.1" in outputs[0] and "master_addr=127.0.0.1" in outputs[1]
    ranks = {port: int(s.labels(c.TRAIN_INFO.name)["rank"]) for port, s in last.items()}
    assert ranks == {ports: 0, ports + 1: 1}
    for port, s in last.items():  # both exported metrics to the end
        assert s.value(c.TRAIN_STEP.name) == STEPS and s.phase == "finished", port
        assert s.labels(c.TRAIN_INFO.name)["world_size"] == "2" and s.labels(c.TRAIN_INFO.name)["run_id"] == "tj-e2e-1"

    # rank 0 pushed; node 1 (rank 1) never did, with its own token or any
    assert endpoint.pushes and all(p.token == "token-1" and p.status == 200 for p in endpoint.pushes)
    windows = {w["step"]: w for w in events(read_log(log), "window")}
    assert sorted(windows) == [1, *range(5, STEPS + 1, 5)]
    pushed = endpoint.accepted()
    steps = [int(metrics_of(s)["currentStep"]) for s in pushed]
    assert steps == sorted(set(steps)) and steps[-1] == STEPS and set(steps) <= set(windows)
    for s, step in zip(pushed, steps, strict=True):  # against the run's own windows
        figures, window = metrics_of(s), windows[step]
        assert s["progressPercentage"] == 100 * step // STEPS
        assert figures["totalSteps"] == str(STEPS)
        assert float(figures["loss"]) == pytest.approx(window["loss"], rel=1e-5)
        assert float(figures["tokens_per_second"]) == pytest.approx(window["global_tokens_per_second"], rel=1e-5)
        if step == 1:  # the warm-up step's window: no steady step time, no ETA
            assert "estimatedRemainingSeconds" not in s
        else:  # the steps left at the window's mean step time (no warm-up in these windows)
            assert s["estimatedRemainingSeconds"] == round((STEPS - step) * window["step_seconds"])
    assert pushed[-1]["progressPercentage"] == 100 and pushed[-1]["estimatedRemainingSeconds"] == 0
