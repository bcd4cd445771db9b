"""A rendered PyTorchJob's command, run for real: torchrun, the trainer, a real etcd (v2 API).

In a pod the Kubeflow training operator turns ``elasticPolicy`` into torchrun's ``PET_*``
variables and the container runs the rendered command with the rendered environment. This test
does the same on this machine: ``operator_env`` mirrors the operator's ElasticEnvVarGenerator
(training-operator ``pkg/controller.v1/pytorch/elastic.go``), and the one substitution is the
etcd Service's cluster DNS name, which becomes 127.0.0.1 where a local ``etcd --enable-v2``
listens (Debian's etcd-server, as in the add-on's etcd Deployment).

It also shows why every render gets a new rendezvous id: the walkthrough's jobs reused one, and
a rerun against the same etcd meets the previous run's closed rendezvous.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx

from observe.k8s.job_settings import settings_from_mapping
from observe.k8s.jobs import last_master_addr
from observe.k8s.kinds.pytorchjob import render


def operator_env(job: dict) -> dict[str, str]:
    """The ``PET_*`` variables the training operator gives each worker of an elastic job."""
    e = job["spec"]["elasticPolicy"]
    host = e.get("rdzvHost", f"{job['metadata']['name']}-worker-0")
    env = {
        "PET_RDZV_ENDPOINT": f"{host}:{e.get('rdzvPort', 23456)}",
        "PET_RDZV_BACKEND": e["rdzvBackend"],
        "PET_NNODES": f"{e['minReplicas']}:{e['maxReplicas']}",
        "PET_MAX_RESTARTS": str(e["maxRestarts"]),
        "PET_RDZV_ID": e["rdzvId"],
    }
    if "nprocPerNode" in job["spec"]:
        env["PET_NPROC_PER_NODE"] = job["spec"]["nprocPerNode"]
    return env


def start_etcd(data_dir: Path, client_port: int, peer_port: int) -> subprocess.Popen:
    etcd = shutil.which("etcd")
    assert etcd, "etcd is needed (Debian package etcd-server, 3.4 or 3.5: the v2 API)"
    peer = f"http://127.0.0.1:{peer_port}"
    proc = subprocess.Popen(
        [
            etcd,
            "--data-dir",
            str(data_dir),
            "--enable-v2",
            "--listen-client-urls",
            f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls",
            f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            f"default={peer}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{client_port}/v2/keys", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("etcd did not start with the v2 API")


def run_worker(job: dict, etcd_port: int, base_env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run the worker container's command with its environment, as the pod would."""
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    env = dict(base_env)
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
    env["NODE_NAME"] = "node-a"  # fieldRef spec.nodeName
    env.update(operator_env(job))
    assert env["PET_RDZV_ENDPOINT"] == "fsdp-observe-etcd.fsdp-observe.svc:2379"
    env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{etcd_port}"
    return subprocess.run(container["command"], env=env, capture_output=True, text=True, timeout=240)


def test_a_rendered_etcd_job_trains_and_a_reused_id_would_not(tmp_path: Path, port_block, subprocess_env) -> None:
    base = port_block(4)  # two rank metrics ports, then etcd's client and peer ports
    metrics, etcd_ports = base, base + 2
    settings = settings_from_mapping(
        {
            "IMAGE_URI": "fsdp-observe:test",
            "NUM_NODES": 1,
            "GPU_PER_NODE": 0,
            "NPROC_PER_NODE": 2,
            "MODEL": "tiny",
            "RDZV_BACKEND": "etcd-v2",
            "MAX_RESTARTS": 0,
            "METRICS_PORT": metrics,
            "TRAINER_ARGS": "--steps 2 --seq-len 64 --batch-size 2 --log-every 1",
        }
    )
    etcd = start_etcd(tmp_path / "etcd", etcd_ports, etcd_ports + 1)
    try:
        job = render(settings)
        run_id = job["spec"]["elasticPolicy"]["rdzvId"]
        first = run_worker(job, etcd_ports, subprocess_env)
        assert first.returncode == 0, first.stderr[-3000:]
        # The elastic agent logs the rendezvous result at LOGLEVEL=INFO; job status reads it.
        assert last_master_addr(line.encode() for line in first.stderr.splitlines()) is not None
        assert f"run_id                   : {run_id}" in first.stderr
        assert f"run {run_id}: tiny, 2 rank(s) on cpu/gloo" in first.stdout  # the trainer's run_id label

        again = run_worker(job, etcd_ports, subprocess_env)  # the same id: the walkthrough's situation
        assert again.returncode != 0
        assert "RendezvousClosedError" in again.stderr

        fresh = render(settings)  # a new render, a new id: the same etcd serves it
        assert fresh["spec"]["elasticPolicy"]["rdzvId"] != run_id
        second = run_worker(fresh, etcd_ports, subprocess_env)
        assert second.returncode == 0, second.stderr[-3000:]
    finally:
        etcd.terminate()
        etcd.wait(timeout=10)
