"""The rank's ``/debug/`` pages, on its metrics port beside ``/metrics``.

Same audience as ``/metrics`` (Prometheus, ``fsdp-observe top`` and ``diagnose``) and nothing secret:
stacks name files, lines and functions (no local variables, no arguments, no environment), and
collectives carry their op, process group, sequence number and tensor shapes, never data.
Nothing here pauses training: each page reads host-side state and ``sys._current_frames`` from the
request's own thread, and the costly Flight Recorder dump is only ever read back from the file the
stall watchdog wrote.

- ``GET /debug/state``: the ``/debug/state`` JSON document (``RankForensics.state_json``);
- ``GET /debug/stacks``: every thread's stack as text;
- ``GET /debug/stall``: the evidence the watchdog wrote at the last stall (404 before one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from observe.training.forensics import RankForensics
from observe.training.stacks import all_stacks

PREFIX = "/debug/"


def _answer(start_response: Callable[..., Any], status: str, body: bytes, kind: str) -> Iterable[bytes]:
    start_response(status, [("Content-Type", kind), ("Content-Length", str(len(body))), ("Cache-Control", "no-store")])
    return [body]


def stacks_text() -> str:
    """Every thread's stack, a block per thread, innermost frame last."""
    blocks = []
    for name, frames in all_stacks().items():
        blocks.append(f"Thread {name}:\n" + "\n".join(f"  {f}" for f in frames))
    return "\n\n".join(blocks) + "\n"


def wrap(app: Callable[..., Iterable[bytes]], forensics: Callable[[], RankForensics | None]) -> Callable[..., Any]:
    """The WSGI ``app`` with the ``/debug/`` pages in front of it (``forensics`` returns the rank's
    evidence, or ``None`` when collective tracking is off: the pages then answer 404)."""

    def debug(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", ""))
        if not path.startswith(PREFIX):
            return app(environ, start_response)
        f = forensics()
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return _answer(start_response, "405 Method Not Allowed", b"GET only\n", "text/plain")
        if f is None:
            return _answer(start_response, "404 Not Found", b"collective tracking is off in this rank\n", "text/plain")
        page = path[len(PREFIX) :]
        if page == "state":
            body = json.dumps(f.state_json(), default=str).encode()
            return _answer(start_response, "200 OK", body, "application/json")
        if page == "stacks":
            return _answer(start_response, "200 OK", stacks_text().encode(), "text/plain; charset=utf-8")
        if page == "stall":
            evidence = (f.stall or {}).get("evidence")
            if evidence:
                try:
                    return _answer(start_response, "200 OK", Path(evidence).read_bytes(), "application/json")
                except OSError:
                    pass
            return _answer(start_response, "404 Not Found", b"no stall recorded\n", "text/plain")
        return _answer(
            start_response, "404 Not Found", b"pages: /debug/state /debug/stacks /debug/stall\n", "text/plain"
        )

    return debug
