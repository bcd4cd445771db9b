"""The kinds of training job ``fsdp-observe job`` renders, watches and stops, one module each.

``JobKind`` (``observe.k8s.kinds.base``) is the interface; ``KINDS`` lists every kind, in the order
``job status|logs|stop`` look a job name up. A new kind is one module here and one entry in
``KINDS``.
"""

from __future__ import annotations

from observe.errors import UserError
from observe.k8s.job_settings import JobSettings
from observe.k8s.kinds.base import JobKind, JobState
from observe.k8s.kinds.pytorchjob import PYTORCHJOB
from observe.k8s.kinds.trainjob import TRAINJOB

__all__ = ["KINDS", "JobKind", "JobState", "kind_named", "kind_of"]

#: Every kind; a job name is looked up in this order (the legacy kind first: a PyTorchJob and a
#: TrainJob of the same name are told apart with ``--kind``).
KINDS: tuple[JobKind, ...] = (PYTORCHJOB, TRAINJOB)


def kind_named(name: str, key: str = "JOB_KIND") -> JobKind:
    """The kind called ``name`` (any letter case).

    Raises:
        UserError: field ``key``: no such kind.
    """
    for kind in KINDS:
        if kind.kind.lower() == name.lower():
            return kind
    raise UserError(key, f"unknown job kind {name!r}", f"choose one of {', '.join(k.kind for k in KINDS)}")


def kind_of(s: JobSettings) -> JobKind:
    """The kind settings ``s`` ask for (``JOB_KIND``).

    Raises:
        UserError: ``JOB_KIND`` names no kind.
    """
    return kind_named(s.job_kind)
