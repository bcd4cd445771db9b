"""The XID catalogue and the kernel-log parser, against tests/cases/xid."""

from __future__ import annotations

import json

import pytest

from observe.xid import CATALOGUE, SEVERITIES, KernelLogParser, lookup, normalise_bus
from tests.support.cases import CASES

XID_CASES = CASES / "xid"


def parse_all(lines: list[str]) -> tuple[list, KernelLogParser]:
    parser = KernelLogParser(node="node-07")
    return [e for line in lines if (e := parser.feed(line)) is not None], parser


def test_kernel_log_case_yields_exactly_the_expected_events() -> None:
    lines = (XID_CASES / "kernel-log.txt").read_text().splitlines(keepends=True)
    expected = [json.loads(line) for line in (XID_CASES / "expected.jsonl").read_text().splitlines() if line]
    events, parser = parse_all(lines)
    assert len(events) == len(expected)
    for i, (event, want) in enumerate(zip(events, expected, strict=False)):
        got = {key: getattr(event, key) for key in want}
        assert got == want, f"event {i} (xid {want['xid']})"
    assert parser.parse_errors == 1  # the truncated last line: no event, no crash, one parse error


def test_events_carry_catalogue_meaning_node_and_raw_line() -> None:
    events, _ = parse_all((XID_CASES / "kernel-log.txt").read_text().splitlines())
    by_code = {e.xid: e for e in events}
    assert by_code[79].severity == "node_reboot" and "reboot" in by_code[79].action
    assert by_code[13].severity == "application"
    assert by_code[149].severity == "nvlink_fabric"
    assert by_code[99999].severity == "unknown" and by_code[99999].name == "Unknown XID"
    assert by_code[154].severity == "gpu_reset"  # from "Drain and Reset", not the catalogue default
    assert all(e.node == "node-07" and "NVRM" in e.raw and e.source == "kernel_log" for e in events)


def test_malformed_lines_count_as_parse_errors_and_never_stop_the_parser() -> None:
    lines = [
        "NVRM: Xid (PCI:0000:3b:00): ",
        "NVRM: Xid (garbage",
        "NVRM: Xid (43, pid: 5678): nonsense",
        "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
    ]
    events, parser = parse_all(lines)
    assert [e.xid for e in events] == [48]
    assert parser.parse_errors == 3


def test_same_xid_twice_gives_two_events() -> None:
    line = "NVRM: Xid (PCI:0000:3b:00): 48, pid=7, name=python, Double Bit ECC Error"
    events, _ = parse_all([line, line])
    assert [e.xid for e in events] == [48, 48]


def test_the_two_lines_of_one_fall_off_the_bus_count_once() -> None:
    # Current drivers print both an "Xid ... 79" line and a "GPU ... has fallen off the bus" line.
    events, _ = parse_all(
        [
            "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "NVRM: GPU 0000:86:00.0: GPU has fallen off the bus.",
            "NVRM: GPU 0000:86:00.0: GPU serial number is 1650000000001.",
        ]
    )
    assert [(e.xid, e.pci_bus) for e in events] == [(79, "0000:86:00")]


def test_two_xid_79_lines_are_two_events() -> None:
    line = "NVRM: Xid (PCI:0000:86:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    events, _ = parse_all([line, line])
    assert len(events) == 2


def test_kmsg_record_is_dated_from_boot_time() -> None:
    parser = KernelLogParser()
    event = parser.feed(
        "3,20511,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 63, pid=1220, Row Remapper: x",
        now=1.0,
        boot_time=1_700_000_000.0,
    )
    assert event.time_unix == pytest.approx(1_700_000_000.0 + 5678.901234)
    assert event.pid == 1220 and event.process is None


def test_lines_without_a_usable_date_take_the_reading_time() -> None:
    event = KernelLogParser().feed("[ 8123.004512] NVRM: Xid (PCI:0000:bb:00): 119, pid=1, name=t, Timeout", now=42.0)
    assert event.time_unix == 42.0


@pytest.mark.parametrize("text", ["PCI:0000:3b:00", "0000:3B:00", "0000:3b:00.0", "00000000:3B:00.0"])
def test_bus_addresses_normalise_to_one_form(text: str) -> None:
    assert normalise_bus(text) == "0000:3b:00"


def test_catalogue_entries_are_complete_and_classified() -> None:
    assert len(CATALOGUE) > 100
    for code, info in CATALOGUE.items():
        assert info.code == code
        assert info.severity in SEVERITIES and info.severity != "unknown"
        assert info.name and info.action
    expected = {
        8: "application",
        13: "application",
        31: "application",
        43: "application",
        45: "informational",
        48: "gpu_reset",
        63: "gpu_reset",
        64: "gpu_reset",
        74: "nvlink_fabric",
        79: "node_reboot",
        92: "informational",
        94: "application",
        95: "gpu_reset",
        119: "gpu_reset",
        120: "gpu_reset",
        144: "nvlink_fabric",
        150: "nvlink_fabric",
    }
    assert {code: CATALOGUE[code].severity for code in expected} == expected


def test_unknown_and_unused_codes_read_as_unknown() -> None:
    for code in (1, 5, 10, 99999):  # 1, 5, 10: documented as unused
        assert lookup(code).severity == "unknown"


@pytest.mark.parametrize(
    "action, severity",
    [
        ("None", "informational"),
        ("GPU Reset", "gpu_reset"),
        ("Node Reboot", "node_reboot"),
        ("Drain P2P", "nvlink_fabric"),
        ("Drain and Reset", "gpu_reset"),
        ("Something New", "informational"),
    ],
)
def test_xid_154_takes_its_severity_from_the_recovery_action(action: str, severity: str) -> None:
    event = KernelLogParser().feed(
        f"NVRM: Xid (PCI:0011:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 ({action})"
    )
    assert (event.recovery_action, event.severity) == (action, severity)
    assert event.action.startswith(f"The driver now requires: {action}.")
