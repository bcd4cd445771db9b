"""The one user-error type of fsdp-observe: a field, what is wrong with it, and the fix.

Every package (the trainer, the agent, the TUI, the Kubernetes and monitoring code) raises
``UserError`` for a mistake the user can fix: a flag, a settings key, a file, a taken port. One
place, the ``fsdp-observe`` dispatcher (``observe.cli``), turns it into one line on stderr,
``error: FIELD: PROBLEM; FIX``, and exit status 2, with no traceback. Programming errors stay
ordinary exceptions and are never reported as user mistakes.

Standard library only: a leaf module every package may import.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path

#: The exit status of a user mistake (as argparse uses for a usage error).
USER_ERROR_EXIT_STATUS = 2


class UserError(Exception):
    """A setting, flag, file or endpoint the user gave that cannot work.

    Printed as ``FIELD: PROBLEM; FIX``.

    Args:
        field: the flag or setting at fault, as the user spells it (``--seq-len``,
            ``MODEL``, ``--settings``), or the command for argparse's own mistakes.
        problem: what is wrong with the value given.
        fix: what to do instead (a command, a flag, a value).

    Attributes:
        exit_status: the process exit status for this mistake (2).
    """

    exit_status = USER_ERROR_EXIT_STATUS

    def __init__(self, field: str, problem: str, fix: str) -> None:
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}; {fix}")


def did_you_mean(value: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The one of ``choices`` closest to ``value`` (compared in lower case, ``difflib``'s ratio at
    least ``cutoff``), e.g. ``llama2-7b`` for ``llama-2-7B``; ``None`` when none is close."""
    import difflib

    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(value.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[close[0]] if close else None


class PortInUseError(UserError):
    """A port the user asked for (or the default) is held by another process.

    A subclass so callers that can choose another port (the demo) catch the kind, never the text.

    Args:
        field: the flag that sets the port (``--port``, ``--metrics-port``).
        address: the bind address; port: the port that is taken.
        fix: what to do instead.
    """

    def __init__(self, field: str, address: str, port: int, fix: str) -> None:
        from observe.ports import port_holder

        self.address, self.port = address, port
        holder = port_holder(port)
        held = f" by {holder}" if holder else " (no process listens there; it is bound without listening)"
        super().__init__(field, f"port {port} on {address} is already in use{held}", fix)


def bind_error(
    field: str, address: str, port: int, exc: OSError, fix: str, address_field: str | None = None
) -> UserError:
    """The ``UserError`` for a failed ``bind(address, port)``.

    ``PortInUseError`` (``field``, the port's flag) for ``EADDRINUSE``. An address that cannot
    be served (no interface of this machine has it, a name that does not resolve) names
    ``address_field`` when given, with the fix for the address. Anything else gives the OS's
    reason (``EACCES`` ...) under ``field``.
    """
    import errno
    import socket

    if exc.errno == errno.EADDRINUSE:
        return PortInUseError(field, address, port, fix)
    bad_address = isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)
    if address_field is not None and bad_address:
        return UserError(
            address_field,
            f"cannot serve on {address!r} ({exc.strerror or exc}): it is not an address of this machine",
            f"pass {address_field} 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or an "
            "address 'ip -brief address' lists",
        )
    return UserError(field, f"cannot serve on {address}:{port} ({exc.strerror or exc})", fix)


def prove_writable(folder: Path) -> None:
    """Create ``folder`` if needed and write and remove a probe file in it. The probe's name is
    unique (``tempfile``), never a file someone else may be using: ranks on several nodes probe one
    shared checkpoint folder at once (in containers their pids are often the same), and every rank
    validates the ``--log-json`` that rank 0 may already be writing.

    Raises:
        OSError: it cannot be created or written (read-only, no permission, a file in the way).
    """
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
        pass


def writable_dir(path: Path, field: str, fix: str) -> Path:
    """Create the folder ``path`` names if needed and prove a file can be written in it
    (``prove_writable``); ``path``.

    Raises:
        UserError: naming ``field``, with the system's reason and ``fix``, when it cannot be
            created or written (read-only, no permission, a file in the way).
    """
    try:
        prove_writable(path)
    except OSError as exc:
        raise UserError(field, f"cannot write to {str(path)!r} ({exc.strerror})", fix) from None
    return path
