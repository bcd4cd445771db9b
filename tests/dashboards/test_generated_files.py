"""``fsdp-observe dashboards``: deterministic output, the committed files current, ``--check``, bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from observe.monitoring import generate, rules
from observe.monitoring.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "observe.cli", "dashboards", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_regenerating_gives_the_committed_files_byte_for_byte(tmp_path: Path) -> None:
    """CI's check: the committed dashboards/ and daemonsets/generated/ are what the code writes."""
    done = cli("--out", str(tmp_path / "dashboards"), "--k8s-out", str(tmp_path / "generated"))
    assert done.returncode == 0, done.stderr
    for name in ("dashboards", "generated"):
        ours = {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()}
        committed_dir = REPO / "dashboards" if name == "dashboards" else REPO / "daemonsets" / "generated"
        committed = {p.name: p.read_bytes() for p in committed_dir.iterdir()}
        assert ours == committed, f"{committed_dir} is stale: run fsdp-observe dashboards"
    assert cli("--check").returncode == 0


def test_output_is_deterministic_with_sorted_keys() -> None:
    first, second = generate.render_dashboards(Settings()), generate.render_dashboards(Settings())
    assert first == second
    for name, text in first.items():
        if name.endswith(".json"):
            assert text == json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert sorted(first) == [
        "alertmanager.yml",
        "fsdp-observe.rules.yaml",
        "gpu-health.json",
        "nodes.json",
        "training-run.json",
    ]


def copy_of_repo_outputs(tmp_path: Path) -> tuple[Path, Path]:
    out, k8s = tmp_path / "dashboards", tmp_path / "daemonsets" / "generated"
    shutil.copytree(REPO / "dashboards", out)
    shutil.copytree(REPO / "daemonsets" / "generated", k8s)
    return out, k8s


def test_check_names_every_stale_or_extra_file_then_writing_mends_them(tmp_path: Path) -> None:
    out, k8s = copy_of_repo_outputs(tmp_path)
    flags = ("--out", str(out), "--k8s-out", str(k8s))
    (out / "nodes.json").write_text("{}\n")
    (out / "old.json").write_text("{}\n")
    (k8s / "prometheusrule.yaml").write_text("stale\n")
    done = cli(*flags, "--check")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        f"error: out of date: {out}/nodes.json, {out}/old.json, {k8s}/prometheusrule.yaml; "
        "run fsdp-observe dashboards\n"
    )
    (out / "notes.txt").write_text("mine\n")
    assert cli(*flags).returncode == 0
    assert cli(*flags, "--check").returncode == 0
    assert not (out / "old.json").exists() and (out / "notes.txt").exists()  # only its own files are touched


def test_a_settings_file_changes_the_output(tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("top_n: 3\nrunbook_base_url: https://wiki.example.com/gpu\nxid_application_burst: 5\n")
    assert cli("--settings", str(settings), "--out", str(tmp_path / "d"), "--no-k8s").returncode == 0
    health = (tmp_path / "d" / "gpu-health.json").read_text()
    assert "topk(3," in health and "topk(10," not in health
    rule_text = (tmp_path / "d" / rules.RULES_FILE).read_text()
    assert "https://wiki.example.com/gpu#fsdpgpulost" in rule_text and ">= 5" in rule_text
    assert not (tmp_path / "daemonsets").exists()


@pytest.mark.parametrize(
    "content, flag_args, message",
    [
        (
            None,
            ("--settings", "{tmp}/missing.yaml"),
            "error: --settings: cannot read {tmp}/missing.yaml (No such file or directory); pass a readable YAML file",
        ),
        ("a: [1,\n", ("--settings", "{tmp}/s.yaml"), "error: --settings: {tmp}/s.yaml is not YAML (while parsing"),
        (
            "- 1\n",
            ("--settings", "{tmp}/s.yaml"),
            "error: --settings {tmp}/s.yaml: settings: a list, not a mapping; write one field: value per line",
        ),
        (
            "xid_windw: 5m\n",
            ("--settings", "{tmp}/s.yaml"),
            "error: --settings {tmp}/s.yaml: xid_windw: unknown field; did you mean xid_window?",
        ),
        (
            "xid_window: soon\n",
            ("--settings", "{tmp}/s.yaml"),
            "error: --settings {tmp}/s.yaml: xid_window: 'soon' is not a Prometheus duration like 30s, 15m or 1h30m",
        ),
        (
            "straggler_ratio: 0.9\n",
            ("--settings", "{tmp}/s.yaml"),
            "error: --settings {tmp}/s.yaml: straggler_ratio: 0.9 is not above 1",
        ),
        (
            None,
            ("--bogus",),
            "error: fsdp-observe dashboards: unrecognized arguments: --bogus; run 'fsdp-observe "
            "dashboards --help' for the flags",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, content: str | None, flag_args: tuple[str, ...], message: str
) -> None:
    if content is not None:
        (tmp_path / "s.yaml").write_text(content)
    args = [a.format(tmp=tmp_path) for a in flag_args]
    done = cli(*args, "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith(message.format(tmp=tmp_path)), done.stderr
    assert not (tmp_path / "out").exists()
