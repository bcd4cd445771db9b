"""DESIGN.md's import rule for the TUI: observe.tui and observe.sources never import torch, pynvml,
the trainer or the agent; of the project they use only catalog, model, xid, cluster, k8s names and
the shared kubeconfig loader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.agent.test_imports import imported

OBSERVE = Path(__file__).resolve().parents[2] / "observe"
ALLOWED = {"observe", "observe.catalog", "observe.model", "observe.xid", "observe.cluster", "observe.k8s",
           "observe.k8s.names", "observe.k8s.kubeconfig"}
FORBIDDEN = ("torch", "pynvml", "trainer", "observe.agent")


def test_tui_and_sources_import_only_what_they_may() -> None:
    for package in ("tui", "sources"):
        for path in (OBSERVE / package).rglob("*.py"):
            for name in imported(path):
                if name.startswith(("observe.tui", "observe.sources")) or not name.startswith("observe"):
                    assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"
                    continue
                assert name in ALLOWED, f"{path.name} imports {name}"


def test_importing_the_whole_tui_loads_no_torch_pynvml_trainer_or_agent() -> None:
    code = ("import json, sys\n"
            "import observe.tui.cli, observe.tui.app, observe.sources.direct, observe.sources.kube, "
            "observe.sources.prometheus\n"
            "import observe.tui.screens.cluster, observe.tui.screens.node, observe.tui.screens.run, "
            "observe.tui.screens.alerts, observe.tui.screens.help\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pynvml', 'trainer') "
            "or m.startswith('observe.agent'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=OBSERVE.parent).stdout
    assert json.loads(out) == []
