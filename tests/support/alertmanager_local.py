"""A real Alertmanager (Debian's ``prometheus-alertmanager``) on loopback, for end-to-end tests.

Started with gossip off (``--cluster.listen-address=``) and its silences and notification log in
a temporary folder, as FIELD-NOTES.md says; ready on ``/-/ready`` in about a second.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx

from observe.prometheus_local import LocalServer

#: Where Debian puts the binary (it is not called ``alertmanager`` there).
DEBIAN_BINARY = "/usr/bin/prometheus-alertmanager"


def binary() -> str | None:
    """Path of the Alertmanager binary, or ``None``."""
    if Path(DEBIAN_BINARY).exists():
        return DEBIAN_BINARY
    return shutil.which("alertmanager")


class LocalAlertmanager(LocalServer):
    """A running Alertmanager and its URL (its log in ``folder``)."""

    def alerts(self) -> list[dict]:
        """What it holds now (API v2), active, inhibited and silenced alike."""
        return httpx.get(f"{self.url}/api/v2/alerts", timeout=5).raise_for_status().json()


def start(folder: Path, config_text: str, port: int, timeout: float = 20.0) -> LocalAlertmanager:
    """Start Alertmanager with ``config_text`` on 127.0.0.1:``port``; files go in ``folder``.

    Raises:
        FileNotFoundError: no Alertmanager binary.
        RuntimeError: it exited or was not ready within ``timeout`` seconds (the log's tail quoted).
    """
    exe = binary()
    if exe is None:
        raise FileNotFoundError("no Alertmanager binary")
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "alertmanager.yml"
    config.write_text(config_text)
    log = folder / "alertmanager.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                exe,
                f"--config.file={config}",
                f"--storage.path={folder / 'data'}",
                "--cluster.listen-address=",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    running = LocalAlertmanager(proc, f"http://127.0.0.1:{port}", folder)
    if running.wait_ready(timeout):
        return running
    running.stop()
    raise RuntimeError(f"Alertmanager did not start: {log.read_text(errors='replace')[-2000:]}")
