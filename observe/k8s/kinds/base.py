"""``JobKind``: what one kind of training job on Kubernetes is, behind one small interface.

A kind is a description, not a client: it says where its API lives, which settings it can
render and how (from ``JobSettings`` and the kind-independent pod of ``observe.k8s.pod``), how its
pods are labelled and found, how its status reads and what stopping it means. It makes no API
call itself; ``observe.k8s.jobs`` does those for every kind, and ``observe.k8s.access`` grants
them. A new kind (a JobSet, a HyperPod job) is one new module in this package, listed in
``observe.k8s.kinds.KINDS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from observe.k8s.job_settings import JobSettings


@dataclass(frozen=True)
class JobState:
    """A job's state as ``job status`` prints it.

    Attributes:
        condition: the state in one word (``Running``, ``Complete``, ``Failed``, ``Suspended``,
            ``Pending`` ...), as the kind's status conditions say.
        reason: the condition's reason (``DeadlineExceeded`` ...), empty when none.
        since: the condition's ``lastTransitionTime``, empty when none.
    """

    condition: str
    reason: str = ""
    since: str = ""


class JobKind(ABC):
    """One kind of training job.

    Class attributes:
        kind: the object's ``kind`` (and the ``JOB_KIND`` setting's value), e.g. ``TrainJob``.
        group, version, plural: where its API lives (``/apis/<group>/<version>/.../<plural>``).
        install: what installs that API, for the error a cluster without it gets.
        container: the trainer container of its pods, whose log ``job logs`` reads.
    """

    kind: ClassVar[str]
    group: ClassVar[str]
    version: ClassVar[str]
    plural: ClassVar[str]
    install: ClassVar[str]
    container: ClassVar[str]

    @property
    def api_version(self) -> str:
        """``<group>/<version>``, the objects' ``apiVersion``."""
        return f"{self.group}/{self.version}"

    # -- settings and the rendered job ---------------------------------------------------------

    @abstractmethod
    def check(self, s: JobSettings) -> None:
        """Refuse settings this kind cannot render (``s`` already passed ``JobSettings.validate``).

        Raises:
            UserError: naming the setting and the fix.
        """

    @abstractmethod
    def render(self, s: JobSettings, run_id: str) -> list[dict[str, Any]]:
        """The objects to apply for ``s`` (checked), the job last, as JSON-compatible dicts."""

    def warnings(self, s: JobSettings) -> list[str]:
        """What this kind cannot carry over from ``s``, one line each (``job render`` prints them)."""
        return []

    @abstractmethod
    def policy_ports(self, s: JobSettings) -> list[dict[str, Any]]:
        """The ranks' metrics ports as the job's NetworkPolicy names them (``ports`` entries)."""

    # -- a running job -------------------------------------------------------------------------

    @abstractmethod
    def pod_selector(self, name: str) -> str:
        """The label selector of job ``name``'s pods, as its controller labels them."""

    @abstractmethod
    def node_index(self, labels: dict[str, str]) -> int | None:
        """A pod's node rank from its labels; ``None`` when they do not say."""

    @abstractmethod
    def state(self, job: dict[str, Any]) -> JobState:
        """The job's state from its ``status`` (the object as the API returns it)."""

    @abstractmethod
    def describe(self, job: dict[str, Any]) -> list[str]:
        """Lines ``job status`` prints under the state: how the job is set up and how far it got."""

    @abstractmethod
    def suspend_patch(self) -> dict[str, Any]:
        """The merge patch that suspends the job: its pods are deleted and the object stays."""

    def etcd_host(self, job: dict[str, Any]) -> str | None:
        """The etcd host holding the job's rendezvous state, which stopping it should clear (by
        restarting that etcd); ``None`` when there is none."""
        return None


def last_true_condition(job: dict[str, Any]) -> JobState | None:
    """The last of ``status.conditions`` whose ``status`` is ``"True"`` (both Kubeflow kinds keep
    their conditions in the order they happened), or ``None``."""
    conditions = [c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"]
    if not conditions:
        return None
    last = conditions[-1]
    return JobState(last.get("type", "Pending"), last.get("reason", ""), last.get("lastTransitionTime", ""))


def int_label(labels: dict[str, str], key: str) -> int | None:
    """Label ``key`` as a whole number (a node rank), ``None`` when absent or not one."""
    value = labels.get(key)
    return int(value) if value is not None and value.isdigit() else None


def default_of(name: str) -> Any:
    """The default of ``JobSettings`` field ``name`` (a kind refuses settings moved off it)."""
    return next(f.default for f in fields(JobSettings) if f.name == name)
