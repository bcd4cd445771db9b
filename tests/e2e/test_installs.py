"""Installs per role, for real: a fresh virtualenv with the base install, then with the k8s,
dashboards and scaling extras, and never torch.

The base install runs ``fsdp-observe top`` on a pseudo-terminal against a recorded agent and
trainer, and refuses the commands of the roles it lacks in one line naming the extra. With the
three extras, ``job render`` and ``job status`` (the recorded API server), ``dashboards --check``
and ``scaling --prometheus`` (a real Prometheus scraping live trainer exporters) run, and torch
is still not importable.

Cost (2 cores, warm pip cache): about 6 s for the base install and 22 s for the three extras (run
with ``-s`` to see both), plus about 25 s for the checks; a cold cache adds the downloads.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from observe import prometheus_local
from tests.support.fake_apiserver import RecordedAPIServer, Reply, write_kubeconfig
from tests.support.fleet import RecordedFleet, trainer_exposition
from tests.support.processes import wait_for
from tests.support.terminal import read_until, wait_exit
from tests.support.tui import GPU0

REPO = Path(__file__).resolve().parents[2]
ROLE_EXTRAS = "k8s,dashboards,scaling"


@dataclass
class Venv:
    """A virtualenv outside the project's own, and what its installs cost."""

    root: Path
    install_seconds: dict[str, float]

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def run(self, args: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, **kw)

    def install(self, label: str, target: str) -> None:
        started = time.monotonic()
        done = self.run(
            [self.bin("python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", target], timeout=900
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        self.install_seconds[label] = round(time.monotonic() - started, 1)
        print(f"{label} install: {self.install_seconds[label]} s")

    def imports(self, module: str) -> bool:
        return self.run([self.bin("python"), "-c", f"import {module}"]).returncode == 0


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    root = tmp_path_factory.mktemp("installs") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    env = Venv(root, {})
    env.install("base", str(REPO))
    return env


def assert_names_the_extra(done: subprocess.CompletedProcess, command: str, extra: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: fsdp-observe {command}: needs the Python module"), done.stderr
    assert done.stderr.rstrip().endswith(f"pip install 'fsdp-observe[{extra}]'"), done.stderr


def test_the_base_install_is_the_cli_and_the_tui(venv: Venv) -> None:
    """Runs first: the module's venv has only the base install here."""
    for module in ("torch", "transformers", "pynvml", "kubernetes", "matplotlib", "grafanalib", "yaml"):
        assert not venv.imports(module), f"the base install brought {module}"
    assert venv.imports("textual") and venv.imports("httpx")
    fleet = RecordedFleet()
    try:
        agent = fleet.agent("gpu-node-1")
        rank = fleet.trainer("rank0", trainer_exposition(0, "gpu-node-1", GPU0, step_seconds=0.5, data_wait=0.02))
        main, child = os.openpty()
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        proc = subprocess.Popen(
            [venv.bin("fsdp-observe"), "top", "--agent", agent, "--trainer", rank],
            stdin=child,
            stdout=child,
            stderr=child,
            env={**env, "TERM": "xterm-256color"},
            start_new_session=True,
        )
        os.close(child)
        try:
            read_until(main, r"gpu-node-1", 30)
            os.write(main, b"q")
            assert wait_exit(main, proc, 20)[0] == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            os.close(main)
    finally:
        fleet.close()
    for argv, extra in (
        (["dashboards", "--check"], "dashboards"),
        (["agent", "--port", "0"], "agent"),
        (["train", "--steps", "1"], "trainer"),
        (["job", "status", "x"], "k8s"),
        (["top", "--kube"], "k8s"),
    ):
        assert_names_the_extra(venv.run([venv.bin("fsdp-observe"), *argv], cwd=venv.root), argv[0], extra)


@pytest.fixture(scope="module")
def roles(venv: Venv) -> Venv:
    venv.install(ROLE_EXTRAS, f"{REPO}[{ROLE_EXTRAS}]")
    return venv


def test_job_runs_without_torch(roles: Venv, tmp_path: Path) -> None:
    assert not roles.imports("torch") and roles.imports("kubernetes")
    done = roles.run(
        [
            roles.bin("fsdp-observe"),
            "job",
            "render",
            "--config",
            str(REPO / "examples" / "llama2-7b.env"),
            "--set",
            "IMAGE_URI=registry.example/fsdp-observe:0.1.0",
            "--run-id",
            "llama2-7b-fsdp-1",
        ]
    )
    assert done.returncode == 0, done.stderr
    (job,) = [doc for doc in yaml.safe_load_all(done.stdout) if doc["kind"] == "PyTorchJob"]  # + its NetworkPolicy
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"]
    assert command[2:4] == ["--no-python", "fsdp-observe-trainer"]
    routes = {
        ("GET", "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/llama2-7b-fsdp"): Reply.recorded(
            "pytorchjob-llama2-7b-fsdp.json"
        ),
        ("GET", "/api/v1/namespaces/default/pods"): Reply.recorded("pods-llama2-7b-fsdp.json"),
        ("GET", "/api/v1/namespaces/default/pods/llama2-7b-fsdp-worker-0/log"): Reply.recorded(
            "log-llama2-7b-fsdp-worker-0.txt"
        ),
        ("GET", "/api/v1/namespaces/default/pods/llama2-7b-fsdp-worker-1/log"): Reply.recorded(
            "log-llama2-7b-fsdp-worker-1.txt"
        ),
    }
    server = RecordedAPIServer(routes)
    try:
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
        done = roles.run(
            [roles.bin("fsdp-observe"), "job", "status", "llama2-7b-fsdp", "--kubeconfig", str(kubeconfig)]
        )
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    assert "llama2-7b-fsdp-worker-1" in done.stdout and "leader" in done.stdout


def test_dashboards_run_without_torch(roles: Venv) -> None:
    done = roles.run([roles.bin("fsdp-observe"), "dashboards", "--check"], cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr


class LiveRun:
    """The trainer's own exporter for each rank of a run, fed steps in real time by a thread (what a
    rank exports, without torch ranks: the scaling report only reads the series)."""

    def __init__(self, run_id: str, world_size: int, steps: int, step_seconds: float) -> None:
        from observe.training.collector import TrainingCollector

        info = {
            "model": "tiny",
            "sharding_strategy": "FULL_SHARD",
            "mixed_precision": "bf16",
            "world_size": str(world_size),
            "device_type": "cpu",
            "backend": "gloo",
        }
        self.ranks = [
            TrainingCollector(
                {"run_id": run_id, "rank": str(r), "local_rank": str(r), "node": "n1"},
                info,
                planned_steps=steps,
                flops_per_token=1_000_000,
                peak_flops=None,
                export_global=r == 0,
            )
            for r in range(world_size)
        ]
        self.steps, self.step_seconds = steps, step_seconds
        self.thread = threading.Thread(target=self._train, daemon=True)

    def render(self, rank: int):
        registry = CollectorRegistry()
        registry.register(self.ranks[rank])
        return lambda: generate_latest(registry)

    def _train(self) -> None:
        for step in range(1, self.steps + 1):
            time.sleep(self.step_seconds)
            for metrics in self.ranks:
                metrics.on_step(step, self.step_seconds, 0.01, labelled_tokens=256, samples=4, learning_rate=1e-3)


@pytest.fixture
def scraped_runs(tmp_path: Path, port_block) -> Iterator[str]:
    """A real Prometheus that scraped run ``one`` (1 rank) and run ``two`` (2 ranks) to the end."""
    if prometheus_local.binary() is None:
        pytest.skip("the prometheus binary is missing: scripts/install-test-deps installs it")
    fleet = RecordedFleet()
    runs = {"one": LiveRun("one", 1, steps=30, step_seconds=0.3), "two": LiveRun("two", 2, steps=30, step_seconds=0.3)}
    targets = [
        fleet.trainer(f"{name}-{r}", run.render(r)).removeprefix("http://").removesuffix("/metrics")
        for name, run in runs.items()
        for r in range(len(run.ranks))
    ]
    prom = prometheus_local.start(
        tmp_path / "prometheus",
        prometheus_local.config({"trainer": targets}, [], scrape_interval="250ms"),
        port_block(1),
    )
    try:

        def scraping() -> bool:
            try:
                active = httpx.get(f"{prom.url}/api/v1/targets", timeout=1).json()["data"]["activeTargets"]
            except (httpx.HTTPError, ValueError, KeyError):
                return False
            return len(active) == 3 and all(t["health"] == "up" for t in active)

        wait_for(scraping, 20, "Prometheus to scrape the three ranks")
        for run in runs.values():
            run.thread.start()
        for run in runs.values():
            run.thread.join(timeout=60)
        time.sleep(1.0)  # two more scrapes see the last step
        yield prom.url
    finally:
        prom.stop()
        fleet.close()


def test_scaling_from_prometheus_runs_without_torch(roles: Venv, scraped_runs: str, tmp_path: Path) -> None:
    assert not roles.imports("torch") and roles.imports("matplotlib")
    out = tmp_path / "report"
    done = roles.run(
        [
            roles.bin("fsdp-observe"),
            "scaling",
            "--prometheus",
            scraped_runs,
            "--run-id",
            "one",
            "--run-id",
            "two",
            "--warmup-steps",
            "3",
            "--out",
            str(out),
        ]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "report.json").read_text())
    assert [(s["run_id"], s["world_size"]) for s in report["sizes"]] == [("one", 1), ("two", 2)]
    assert all(s["finished"] and s["step_to"] == 30 for s in report["sizes"])
    assert (out / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
