"""``fsdp-observe dashboards``: write (or check) the generated Grafana dashboards and Prometheus rules.

Writes ``dashboards/*.json`` (``observe.dashboards``) and ``dashboards/fsdp-observe.rules.yaml``
(``observe.rules``), then the Kubernetes objects made from them under ``daemonsets/generated/``
(``observe.k8s.generated``: a ``PrometheusRule`` and one dashboard ConfigMap each). Output is
deterministic, so ``--check`` (CI) regenerates in memory and fails on any difference::

    fsdp-observe dashboards                      # from the repository root
    fsdp-observe dashboards --check              # exit 1 naming the files that differ
    fsdp-observe dashboards --settings my.yaml --out /tmp/dash --no-k8s

A settings file is YAML (or JSON) with fields of ``observe.monitoring.Settings``, e.g.
``dcgm_hostname_label: hostname``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

from observe import dashboards, rules
from observe.monitoring import Settings
from observe.usage import OneLineParser, UsageError

#: Files in ``--out`` that this command owns (anything else there is left alone).
OWNED = ("*.json", "*.rules.yaml")


def build_parser() -> argparse.ArgumentParser:
    """The command's flags."""
    ap = OneLineParser(prog="fsdp-observe dashboards",
                 description="Write (or check) the generated Grafana dashboards and Prometheus rules "
                             "(docs/dashboards.md).")
    ap.add_argument("--out", default="dashboards", type=Path, metavar="DIR",
                    help="where the dashboards and the rule file go (default dashboards)")
    ap.add_argument("--k8s-out", default="daemonsets/generated", type=Path, metavar="DIR",
                    help="where the PrometheusRule and dashboard ConfigMaps go (default daemonsets/generated)")
    ap.add_argument("--no-k8s", action="store_true", help="write no Kubernetes objects")
    ap.add_argument("--settings", type=Path, metavar="FILE",
                    help="YAML/JSON file overriding fields of observe.monitoring.Settings (docs/dashboards.md)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the files that differ")
    return ap


def load_settings(path: Path | None) -> Settings:
    """Defaults, overridden by the YAML/JSON file at ``path``.

    Raises:
        UsageError: unreadable file, not YAML, an unknown field or a bad value.
    """
    if path is None:
        return Settings()
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise UsageError(f"--settings: cannot read {path} ({exc.strerror}); pass a readable YAML file") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--settings: {path} is not YAML ({str(exc).splitlines()[0]})") from None
    try:
        return Settings.from_mapping(values)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--settings: {path}: {exc}") from None


def render(settings: Settings) -> dict[str, str]:
    """File name → text of everything ``--out`` should hold."""
    return {**dashboards.render(settings), rules.RULES_FILE: rules.render(settings)}


def _owned(folder: Path) -> set[str]:
    return {p.name for pattern in OWNED for p in folder.glob(pattern)} if folder.is_dir() else set()


def differences(files: dict[str, str], folder: Path) -> list[str]:
    """Names in ``folder`` that are missing, stale or extra compared with ``files``."""
    present = _owned(folder)
    stale = [n for n, text in files.items() if n not in present or (folder / n).read_text() != text]
    return sorted(stale + [n for n in present if n not in files])


def write(files: dict[str, str], folder: Path) -> list[Path]:
    """Write ``files`` into ``folder`` (only those that changed) and remove stale owned files."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in _owned(folder) - set(files):
        (folder / name).unlink()
    for name, text in files.items():
        path = folder / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return [folder / name for name in sorted(files)]


def _check_paths(ns: argparse.Namespace) -> None:
    if ns.out.exists() and not ns.out.is_dir():
        raise UsageError(f"--out: {ns.out} is a file; pass a directory")
    if not ns.no_k8s and not ns.k8s_out.parent.is_dir():
        raise UsageError(f"--k8s-out: {ns.k8s_out.parent}/ does not exist here; run from the repository root, "
                         "pass --k8s-out DIR, or --no-k8s")


def main(argv: list[str]) -> int:
    """Write or check; 0 when done or up to date, 1 when ``--check`` finds differences, 2 on bad input."""
    from observe.k8s import generated

    try:
        ns = build_parser().parse_args(argv)
        _check_paths(ns)
        files = render(load_settings(ns.settings))
        if ns.check:
            stale = [f"{ns.out}/{n}" for n in differences(files, ns.out)]
            if not ns.no_k8s:
                with tempfile.TemporaryDirectory() as tmp:
                    write(files, Path(tmp))
                    stale += [f"{ns.k8s_out}/{n}" for n in generated.differences(Path(tmp), ns.k8s_out)]
            if stale:
                print(f"error: out of date: {', '.join(stale)}; run fsdp-observe dashboards", file=sys.stderr)
                return 1
            return 0
        try:
            written = write(files, ns.out)
        except OSError as exc:
            raise UsageError(f"--out: cannot write {ns.out} ({exc.strerror}); pass a directory you can write") from None
        try:
            k8s = [] if ns.no_k8s else generated.write(ns.out, ns.k8s_out)
        except OSError as exc:
            raise UsageError(f"--k8s-out: cannot write {ns.k8s_out} ({exc.strerror}); pass a directory you can "
                             "write, or --no-k8s") from None
    except ValueError as exc:  # UsageError, or a dashboard too large for a ConfigMap (observe.k8s.generated)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files to {ns.out}/" + (f" and {len(k8s)} to {ns.k8s_out}/" if k8s else ""))
    return 0
