"""``fsdp-observe top``: the Textual application and ``make_app``, the factory the CLI and tests use.

The app owns one ``Poller`` (the fan-in thread) and the latest ``ClusterSnapshot``. When a
refresh lands, the screen on top redraws from it; a screen brought back later redraws from the
latest snapshot when it resumes. Keys follow htop and nvtop: ``q`` quit, ``?`` help, ``s``/F6
sort, ``/`` filter, Enter drill down, Esc back, ``r`` refresh now; ``1``/``2``/``3``/``4`` switch
between the Cluster, Run, Alerts and GPU grid screens; Ctrl-C quits as ``q`` does.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from textual.app import App
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen

from observe.sources.view import ClusterSnapshot
from observe.tui import strips
from observe.tui.poller import Poller, Source

#: The footer shows the four screen keys as one entry (``1234 screens``); help lists each.
SCREENS = Binding.Group("screens", compact=True)


#: Refreshes after which the objects alive are frozen out of the garbage collector's sight.
FREEZE_REFRESHES = 3
#: How often the app looks at ``should_stop`` (seconds).
STOP_POLL_SECONDS = 0.1

ScreenT = TypeVar("ScreenT", bound=Screen)


class SnapshotReady(Message):
    """A refresh finished (the snapshot itself waits in ``TopApp.pending``: refreshes coalesce)."""


class TopApp(App):
    """The terminal UI over one source.

    Args:
        source: where data comes from (``observe.sources``).
        interval: seconds between refreshes; ``None`` adapts to the node count.
        poll: start the fan-in thread on mount (tests that feed snapshots by hand pass ``False``).
        should_stop: polled every ``STOP_POLL_SECONDS``; when it returns True the app exits (a stop
            signal recorded by ``observe.stopping``: the handler itself never touches the app).
    """

    CSS_PATH = Path(__file__).with_name("top.tcss")
    TITLE = "fsdp-observe top"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),  # as htop and nvtop
        Binding("question_mark", "help", "help"),
        Binding("r", "refresh_now", "refresh"),
        Binding("1", "show('cluster')", "cluster", group=SCREENS),
        Binding("2", "show('run')", "run", group=SCREENS),
        Binding("3", "show('alerts')", "alerts", group=SCREENS),
        Binding("4", "show('grid')", "grid", group=SCREENS),
    ]

    def __init__(
        self,
        source: Source,
        interval: float | None = None,
        poll: bool = True,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__()
        strips.install()  # no frame's drawing left behind as cyclic garbage (observe.tui.strips)
        self.should_stop = should_stop
        self.source = source
        self.poll = poll
        self.poller = Poller(source, self._deliver, interval, pace_collector=poll)
        self.snapshot = ClusterSnapshot(time_unix=0.0, source=getattr(source, "description", ""))
        self.pending: ClusterSnapshot | None = None
        self._pending_lock = threading.Lock()
        self.refreshes = 0
        self._kept: dict[type[Screen], Screen] = {}

    # -- data ---------------------------------------------------------------------------------

    def _deliver(self, snapshot: ClusterSnapshot) -> None:
        """Called on the poller thread: keep the latest, wake the UI once (coalesced)."""
        with self._pending_lock:
            already = self.pending is not None
            self.pending = snapshot
        if not already:
            self.post_message(SnapshotReady())

    def on_snapshot_ready(self, _: SnapshotReady) -> None:
        with self._pending_lock:
            snapshot, self.pending = self.pending, None
        if snapshot is not None:
            self.show_snapshot(snapshot)

    def show_snapshot(self, snapshot: ClusterSnapshot) -> None:
        """Make ``snapshot`` the current one and redraw the screen on top."""
        self.snapshot = snapshot
        self.refreshes += 1
        # a refresh that lands while the app closes finds no screen left to draw on
        update = getattr(self.screen, "update_snapshot", None) if self.screen_stack else None
        if update is not None:
            try:
                update(snapshot)
            except NoMatches:  # the screen was just pushed and is still composing: it draws
                pass  # app.snapshot itself when it mounts

        if self.refreshes <= FREEZE_REFRESHES:
            self.call_after_refresh(self._freeze_startup_objects)

    @staticmethod
    def _freeze_startup_objects() -> None:
        """Move every object alive after each of the first ``FREEZE_REFRESHES`` frames (modules,
        Textual's widgets and CSS, the kept-alive connections to every agent, opened over the first
        refreshes) out of the garbage collector's sight (``gc.freeze``).

        A full collection holds the GIL while it walks every tracked object; at start-up that is
        several hundred thousand, which made a 1,024-node TUI stall for 100-135 ms whenever the
        collector's oldest generation ran (``benchmarks/tui_fanin.py``); at 4,096 nodes the
        connections alone are some 80,000 objects more. Afterwards it walks only the data of the
        last refreshes. Frozen objects are still freed when their last reference goes; only cyclic
        garbage of those first refreshes stays (bounded: it is never made again).
        """
        gc.freeze()

    def kept(self, kind: type[ScreenT]) -> ScreenT:
        """The app's one screen of class ``kind``: made and installed the first time, then kept
        mounted while out of sight, so going to it again costs no compose and no CSS matching of
        its widgets. At 8-16 nodes that was most of a switch: Enter on a node stalled the UI for
        65-112 ms each time (``benchmarks/tui_fanin.py``, switch figures). Its widgets are moved
        out of the garbage collector's sight once it has first been drawn (``drawn``)."""
        screen = self._kept.get(kind)
        if screen is None:
            screen = self._kept[kind] = kind()
            self.install_screen(screen, kind.__name__)
        return screen  # type: ignore[return-value]  # made as kind() above

    def drawn(self, screen: Screen) -> None:
        """``screen`` was mounted and drawn for the first time. A kept one lives as long as the
        app: its widgets, styles and caches are frozen out of the garbage collector's sight, as
        start-up's are (``_freeze_startup_objects``), so no full collection walks them again."""
        if screen in self._kept.values():
            gc.freeze()

    def open_node(self, node: str) -> None:
        """Show ``node`` on the Node screen (the kept one, switched to this node), over the screen on top."""
        from observe.tui.screens.node import NodeScreen

        screen = self.kept(NodeScreen)
        if screen in self.screen_stack:  # not reachable from a screen above it; never twice on the stack
            return
        screen.show_node(node)
        self.push_screen(screen)

    def set_focus_node(self, node: str | None) -> None:
        """Ask for ``node``'s full snapshot (processes) from now on; ``None`` for summaries only."""
        self.poller.set_focus(node)

    # -- lifecycle -----------------------------------------------------------------------------

    def on_mount(self) -> None:
        from observe.tui.screens.cluster import ClusterScreen

        self.push_screen(ClusterScreen())
        if self.poll:
            self.poller.start()
        if self.should_stop is not None:
            self.set_interval(STOP_POLL_SECONDS, self._exit_if_asked)

    def _exit_if_asked(self) -> None:
        if self.should_stop is not None and self.should_stop():
            self.exit()

    def on_unmount(self) -> None:
        if self.poll:
            self.poller.stop()

    # -- actions -------------------------------------------------------------------------------

    def action_refresh_now(self) -> None:
        self.poller.refresh_now()
        self.notify("refreshing", timeout=1)

    def action_help(self) -> None:
        from observe.tui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_show(self, name: str) -> None:
        """Go to the Cluster, Run, Alerts or GPU grid screen (the Cluster screen stays at the bottom)."""
        from observe.tui.screens.alerts import AlertsScreen
        from observe.tui.screens.grid import GridScreen
        from observe.tui.screens.run import RunScreen

        while len(self.screen_stack) > 2:
            self.pop_screen()
        kinds: dict[str, type[Screen]] = {"run": RunScreen, "alerts": AlertsScreen, "grid": GridScreen}
        if name in kinds:
            self.push_screen(self.kept(kinds[name]))


if TYPE_CHECKING:  # mypy: a TopApp gives its screens everything they ask of it
    from observe.tui.screens.base import ScreenHost

    _HOST: type[ScreenHost] = TopApp


def make_app(
    source: Source, interval: float | None = None, poll: bool = True, should_stop: Callable[[], bool] | None = None
) -> TopApp:
    """The ``fsdp-observe top`` application over ``source`` (see ``TopApp``)."""
    return TopApp(source, interval=interval, poll=poll, should_stop=should_stop)
