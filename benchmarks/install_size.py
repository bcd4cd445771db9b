"""Install size per role: ``du`` of a fresh virtualenv holding one role's install.

Each role gets its own virtualenv (``python -m venv``), the project installed with that role's
extra (``pip install 'REPO[EXTRA]'``; roles with torch take the CPU wheel ``torch==2.13.0`` first,
as the README does), then ``du`` of the whole virtualenv, which is deleted again. ``--before DIR``
adds the same figure for an older checkout installed with its own default (before the extras,
every role installed everything). Prints a table and writes JSON to ``--out``.

    python -m benchmarks.install_size                         # every role (several minutes, ~4 GB of disk)
    python -m benchmarks.install_size --roles base agent      # a smoke test
    git archive ae3655f | tar -x -C /tmp/before && python -m benchmarks.install_size --before /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRATCH = Path(tempfile.gettempdir()) / "fsdp-observe-benchmarks"
#: role → (extras installed, whether torch comes first)
ROLES = {
    "base": ("", False),
    "agent": ("agent", False),
    "dashboards": ("dashboards", False),
    "k8s": ("k8s", False),
    "scaling": ("scaling", False),
    "trainer": ("trainer", True),
    "all": ("all", True),
}
TORCH = "torch==2.13.0"


def du_bytes(path: Path) -> int:
    """Apparent size of everything under ``path`` (``du -sb``)."""
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def measure(label: str, target: str, torch_first: bool, work: Path) -> dict:
    """Install ``target`` into a new virtualenv; return its size and install time."""
    venv = work / f"venv-{label}"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    started = time.monotonic()
    if torch_first:
        subprocess.run([*pip, TORCH], check=True, env=env)
    subprocess.run([*pip, target], check=True, env=env)
    seconds = time.monotonic() - started
    has_torch = (
        subprocess.run([str(venv / "bin" / "python"), "-c", "import torch"], env=env, capture_output=True).returncode
        == 0
    )
    size = du_bytes(venv)
    shutil.rmtree(venv)
    return {"role": label, "target": target, "bytes": size, "install_seconds": round(seconds, 1), "torch": has_torch}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--roles", nargs="+", choices=list(ROLES), default=list(ROLES), help="roles to measure (default all)"
    )
    ap.add_argument("--before", type=Path, metavar="DIR", help="an older checkout to measure as one install")
    ap.add_argument("--out", type=Path, default=SCRATCH / "install_size.json", help="JSON output (default %(default)s)")
    ns = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="install-size-") as tmp:
        # Installs copy the project (no -e), so the checkout's own build folders stay untouched.
        source = Path(tmp) / "src"
        shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build"))
        if ns.before:
            rows.append(measure("before (one install)", str(ns.before), True, Path(tmp)))
            print(f"  {rows[-1]['role']}: {rows[-1]['bytes'] / 1e6:,.0f} MB", flush=True)
        for role in ns.roles:
            extra, torch_first = ROLES[role]
            rows.append(measure(role, f"{source}[{extra}]" if extra else str(source), torch_first, Path(tmp)))
            print(f"  {role}: {rows[-1]['bytes'] / 1e6:,.0f} MB", flush=True)
    before = rows[0]["bytes"] if ns.before else None
    print(f"\n{'role':<22} {'venv MB':>9} {'vs before':>10} {'torch':>6} {'install s':>10}")
    for r in rows:
        ratio = f"{r['bytes'] / before:.2f}x" if before else "-"
        print(
            f"{r['role']:<22} {r['bytes'] / 1e6:>9,.0f} {ratio:>10} {'yes' if r['torch'] else 'no':>6} "
            f"{r['install_seconds']:>10}"
        )
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=2) + "\n")
    print(f"\nwritten: {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
