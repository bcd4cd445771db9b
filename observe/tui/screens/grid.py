"""The GPU grid screen: every GPU of every node on one screen (``observe.tui.widgets.grid``), coloured
by utilisation, memory, temperature or XID errors (``m`` cycles), so the odd GPU out is found at a
glance; the node under the cursor is described below the grid; Enter opens its Node screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding

from observe.sources.view import ClusterSnapshot, NodeStatus
from observe.tui import fmt
from observe.tui.screens.base import TopScreen
from observe.tui.widgets.grid import LEVELS, MODES, GpuGrid, Mode
from observe.tui.widgets.lines import Line, Lines, fit


def legend_line(mode: Mode, nodes: int, gpus: int, width: int, below: int = 0) -> Line:
    """What the colours mean for ``mode``, and how much is shown, in ``width`` cells; ``below``:
    rows of nodes out of sight under the grid (said first, so it is never left out)."""
    scale = "heat" if mode.key == "temperature" else "s"
    pieces: list[tuple[str, str | None, int]] = [(f" {mode.title} ", "title", 0), (f" {mode.low} ", "dim", 0)]
    if below:
        pieces.insert(1, (f" {below} more rows below (PgDn) ", "warn", 0))
    if mode.key == "xid":
        pieces += [
            ("█", "x-none", 0),
            (" none ", "dim", 0),
            ("█", "x-info", 0),
            (" info ", "dim", 1),
            ("█", "x-app", 0),
            (" application ", "dim", 1),
            ("█", "x-reset", 0),
            (" reset ", "dim", 1),
            ("█", "x-reboot", 0),
            (" reboot", "dim", 0),
        ]
        pieces = pieces[:1] + pieces[2:]
    else:
        pieces += [("█", f"{scale}{i}", 0) for i in range(LEVELS)] + [(f" {mode.high}", "dim", 0)]
    pieces += [
        ("   █", "g-na", 2),
        (" N/A", "dim", 2),
        ("  █", "g-lost", 1),
        (" LOST", "dim", 1),
        ("  ░", "bad", 1),
        (" not answering", "dim", 1),
        ("  ·", "dim", 3),
        (" no GPUs", "dim", 3),
        (f"   {fmt.plural(gpus, 'GPU')} on {fmt.plural(nodes, 'node')}", "value", 4),
        ("   m: colour by", "dim", 5),
    ]
    return fit(pieces, width)


def node_line(node: NodeStatus | None, mode: Mode, width: int) -> Line:
    """The node under the cursor: name, state, its figures, and each GPU's value in ``mode``."""
    if node is None:
        return [(" no node", "dim")]
    f = node.figures
    pieces: list[tuple[str, str | None, int]] = [
        (f" {node.name} ", "title", 0),
        (f" {node.state}", fmt.STATE_STYLE.get(node.state, "dim"), 0),
    ]
    if node.error:
        pieces.append((f" {node.error}", "bad", 1))
    if f is None:
        return fit(pieces + [("  no data yet", "dim", 0)], width)
    if not f.gpus:
        return fit(pieces + [("  no GPUs", "dim", 0)], width)
    pieces.append((f"  {f.gpus} GPUs" + (f", {f.gpus_lost} LOST" if f.gpus_lost else ""), "value", 0))
    per_gpu = _per_gpu(f, mode)
    pieces.append((f"  {mode.title.split(',')[0].removeprefix('GPU ')}: {per_gpu}", "value", 0))
    pieces.append(("  Enter: open the node", "dim", 2))
    return fit(pieces, width)


def _per_gpu(f, mode: Mode) -> str:  # noqa: ANN001 - NodeFigures
    values: list[str] = []
    for i in range(f.gpus):
        if i < len(f.gpu_lost) and f.gpu_lost[i]:
            values.append("LOST")
        elif mode.key == "util":
            values.append(fmt.pct(f.gpu_util_ratios[i]) if i < len(f.gpu_util_ratios) else fmt.NA)
        elif mode.key == "memory":
            values.append(fmt.pct(f.gpu_memory_ratios[i]) if i < len(f.gpu_memory_ratios) else fmt.NA)
        elif mode.key == "temperature":
            values.append(fmt.num(f.gpu_temperatures[i], 0, "°C") if i < len(f.gpu_temperatures) else fmt.NA)
        else:
            values.append((f.gpu_xid_severities[i] if i < len(f.gpu_xid_severities) else None) or "-")
    text = " ".join(values)
    if mode.key == "xid" and f.xid_unattributed_severity:
        text += f"; on no listed GPU: {f.xid_unattributed_severity}"
    if mode.key in ("util", "memory", "temperature") and f.partial(_over(f, mode)):
        text += f" {fmt.PARTIAL}"
    return text


def _over(f, mode: Mode) -> int:  # noqa: ANN001 - NodeFigures
    return {"util": f.util_gpus, "memory": f.memory_gpus, "temperature": f.temperature_gpus}.get(mode.key, f.gpus)


class GridScreen(TopScreen):
    """Every GPU of the cluster, one half cell each."""

    TITLE = "GPU grid"
    BINDINGS = [
        Binding("m", "next_mode", "colour by"),
        Binding("escape", "back", "back"),
        Binding("e", "messages", "messages", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.mode_index = 0

    def compose(self) -> ComposeResult:
        yield from self.compose_status()
        yield Lines(id="grid-legend")
        yield GpuGrid(id="grid")
        yield Lines(id="grid-node")
        yield from self.compose_footer()

    @property
    def grid(self) -> GpuGrid:
        return self.query_one(GpuGrid)

    def on_mount(self) -> None:
        self.grid.focus()
        self.update_snapshot(self.top.snapshot)

    def release(self) -> None:
        self.grid.release()

    def action_next_mode(self) -> None:
        self.mode_index = (self.mode_index + 1) % len(MODES)
        self.grid.set_mode(MODES[self.mode_index])
        self.update_snapshot(self.top.snapshot)

    def update_snapshot(self, snapshot: ClusterSnapshot) -> None:
        super().update_snapshot(snapshot)
        grid = self.grid
        grid.set_nodes(sorted(snapshot.nodes, key=lambda n: n.name))
        self._legend()
        self._describe()
        self.call_after_refresh(self._legend)  # once the grid has its size: what is out of sight

    def _legend(self) -> None:
        grid, width = self.grid, self.size.width or 80
        self.query_one("#grid-legend", Lines).set_lines(
            [legend_line(MODES[self.mode_index], len(grid.nodes), grid.gpus(), width, grid.rows_below())]
        )

    def _describe(self) -> None:
        width = self.size.width or 80
        self.query_one("#grid-node", Lines).set_lines([node_line(self.grid.current, MODES[self.mode_index], width)])

    def on_gpu_grid_highlighted(self, _: GpuGrid.Highlighted) -> None:
        self._legend()
        self._describe()

    def on_gpu_grid_selected(self, event: GpuGrid.Selected) -> None:
        if event.node is not None:
            self.top.open_node(event.node.name)
