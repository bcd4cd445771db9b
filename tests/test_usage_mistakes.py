"""Usage mistakes as a user makes them, through the ``fsdp-observe`` dispatcher: a typo of a
required flag is reported as the typo (not as the flag missing), by the subcommand it was given
to, with a did-you-mean from that subcommand's flags or choices. Each case failed before:
``job render --confg x`` said "--config is required", ``job render --config x --replica 2``
pointed at ``fsdp-observe job --help``, ``job rendr`` and ``run --nproc`` had no fix."""

from __future__ import annotations

import pytest

from observe.flags import OneLineParser
from tests.support.cli import assert_one_line_error, run_cli


@pytest.mark.parametrize(
    "args, needles",
    [
        (
            ["job", "render", "--confg", "x"],
            (
                "fsdp-observe job render: unrecognized arguments: --confg x",
                "did you mean --config?",
                "'fsdp-observe job render --help'",
            ),
        ),
        (
            ["job", "render", "--config", "x", "--replica", "2"],
            ("fsdp-observe job render: unrecognized arguments: --replica 2", "'fsdp-observe job render --help'"),
        ),
        (
            ["job", "access", "--namspace", "ml"],
            ("fsdp-observe job access: unrecognized arguments: --namspace ml", "did you mean --namespace?"),
        ),
        (["job", "rendr"], ("invalid choice: 'rendr'", "did you mean render?")),
        (["job", "render"], ("fsdp-observe job render: the following arguments are required: --config",)),
        (
            ["run", "--nproc", "2", "train.py"],
            (
                "fsdp-observe run: unrecognized arguments: --nproc",
                "write the training command after --, e.g. fsdp-observe run -- torchrun",
            ),
        ),
        (["run", "--port-bse", "9600", "--", "python", "x.py"], ("did you mean --port-base?",)),
    ],
)
def test_a_mistake_is_named_by_the_command_it_was_given_to(args, needles, capsys) -> None:
    assert_one_line_error(run_cli(args, capsys), *needles)


def test_a_flag_cut_short_is_matched_to_the_one_flag_it_begins() -> None:
    ap = OneLineParser(prog="t")
    ap.add_argument("--nproc-per-node", type=int)
    ap.add_argument("--node-rank", type=int)
    assert ap.close_flag("--nproc") == "--nproc-per-node"
    assert ap.close_flag("--no") is None  # too short to mean anything
    ap.add_argument("--node-count", type=int)
    assert ap.close_flag("--node") is None  # two flags begin with it: no guess


def test_the_first_pass_leaves_the_namespace_and_required_flags_as_they_were() -> None:
    ap = OneLineParser(prog="t", allow_abbrev=False)
    ap.add_argument("--config", required=True)
    ap.add_argument("--set", action="append", default=[])
    ns = ap.parse_args(["--config", "a", "--set", "K=1"])
    assert (ns.config, ns.set) == ("a", ["K=1"])  # an append flag is not appended to twice
    assert [a.required for a in ap._actions if a.dest == "config"] == [True]
