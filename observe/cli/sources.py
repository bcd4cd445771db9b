"""The source flags ``fsdp-observe top`` and ``diagnose`` share: one kind of source, and the
Kubernetes-only flags only with ``--kube``."""

from __future__ import annotations

from collections.abc import Sequence

from observe.errors import UserError


def one_source(
    kinds: Sequence[tuple[str, object]], none_fix: str, kube: bool, kube_only: Sequence[tuple[str, object]]
) -> str:
    """The one source kind given, of ``kinds`` (``(flags, value)``, flags ``/``-joined when several
    flags make one kind).

    Raises:
        UserError: no kind given (``none_fix`` says how), two kinds at once, or a flag of
            ``kube_only`` set without ``kube``.
    """
    given = [name for name, used in kinds if used]
    if not given:
        raise UserError("source", "none given", none_fix)
    if len(given) > 1:
        raise UserError(given[1].split("/")[0], f"cannot be combined with {given[0]}", "choose one kind of source")
    stray = [flag for flag, value in kube_only if value]
    if stray and not kube:
        raise UserError(stray[0], "only applies with --kube", "add --kube, or leave it out")
    return given[0]
