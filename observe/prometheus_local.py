"""A local Prometheus for ``fsdp-observe demo --prometheus``: the generated rules, scraping this
machine's agent and trainer ranks.

Starts the ``prometheus`` binary on PATH (Debian/Ubuntu: ``apt-get install prometheus``) on
loopback with a generated config and a fresh TSDB folder, and waits until it reports ready.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

DEFAULT_PORT = 9090


def binary() -> str | None:
    """Path of the ``prometheus`` binary on PATH, or ``None``."""
    return shutil.which("prometheus")


def config(
    targets: dict[str, list[str]], rule_files: list[Path], scrape_interval: str = "2s", evaluation_interval: str = "5s"
) -> dict:
    """A Prometheus config: one scrape job per ``targets`` key (job name → ``host:port`` list)."""
    return {
        "global": {
            "scrape_interval": scrape_interval,
            "scrape_timeout": scrape_interval,
            "evaluation_interval": evaluation_interval,
        },
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": hosts}]} for job, hosts in targets.items()],
    }


@dataclass
class LocalServer:
    """A running local server process of the Prometheus family (Prometheus, Alertmanager) and where
    to reach it."""

    proc: subprocess.Popen
    url: str
    folder: Path

    def wait_ready(self, timeout: float) -> bool:
        """Poll ``/-/ready`` until it answers 200 (True), the process exits or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return False

    def stop(self) -> None:
        """SIGTERM, then wait (SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class LocalPrometheus(LocalServer):
    """A running Prometheus process and where to reach it."""


def start(folder: Path, settings: dict, port: int, timeout: float = 20.0) -> LocalPrometheus:
    """Start Prometheus with the config ``settings`` on 127.0.0.1:``port``; files go in ``folder``.

    Raises:
        FileNotFoundError: no ``prometheus`` binary on PATH.
        RuntimeError: it exited or was not ready within ``timeout`` seconds (the message quotes
            its last error line, e.g. a taken port or a bad rule file).
    """
    exe = binary()
    if exe is None:
        raise FileNotFoundError("no prometheus binary on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / "prometheus.yml"
    config_path.write_text(json.dumps(settings, indent=2) + "\n")  # JSON is YAML
    log_path = folder / "prometheus.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                exe,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = LocalPrometheus(proc, f"http://127.0.0.1:{port}", folder)
    if running.wait_ready(timeout):
        return running
    running.stop()
    errors = [line for line in log_path.read_text(errors="replace").splitlines() if "level=error" in line]
    reason = _logfmt_error(errors[-1]) if errors else f"not ready within {timeout:g} s"
    raise RuntimeError(f"Prometheus did not start: {reason} (log: {log_path})")


def _logfmt_error(line: str) -> str:
    """The ``err`` (else ``msg``) value of one of Prometheus' logfmt lines, unquoted."""
    for key in ("err", "msg"):
        if m := re.search(key + r'="((?:[^"\\]|\\.)*)"', line):
            return m.group(1).replace('\\"', '"')
    return line
