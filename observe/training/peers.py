"""The ranks of one node (one pod), found through the run's dump folder, so each can vouch for the others.

Every rank writes ``rank<R>.json`` (its pid, node, pod and port) into the run's dump folder when it
starts. A rank whose training thread holds the GIL cannot answer HTTP, and a killed rank answers
nothing; the other ranks of its pod still do, and report, from those files, whether each peer's
process is alive and what its GIL watch wrote (``observe.training.stacks.GilWatch``). Ranks are
peers when they share the folder and the pod name (so one process namespace: a pid means the same
process). Standard library only.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

#: The dump folder's setting; default ``<temp dir>/fsdp-observe/<run_id>``. On Kubernetes point it at
#: an emptyDir or the checkpoint volume so the evidence outlives the process.
DUMP_DIR_ENV = "FSDP_OBSERVE_DUMP_DIR"
#: What peers share: the pod (one process namespace), and the run's attempt (a file left by an
#: earlier attempt of a restarted run, or a world of another size, is not a peer).
SAME: tuple[str, ...] = ("pod", "run_id", "restarts", "world_size")
#: The most of a peer's GIL file that ``/debug/state`` carries (the latest firing is at its end).
GIL_TAIL_BYTES = 16384


def dump_dir(run_id: str, environ: dict[str, str] | None = None) -> Path:
    """The run's dump folder: ``FSDP_OBSERVE_DUMP_DIR``, else ``<temp>/fsdp-observe/<run_id>``
    (``run_id`` reduced to ``[A-Za-z0-9._-]``)."""
    env = os.environ if environ is None else environ
    if env.get(DUMP_DIR_ENV):
        return Path(env[DUMP_DIR_ENV])
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id) or "run"
    return Path(tempfile.gettempdir()) / "fsdp-observe" / safe


def gil_file(directory: Path, rank: int) -> Path:
    """Where rank ``rank``'s GIL watch writes its stacks."""
    return directory / f"rank{rank}.gil.txt"


def register(directory: Path, identity: dict[str, Any]) -> Path:
    """Write this rank's ``rank<R>.json`` (``identity`` plus nothing secret: rank, pid, node, pod,
    port) and clear its old GIL file; return the file's path.

    Raises:
        OSError: the folder cannot be written (the caller reports it once and goes on without it).
    """
    directory.mkdir(parents=True, exist_ok=True)
    rank = int(identity["rank"])
    path = directory / f"rank{rank}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(identity, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    gil = gil_file(directory, rank)
    if gil.exists():
        gil.unlink()
    return path


def process_state(pid: int) -> str | None:
    """Process ``pid``'s state letter from ``/proc/<pid>/stat`` (``R`` running, ``S`` sleeping,
    ``D`` in I/O, ``T``/``t`` stopped by a signal or a debugger, ``Z`` zombie; ``proc(5)``), ``X``
    when it does not exist in this process namespace, ``None`` where it cannot be read."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "X"
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def read_peers(directory: Path, me: dict[str, Any]) -> dict[str, Any]:
    """The other ranks of this pod, by rank: ``pid``, ``alive``, ``process_state`` (``process_state``),
    ``local_rank``, ``port`` and, when
    their GIL watch fired, ``gil_stacks`` (its last ``GIL_TAIL_BYTES``)."""
    out: dict[str, Any] = {}
    try:
        files = sorted(directory.glob("rank*.json"))
    except OSError:
        return out
    for path in files:
        try:
            peer = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if peer.get("rank") == me.get("rank") or any(peer.get(k) != me.get(k) for k in SAME):
            continue
        entry: dict[str, Any] = {k: peer.get(k) for k in ("pid", "local_rank", "port", "node", "thread")}
        pid = peer.get("pid")
        state = process_state(pid) if isinstance(pid, int) else None
        entry["process_state"] = state
        entry["alive"] = None if state is None else state not in ("X", "Z")
        gil = gil_file(directory, int(peer["rank"]))
        try:
            size = gil.stat().st_size
            if size:
                with open(gil, "rb") as f:
                    f.seek(max(0, size - GIL_TAIL_BYTES))
                    entry["gil_stacks"] = f.read().decode("utf-8", "replace")
        except OSError:
            pass
        out[str(peer["rank"])] = entry
    return out
