"""``fsdp-observe top``'s mistakes: one line naming the flag and the fix, exit status 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from observe.cli import main as cli_main
from observe.cli.top import build_parser, make_source
from observe.sources.direct import DirectSource

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "error: source: none given; pass --agent URL"),
        (["--agent", "h:1", "--prometheus", "http://p:9090"], "error: --prometheus: cannot be combined with --agent"),
        (["--agent", "h:99999"], "error: --agent: 'h:99999' is not an address; give host:port"),
        (["--trainer", "ftp://h/metrics"], "error: --trainer: 'ftp://h/metrics' is not an address"),
        (["--agent", "http://[bad"], "error: --agent: 'http://[bad' is not an address; give host:port"),
        (["--trainer", "[::1"], "error: --trainer: '[::1' is not an address; give host:port"),
        (["--prometheus", "http://[bad"], "error: --prometheus: 'http://[bad' is not an address"),
        (
            ["--agents-file", "/no/such/file"],
            "error: --agents-file: cannot read /no/such/file (No such file or directory)",
        ),
        (["--agent", "h:1", "--namespace", "ml"], "error: --namespace: only applies with --kube"),
        (["--agent", "h:1", "--interval", "0"], "error: --interval: 0 is out of range; give a value from 0.2 to 3600"),
        (["--kube", "--kubeconfig", "/no/such/kubeconfig"], "error: kubeconfig: no kubeconfig at /no/such/kubeconfig"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(argv: list[str], expected: str, capsys: pytest.CaptureFixture) -> None:
    assert cli_main(["top", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1 and "Traceback" not in err


def test_an_unclosed_ipv6_bracket_in_the_agents_file_names_its_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "nodes.txt"
    path.write_text("127.0.0.1:9401\n[::1\n")
    assert cli_main(["top", "--agents-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --agents-file: {path} line 2: '[::1' is not an address; give host:port or http://host:port\n"


def test_an_empty_agents_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "agents.txt"
    path.write_text("# nodes\n\n")
    assert cli_main(["top", "--agents-file", str(path)]) == 2
    assert "lists no agent URL" in capsys.readouterr().err


def test_agents_file_and_flags_make_one_direct_source(tmp_path: Path) -> None:
    path = tmp_path / "agents.txt"
    path.write_text("# rack 1\n10.0.0.1:9401\nhttp://10.0.0.2:9401/  # trailing comment\n")
    source = make_source(
        build_parser().parse_args(
            ["--agent", "10.0.0.3:9401", "--agents-file", str(path), "--trainer", "10.0.0.1:9500", "--concurrency", "8"]
        )
    )
    assert isinstance(source, DirectSource)
    assert [e.url for e in source.agents] == ["http://10.0.0.3:9401", "http://10.0.0.1:9401", "http://10.0.0.2:9401"]
    assert [e.url for e in source.trainers] == ["http://10.0.0.1:9500/metrics"]
    assert source.fetcher.concurrency == 8


def test_top_is_a_subcommand_and_has_help() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "observe.cli", "top", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert proc.returncode == 0 and "--agents-file" in proc.stdout and "--prometheus" in proc.stdout


def test_top_level_help_lists_every_command_on_its_own_line(capsys: pytest.CaptureFixture) -> None:
    from observe.cli import COMMANDS

    with pytest.raises(SystemExit) as stop:
        cli_main(["--help"])
    assert stop.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    starts = {line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("   ")}
    assert set(COMMANDS) <= starts  # each command begins its own entry, not a run-on paragraph
    assert max(map(len, lines)) <= 80
