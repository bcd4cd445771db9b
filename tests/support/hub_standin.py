"""A local stand-in for the Hugging Face Hub's HTTP API: enough of it for ``huggingface_hub.snapshot_download``.

No hub is reachable here, so the download code runs against this server through the real
``huggingface_hub`` client (``HF_ENDPOINT=http://127.0.0.1:PORT``): repository info
(``/api/models/REPO/revision/REV``), the file tree (``/api/models/REPO/tree/SHA``), and each file
(``HEAD``/``GET /REPO/resolve/SHA/FILE`` with the ``X-Repo-Commit``, ``ETag`` and size headers the
client reads). A gated repository answers 401 with ``X-Error-Code: GatedRepo`` unless the request
carries its token; an unknown one 401 ``RepoNotFound``; an unknown revision 404 ``RevisionNotFound``,
as the hub does (huggingface_hub ``utils/_http.py`` ``hf_raise_for_status`` reads these).
Every request is recorded, so tests can tell which files were fetched.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    """One model repository: ``files`` (path in the repo -> bytes), its commit and who may read it."""

    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    revisions: tuple[str, ...] = ("main",)
    gated_token: str | None = None  # set: only a request with this bearer token may read it


@dataclass
class HubStandIn:
    """The server; ``url`` is what ``HF_ENDPOINT`` takes. Close with ``close()``."""

    repos: dict[str, Repo] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                hub._answer(self, head=True)

            def do_GET(self) -> None:  # noqa: N802
                hub._answer(self, head=False)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def add_dir(self, repo_id: str, folder: Path, **repo: object) -> Repo:
        """Serve every file under ``folder`` as repository ``repo_id``."""
        files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        self.repos[repo_id] = Repo(files, **repo)  # type: ignore[arg-type]
        return self.repos[repo_id]

    def fetched(self) -> list[str]:
        """Repository file paths whose contents were downloaded (GET of ``resolve``)."""
        return [
            path.split("/resolve/", 1)[1].split("/", 1)[1]
            for method, path in self.requests
            if method == "GET" and "/resolve/" in path
        ]

    def close(self) -> None:
        """Stop serving."""
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- answers ----------------------------------------------------------------------------

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlsplit(h.path).path)
        self.requests.append(("HEAD" if head else "GET", path))
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :]
            for marker in ("/revision/", "/tree/"):
                if marker in rest:
                    repo_id, ref = rest.split(marker, 1)
                    self._api(h, repo_id, marker.strip("/"), ref.split("/", 1)[0])
                    return
        elif "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/", 1)
            ref, _, name = rest.partition("/")
            self._file(h, repo_id, ref, name, head)
            return
        self._send(h, 404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"})

    def _repo(self, h: BaseHTTPRequestHandler, repo_id: str, ref: str) -> Repo | None:
        repo = self.repos.get(repo_id)
        if repo is None:
            self._send(h, 401, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})
            return None
        if repo.gated_token is not None and h.headers.get("Authorization") != f"Bearer {repo.gated_token}":
            self._send(h, 401, b'{"error": "Access to model is restricted"}', {"X-Error-Code": "GatedRepo"})
            return None
        if ref not in repo.revisions and ref != repo.sha:
            self._send(h, 404, b'{"error": "Revision not found"}', {"X-Error-Code": "RevisionNotFound"})
            return None
        return repo

    def _api(self, h: BaseHTTPRequestHandler, repo_id: str, kind: str, ref: str) -> None:
        repo = self._repo(h, repo_id, ref)
        if repo is None:
            return
        if kind == "revision":
            body: object = {
                "id": repo_id,
                "modelId": repo_id,
                "sha": repo.sha,
                "private": False,
                "gated": "manual" if repo.gated_token else False,
                "siblings": [{"rfilename": name} for name in repo.files],
            }
        else:
            body = [
                {"type": "file", "oid": _oid(data), "size": len(data), "path": name}
                for name, data in repo.files.items()
            ]
        self._send(h, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _file(self, h: BaseHTTPRequestHandler, repo_id: str, ref: str, name: str, head: bool) -> None:
        repo = self._repo(h, repo_id, ref)
        if repo is None:
            return
        data = repo.files.get(name)
        if data is None:
            self._send(h, 404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"})
            return
        self._send(
            h,
            200,
            b"" if head else data,
            {"X-Repo-Commit": repo.sha, "ETag": f'"{_oid(data)}"', "Content-Type": "application/octet-stream"},
            length=len(data),
        )

    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str], length: int | None = None
    ) -> None:
        h.send_response(status)
        for key, value in headers.items():
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        if body:
            h.wfile.write(body)


def _oid(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()
