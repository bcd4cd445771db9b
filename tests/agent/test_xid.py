"""The XID catalogue and the kernel-log parser, against tests/cases/xid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observe.xid import CATALOGUE, SEVERITIES, KernelLogParser, lookup, normalise_bus
from tests.support.cases import CASES

XID_CASES = CASES / "xid"


#: Forms beyond the shared cases, read after them as one stream (tests/agent/xid-forms/README.md).
XID_FORMS = Path(__file__).parent / "xid-forms"


def parse_all(lines: list[str]) -> tuple[list, KernelLogParser]:
    """Every event the parser returns, those continuing a report included."""
    parser = KernelLogParser(node="node-07")
    return [e for line in lines if (e := parser.feed(line)) is not None], parser


def counted(events: list) -> list:
    """The events the agent counts: each report's first line."""
    return [e for e in events if not e.continues]


def read_expected(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def assert_events(events: list, expected: list[dict]) -> None:
    assert len(events) == len(expected)
    for i, (event, want) in enumerate(zip(events, expected, strict=True)):
        got = {key: getattr(event, key) for key in want}
        assert got == want, f"event {i} (xid {want['xid']})"


def test_kernel_log_case_yields_exactly_the_expected_events() -> None:
    lines = (XID_CASES / "kernel-log.txt").read_text().splitlines(keepends=True)
    events, parser = parse_all(lines)
    assert_events(events, read_expected(XID_CASES / "expected.jsonl"))
    assert parser.parse_errors == 1  # the truncated last line: no event, no crash, one parse error
    # The SM warp exception and the ESR line of pid 48213 at one instant are one out-of-range access:
    # both are events, the second continues the first and is not counted.
    assert [(e.xid, e.pid, e.continues) for e in events[:2]] == [(13, 48213, False), (13, 48213, True)]
    assert len(counted(events)) == len(events) - 1


def test_every_xid_form_drivers_print_is_counted_once() -> None:
    """Before: 6 events for these 10 faults: the XID 48 and 31 with wider spacing were parse errors,
    the four older and probe-time "fallen off the bus" 79s were missed, the VMD domain's 79 was put on
    0000:3b:00 (another GPU) and one out-of-range access counted 3."""
    shared = (XID_CASES / "kernel-log.txt").read_text().splitlines(keepends=True)
    events, parser = parse_all(shared + (XID_FORMS / "kernel-log.txt").read_text().splitlines(keepends=True))
    assert_events(counted(events)[len(counted(parse_all(shared)[0])) :], read_expected(XID_FORMS / "expected.jsonl"))
    assert parser.parse_errors == 1  # the shared case's truncated line only


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
    parser = KernelLogParser()
    events = [parser.feed(line, now=100.0), parser.feed(line, now=102.0)]  # two seconds apart: two faults
    assert [e.xid for e in events if e] == [48, 48]


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


@pytest.mark.parametrize(
    "line",
    [
        "NVRM: Xid (PCI:0000:3b:00):  48,  pid=2222, name=python, DBE",
        "NVRM: Xid (PCI:0000:3b:00):\t48,\tpid=2222, name=python, DBE",
        "NVRM: Xid (PCI:0000:3b:00):   48, pid=2222, name=python, DBE",
        "NVRM: Xid  (PCI:0000:3b:00.0): 48 , pid=2222, name=python, DBE",
        "NVRM: Xid (PCI:0000:3b:00): 48",
    ],
)
def test_the_whitespace_drivers_print_is_read(line: str) -> None:
    """Before: two spaces after '):' made an uncorrectable ECC error (a page) a parse error."""
    events, parser = parse_all([line])
    assert [(e.xid, e.pci_bus) for e in events] == [(48, "0000:3b:00")] and parser.parse_errors == 0


@pytest.mark.parametrize(
    "lines, bus",
    [
        (["NVRM: GPU 0000:af:00.0: GPU has fallen off the bus."], "0000:af:00"),
        (["NVRM: GPU at 0000:1b:00.0 has fallen off the bus."], "0000:1b:00"),
        (["NVRM: GPU at PCI:0000:1b:00: GPU has fallen off the bus."], "0000:1b:00"),
        (
            [
                "[  12.3] NVRM: The NVIDIA GPU 0000:1a:00.0",
                "         NVRM: (PCI ID: 10de:1db6) installed in this system has",
                "         NVRM: fallen off the bus and is not responding to commands.",
            ],
            "0000:1a:00",
        ),
        (
            [
                "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:2d04) installed in this system has",
                "NVRM: fallen off the bus and is not responding to commands.",
            ],
            "0000:01:00",
        ),
        (
            [
                "4,77,12345,-;NVRM: The NVIDIA GPU 0000:5d:00.0\\x0aNVRM: (PCI ID: 10de:2330) installed in "
                "this system has\\x0aNVRM: fallen off the bus and is not responding to commands."
            ],
            "0000:5d:00",
        ),
    ],
)
def test_every_fallen_off_the_bus_form_is_an_xid_79(lines: list[str], bus: str) -> None:
    """Before: the older one-line form and the probe-time message were not read at all."""
    events, _ = parse_all(lines)
    assert [(e.xid, e.pci_bus, e.severity) for e in events] == [(79, bus, "node_reboot")]


def test_a_probe_time_message_without_its_tail_is_no_event() -> None:
    events, _ = parse_all(["NVRM: The NVIDIA GPU 0000:1a:00.0", "NVRM: x", "NVRM: y", "NVRM: z fallen off the bus"])
    assert events == []


def test_the_drivers_repeated_probe_messages_are_one_fault() -> None:
    message = [
        "[  12.{:06d}] NVRM: The NVIDIA GPU 0000:1a:00.0",
        "NVRM: (PCI ID: 10de:1db6) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ]
    lines = [line.format(180_000 * i) for i in range(4) for line in message]  # every 0.18 s, as the driver retries
    events, _ = parse_all(lines)
    assert len(counted(events)) == 1


@pytest.mark.parametrize(
    "text, bus",
    [("PCI:10000:3b:00", "10000:3b:00"), ("00010000:3B:00.0", "10000:3b:00"), ("0001:3b:00", "0001:3b:00")],
)
def test_pci_domains_are_kept_whole(text: str, bus: str) -> None:
    """Before: a five-digit VMD domain was cut to its last four digits, another GPU's bus."""
    assert normalise_bus(text) == bus


def test_a_vmd_domain_xid_is_not_another_gpus() -> None:
    events, _ = parse_all(
        [
            "NVRM: Xid (PCI:10000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
            "NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=x, DBE",
        ]
    )
    assert [e.pci_bus for e in events] == ["10000:3b:00", "0000:3b:00"]


#: One out-of-range access as current drivers print it: warp, global and ESR lines, one pid, one instant.
ONE_FAULT = [
    "[{t}] NVRM: Xid (PCI:0000:18:00): 13, pid={pid}, name=python, Graphics SM Warp Exception on (GPC 2, TPC 1, SM 0): "
    "Out Of Range Address",
    "[{t}] NVRM: Xid (PCI:0000:18:00): 13, pid={pid}, name=python, Graphics SM Global Exception on (GPC 2, TPC 1, SM "
    "0): Multiple Warp Errors",
    "[{t}] NVRM: Xid (PCI:0000:18:00): 13, pid={pid}, name=python, Graphics Exception: ESR 0x514648=0x2000e",
]


def test_one_report_counts_once_and_distinct_faults_count_each() -> None:
    """Before: one fault counted 3 and opened the application-burst ticket (threshold 3) alone."""
    lines = [line.format(t=" 100.000001", pid=7) for line in ONE_FAULT]
    lines += [line.format(t=" 100.000002", pid=8) for line in ONE_FAULT]  # another process, same instant
    lines += [line.format(t=" 104.500000", pid=7) for line in ONE_FAULT]  # the first again, later: a new fault
    events, parser = parse_all(lines)
    assert [e.pid for e in counted(events)] == [7, 8, 7]
    assert parser.folded == 6 and len(events) == 9  # every line is still an event, marked as continuing
    events = counted(events)
    assert events[0].message.startswith("Graphics SM Warp Exception")  # the report's first line speaks for it


def test_a_backlog_read_at_once_is_told_apart_by_its_own_timestamps() -> None:
    """Lines read in one go (a restart reading the ring from its start) keep their own clocks."""
    parser = KernelLogParser()
    kmsg = "3,{seq},{us},-;NVRM: Xid (PCI:0000:18:00): 13, pid=7, name=python, Graphics Exception: ESR"
    events = [parser.feed(kmsg.format(seq=i, us=us), now=5.0) for i, us in enumerate((1_000_000, 1_000_050, 9_000_000))]
    assert [e is not None and not e.continues for e in events] == [True, False, True]
    syslog = "Mar  3 09:30:0{s} node kernel: NVRM: Xid (PCI:0000:18:00): 31, pid=9, name=p, MMU Fault"
    events = [parser.feed(syslog.format(s=s), now=5.0) for s in (1, 1, 2, 4)]
    assert [e is not None and not e.continues for e in events] == [
        True,
        False,
        False,
        True,
    ]  # a tick may split one report


def test_the_report_window_forgets_old_reports() -> None:
    parser = KernelLogParser()
    for pid in range(1, 2000):
        assert parser.feed(f"[{pid}.0] NVRM: Xid (PCI:0000:18:00): 13, pid={pid}, name=p, x") is not None
    assert len(parser._reports) <= 256
