"""A stand-in for Kubeflow Trainer's TrainJob status endpoint: HTTPS with a CA of its own, a token checked.

A test double: Trainer's controller cannot run here. It does what ``pkg/statusserver`` does with a
push: the path ``/apis/trainer.kubeflow.org/v1alpha1/namespaces/<ns>/trainjobs/<name>/status``,
``POST`` only; ``Authorization: Bearer <token>`` must be the token issued last (``issue``: the
kubelet rotates a pod's projected token file and the API server accepts only a current token;
the token file is the pod's copy, which a test may also spoil);
the body's ``trainerStatus`` must pass the TrainJob CRD's ``status.trainerStatus`` schema (the
API server's check when the controller applies it); answers 200 with the body, or a Kubernetes
``Status`` (403 ``Forbidden``, 422 ``Invalid``, 404). Its certificate is signed by a CA made with
the real ``openssl`` for the test, so the client must trust that CA and nothing else.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from tests.support.kube_checks import crd_schema
from tests.support.local_http import BackgroundServer, QuietHandler

STATUS_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"


def make_ca_and_server_cert(folder: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: ``(ca.crt, server.crt, server.key)``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt = folder / "ca.key", folder / "ca.crt"
    key, csr, crt, ext = folder / "server.key", folder / "server.csr", folder / "server.crt", folder / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    for argv in (
        ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]
        + ["-subj", "/CN=stand-in trainer CA"]
        + ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"]
        + ["-keyout", str(ca_key), "-out", str(ca_crt)],
        ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1"]
        + ["-keyout", str(key), "-out", str(csr)],
        ["x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial", "-days", "1"]
        + ["-extfile", str(ext), "-out", str(crt)],
    ):
        subprocess.run(["openssl", *argv], check=True, capture_output=True, timeout=60)
    return ca_crt, crt, key


@dataclass
class Push:
    """One request the endpoint answered: when, the token sent, the body, the status answered."""

    at: float
    token: str | None
    body: Any
    status: int


@dataclass
class ProgressServer:
    """The endpoint for TrainJob ``namespace/name``, its CA and token files under ``folder``."""

    folder: Path
    namespace: str = "default"
    name: str = "llama2-7b-trainjob"
    pushes: list[Push] = field(default_factory=list)
    #: While cleared, requests wait (a slow controller); set by default.
    open_gate: threading.Event = field(default_factory=threading.Event)
    #: Requests waiting at the gate now.
    waiting: int = 0

    def __post_init__(self) -> None:
        self.ca_file, cert, key = make_ca_and_server_cert(self.folder / "tls")
        self.token_file = self.folder / "token"
        self.issue("token-1")
        self.open_gate.set()
        schema = crd_schema("trainer.kubeflow.org_trainjobs.yaml")["properties"]["status"]["properties"][
            "trainerStatus"
        ]
        validator = jsonschema.validators.validator_for(schema)(schema)
        path = STATUS_PATH.format(namespace=self.namespace, name=self.name)
        server = self
        lock = threading.Lock()

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                with lock:
                    server.waiting += 1
                server.open_gate.wait(60)
                with lock:
                    server.waiting -= 1
                auth = self.headers.get("Authorization") or ""
                token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw
                if self.path != path:
                    status, answer = 404, _status(404, "NotFound", "Not found")
                elif token != server.token:
                    status, answer = 403, _status(403, "Forbidden", "Forbidden")
                elif not isinstance(body, dict) or "trainerStatus" not in body:
                    status, answer = 422, _status(422, "Invalid", "Invalid payload")
                else:
                    errors = sorted(e.message for e in validator.iter_errors(body["trainerStatus"]))
                    status, answer = (422, _status(422, "Invalid", errors[0])) if errors else (200, body)
                with lock:
                    server.pushes.append(Push(time.monotonic(), token, body, status))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self._server = BackgroundServer(Handler, tls=tls)
        self.url = self._server.url + path

    def issue(self, token: str) -> None:
        """A new token: the only one accepted from now on, written to the pod's token file."""
        self.token = token
        self.token_file.write_text(token + "\n")

    def env(self) -> dict[str, str]:
        """The variables Trainer's TrainJobStatus plugin gives a trainer container, pointing here."""
        return {
            "KUBEFLOW_TRAINER_SERVER_URL": self.url,
            "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(self.ca_file),
            "KUBEFLOW_TRAINER_SERVER_TOKEN": str(self.token_file),
        }

    def accepted(self) -> list[dict[str, Any]]:
        """The ``trainerStatus`` of every push answered 200, in order."""
        return [p.body["trainerStatus"] for p in self.pushes if p.status == 200]

    def close(self) -> None:
        """Let waiting requests go, and stop serving."""
        self.open_gate.set()
        self._server.close()


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` failure body, as the endpoint answers errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def metrics_of(status: dict[str, Any]) -> dict[str, str]:
    """``{name: value}`` of a ``trainerStatus``'s metrics."""
    return {m["name"]: m["value"] for m in status.get("metrics", [])}
