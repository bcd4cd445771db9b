"""At run time, the whole TUI loads no torch, pynvml, trainer or agent module (the static rule is an
import-linter contract in pyproject.toml, checked by tests/test_import_contracts.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

OBSERVE = Path(__file__).resolve().parents[2] / "observe"


def test_importing_the_whole_tui_loads_no_torch_pynvml_trainer_or_agent() -> None:
    code = (
        "import json, sys\n"
        "import observe.cli.top, observe.tui.app, observe.sources.direct, observe.sources.kube, "
        "observe.sources.prometheus\n"
        "import observe.tui.screens.cluster, observe.tui.screens.node, observe.tui.screens.run, "
        "observe.tui.screens.rank, observe.tui.screens.alerts, observe.tui.screens.help\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pynvml', 'trainer') "
        "or m.startswith('observe.agent'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=OBSERVE.parent
    ).stdout
    assert json.loads(out) == []
