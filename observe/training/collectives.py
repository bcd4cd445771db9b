"""Per-rank collective tracking: what this rank issued last on each process group, which collective a
thread of it is blocked in now, and how long its steps spent blocked (compute = step − data − wait).

Installed once per process (``install``) by every entry point. It replaces the collective functions of
``torch.distributed`` (the names in ``COLLECTIVES``, in both ``torch.distributed`` and
``torch.distributed.distributed_c10d``, so calls that ``torch.distributed`` makes internally, e.g.
``all_gather_object`` → ``all_gather``, are seen too) and ``Work.wait`` on torch's pybind class.
FSDP2 looks ``dist.all_gather_single`` / ``dist.reduce_scatter_single`` up at call time, so its
collectives are seen; so are DDP's Python-side calls and a user's own. Not seen: functional
collectives (``torch.distributed._functional_collectives``, DTensor/TP), which dispatch in C++;
Flight Recorder sees those (``observe.training.flight``), and its counts win where it answers.

Per collective the wrapper adds a few microseconds (a thread-local check, a dict increment, two
``perf_counter`` reads and the input's shape; ``benchmarks/collective_cost.py`` measures it), and
nothing touches a device. ``Work.wait`` is where a gloo rank blocks until every peer has joined: the
time spent there is the collective wait. On NCCL ``Work.wait`` only orders CUDA streams and returns
at once, so host-side wait is ~0 there (docs/hangs.md says what that means for the verdict).

Sequence numbers count the collectives issued on each process group (keyed by ``group_name``, the
key Flight Recorder's ``pg_status`` uses): for the collectives this module sees, they equal Flight
Recorder's ``collective_seq_id``; point-to-point ops are counted apart (``p2p``). Only the
standard library is imported here; ``install`` is given the imported ``torch``.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from observe.training import stacks

#: ``0``/``false``/``no``/``off`` switches collective tracking off (it is on by default).
COLLECTIVES_ENV = "FSDP_OBSERVE_COLLECTIVES"
_OFF = ("0", "false", "no", "off")

#: Collective functions of ``torch.distributed`` that are wrapped, where the installed torch has them.
COLLECTIVES: tuple[str, ...] = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_coalesced",
    "all_gather_into_tensor",
    "all_gather_single",
    "_all_gather_base",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "reduce_scatter_single",
    "_reduce_scatter_base",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
)
#: Point-to-point ops: counted per group apart from collectives (Flight Recorder's ``p2p_seq_id``).
P2P: tuple[str, ...] = ("send", "recv", "isend", "irecv")
#: Async ``Work`` objects remembered for their ``wait`` (a program that never waits on one must not
#: grow memory without bound: the oldest is forgotten first).
MAX_PENDING = 4096
#: Set on this module's wrappers (torch's own decorators set ``__wrapped__`` too).
MARK = "_fsdp_observe_tracked"
#: Shapes kept per collective (an ``all_gather`` into a list of 1,024 tensors keeps two).
MAX_SHAPES = 2


class Issued(NamedTuple):
    """One collective as this rank issued it (a named tuple: it is made on every collective).

    Attributes:
        pg: the process group's ``group_name`` (``"0"`` for the default group).
        seq: its sequence number on that group (1 for the first).
        op: the ``torch.distributed`` function name (``all_gather_single``).
        shapes: shapes of its first tensor arguments (input first), at most ``MAX_SHAPES``.
        issued_at: ``time.perf_counter()`` when it was issued.
        p2p: a point-to-point op (``seq`` counts those apart).
    """

    pg: str
    seq: int
    op: str
    shapes: tuple[Any, ...]
    issued_at: float
    p2p: bool = False


class Blocked(NamedTuple):
    """A thread blocked in ``Work.wait``: on which collective (``None`` when the ``Work`` came from a
    path this module does not see), since when (``time.perf_counter()``), and which thread."""

    collective: Issued | None
    since: float
    thread: int


class CollectiveTracker:
    """The process's collective state, written by the wrapped functions on the training threads and
    read by the exporter's threads (plain attribute and dict reads under the GIL; no lock on the hot
    path).

    Attributes:
        issued: collectives issued per process group (the sequence number of the last one).
        completed: collectives per group whose wait returned (for a synchronous call, its return).
        last: the last collective issued per group.
        blocked: the threads blocked in ``Work.wait`` now, by thread id.
        wait_seconds: total seconds ``training_thread`` spent in ``Work.wait`` since ``install``.
        progress: a count that moves whenever a collective completes (for the stall watchdog).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.issued: dict[str, int] = {}
        self.p2p_issued: dict[str, int] = {}
        self.completed: dict[str, int] = {}
        self.last: dict[str, Issued] = {}
        self.blocked: dict[int, Blocked] = {}
        self.wait_seconds = 0.0
        self.progress = 0
        #: The thread whose waits count as the steps' collective wait (the thread that ends steps;
        #: a background thread's waits, e.g. an async checkpoint's, are not the step's).
        self.training_thread = threading.main_thread().ident
        self._pending: dict[int, Issued] = {}
        self._local = threading.local()
        self._default_pg: Callable[[], Any] | None = None
        self._default_name: str | None = None
        self._names: dict[int, str] = {}

    # -- the hot path (training threads) ----------------------------------------------------------

    def issue(self, op: str, group: Any, args: tuple[Any, ...], p2p: bool = False) -> Issued:
        """Record that ``op`` was issued on ``group`` (``None``: the default group) with ``args``."""
        pg = self._default_name if group is None and self._default_name else self._names.get(id(group))
        if pg is None:
            pg = self._group_name(group)
        counts = self.p2p_issued if p2p else self.issued
        seq = counts.get(pg, 0) + 1
        counts[pg] = seq
        shapes = []
        for a in args:
            shape = getattr(a, "shape", None)  # a torch.Size: a tuple already, kept as it is
            if shape is None and a.__class__ is list and a:
                shape = getattr(a[0], "shape", None)
            if shape is not None:
                shapes.append(shape)
                if len(shapes) == MAX_SHAPES:
                    break
        issued = Issued(pg, seq, op, tuple(shapes), self.clock(), p2p)
        if not p2p:
            self.last[pg] = issued
        return issued

    def remember(self, work: Any, issued: Issued) -> None:
        """An async collective returned ``work``: its ``wait`` belongs to ``issued``."""
        if work is None:
            return
        pending = self._pending
        if len(pending) >= MAX_PENDING:
            pending.pop(next(iter(pending)))
        pending[id(work)] = issued

    def complete(self, issued: Issued | None) -> None:
        """``issued`` has completed on this rank (its wait returned, or its synchronous call)."""
        if issued is None or issued.p2p:
            self.progress += 1
        elif self.completed.get(issued.pg, 0) < issued.seq:
            self.completed[issued.pg] = issued.seq
            self.progress += 1

    def wait(self, original: Callable[..., Any], work: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``Work.wait`` through the tracker: time it, mark the thread blocked while it waits."""
        issued = self._pending.pop(id(work), None) or getattr(self._local, "current", None)
        thread = threading.get_ident()
        started = self.clock()
        self.blocked[thread] = Blocked(issued, started, thread)
        try:
            return original(work, *args, **kwargs)
        finally:
            self.blocked.pop(thread, None)
            if thread == self.training_thread:
                self.wait_seconds += self.clock() - started
            self.complete(issued)

    # -- reading (exporter threads) ------------------------------------------------------------------

    def longest_blocked(self, now: float | None = None) -> tuple[Blocked, float] | None:
        """The thread blocked longest now and for how many seconds, or ``None``."""
        blocked = list(self.blocked.values())
        if not blocked:
            return None
        first = min(blocked, key=lambda b: b.since)
        return first, max(0.0, (self.clock() if now is None else now) - first.since)

    # -- internals --------------------------------------------------------------------------------

    def _group_name(self, group: Any) -> str:
        """``group``'s name, looked up once per group object (``group_name`` asks C++; the groups
        of a run live as long as it does)."""
        default = group is None
        if default:
            if self._default_pg is None:
                return "0"
            try:
                group = self._default_pg()
            except Exception:  # noqa: BLE001 - no default group yet: the call itself will raise
                return "0"
        name = getattr(group, "group_name", None)
        pg = str(name) if name is not None else "0"
        if default:
            self._default_name = pg
        else:
            self._names[id(group)] = pg
        return pg

    def wrap(self, name: str, fn: Callable[..., Any], p2p: bool = False) -> Callable[..., Any]:
        """``fn`` (a ``torch.distributed`` function named ``name``) recording each call. Calls made
        while another wrapped call runs on the same thread (``all_gather_object`` → ``all_gather``
        when both are wrapped) count once, as the outer call."""
        try:
            params = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = []
        group_at = params.index("group") if "group" in params else None
        async_at = params.index("async_op") if "async_op" in params else None
        local = self._local
        tracker = self

        def tracked(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "current", None) is not None:
                return fn(*args, **kwargs)
            group = kwargs.get("group")
            if group is None and group_at is not None and len(args) > group_at:
                group = args[group_at]
            issued = tracker.issue(name, group, args, p2p)
            local.current = issued
            try:
                result = fn(*args, **kwargs)
            finally:
                local.current = None
            is_async = kwargs.get("async_op")
            if is_async is None and async_at is not None and len(args) > async_at:
                is_async = args[async_at]
            if is_async or name in ("isend", "irecv"):
                tracker.remember(result, issued)
            else:
                tracker.complete(issued)
            return result

        tracked.__name__ = tracked.__qualname__ = getattr(fn, "__name__", name)
        tracked.__doc__ = fn.__doc__
        tracked.__wrapped__ = fn  # type: ignore[attr-defined]
        setattr(tracked, MARK, True)
        return tracked


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether ``FSDP_OBSERVE_COLLECTIVES`` leaves collective tracking on (the default)."""
    return (os.environ if environ is None else environ).get(COLLECTIVES_ENV, "").strip().lower() not in _OFF


_lock = threading.Lock()
_tracker: CollectiveTracker | None = None


def tracker() -> CollectiveTracker | None:
    """The process's tracker, or ``None`` before ``install``."""
    return _tracker


def install(torch: ModuleType) -> CollectiveTracker:
    """Wrap the imported ``torch``'s collectives and ``Work.wait`` once per process; return the tracker.

    Raises nothing for a torch without ``torch.distributed`` (a tracker that sees nothing is returned).
    """
    global _tracker
    with _lock:
        if _tracker is not None:
            return _tracker
        t = CollectiveTracker()
        _tracker = t
        stacks.HIDDEN.add(__file__)
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available():
            return t
        import torch.distributed.distributed_c10d as c10d  # the module the functions live in

        t._default_pg = getattr(c10d, "_get_default_group", None)
        for names, p2p in ((COLLECTIVES, False), (P2P, True)):
            for name in names:
                fn = getattr(c10d, name, None)
                if fn is None or getattr(fn, MARK, False):
                    continue
                wrapped = t.wrap(name, fn, p2p)
                setattr(c10d, name, wrapped)
                if getattr(dist, name, None) is fn:
                    setattr(dist, name, wrapped)
        work = getattr(torch._C._distributed_c10d, "Work", None)
        original = getattr(work, "wait", None)
        if work is not None and original is not None and not getattr(original, MARK, False):

            def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
                return t.wait(original, self, args, kwargs)

            wait.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(wait, MARK, True)
            wait.__doc__ = getattr(original, "__doc__", None)
            work.wait = wait
        return t
