"""A rendered job's pod, stopped as the kubelet stops it: the container's exit status is 143.

``restartPolicy: ExitCode`` (what ``job render`` writes) recreates a pod whose container exited
128-255 and fails the job for 1-127. Plain torchrun met the kubelet's SIGTERM with a
``SignalException`` traceback and status 1, so the operator would have failed a job that was only
evicted or preempted. Here the rendered command of the preset job (``fsdp-observe-torchrun
--no-python fsdp-observe-trainer ...``, no download) runs as the container's first process would,
with the operator's ``PET_*`` variables (c10d rendezvous on this machine, two gloo ranks on CPU),
and gets a SIGTERM mid-training. No Kubernetes here: the process stands in for the container.
"""

from __future__ import annotations

from pathlib import Path

from observe.k8s.job_settings import settings_from_mapping
from observe.k8s.kinds.pytorchjob import RESTART_POLICY, render
from observe.k8s.pod import LAUNCHER
from observe.ports import free_port
from tests.e2e.test_job_rendezvous import operator_env
from tests.support.trainer_runs import events, read_log, sigterm_at_step


def test_the_rendered_launcher_exits_143_on_sigterm_with_one_line(
    tmp_path: Path, corpus: Path, port_block, subprocess_env
) -> None:
    log = tmp_path / "run.jsonl"
    job = render(
        settings_from_mapping(
            {
                "IMAGE_URI": "fsdp-observe:test",
                "JOB_NAME": "stop-me",
                "NUM_NODES": 1,
                "GPU_PER_NODE": 0,
                "NPROC_PER_NODE": 2,
                "MODEL": "tiny",
                "RDZV_BACKEND": "c10d",
                "MAX_RESTARTS": 0,
                "METRICS_PORT": port_block(2),
                "DATA": str(corpus),
                "TRAINER_ARGS": f"--steps 400 --seq-len 64 --batch-size 2 --log-every 1 --metrics-address 127.0.0.1 "
                f"--log-json {log}",
            }
        )
    )
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == RESTART_POLICY == "ExitCode"
    (container,) = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert container["command"][0] == LAUNCHER
    env = {
        **subprocess_env,
        "NODE_NAME": "node-a",
        **{v["name"]: v["value"] for v in container["env"] if "value" in v},
        **operator_env(job),
    }
    env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{free_port()}"  # <job>-worker-0:23456 in the cluster

    status, out = sigterm_at_step(container["command"], env, log, 3, seconds=180, exit_seconds=60)
    assert status == 143, out[-4000:]  # what restartPolicy ExitCode retries (plain torchrun: 1)
    for bad in ("Traceback", "SignalException", "closing signal"):
        assert bad not in out, out[-4000:]
    stop_lines = [line for line in out.splitlines() if line.startswith("SIGTERM:")]
    assert len(stop_lines) == 1 and "exiting (no --checkpoint-dir: nothing is saved)" in stop_lines[0], out[-4000:]
    (stop,) = events(read_log(log), "stop")
    assert stop["signal"] == "SIGTERM" and events(read_log(log), "end")[-1]["exit_status"] == 143
    assert f"stopped by SIGTERM: step {stop['step']}" in out and "exit status 143" in out
