"""The kernel-log watcher on a real thread, reading real files (the XID case file among them)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from observe.agent.xid_watch import KernelLogWatcher, XidStore
from tests.support.cases import CASES
from tests.support.processes import wait_for

KERNEL_LOG = CASES / "xid" / "kernel-log.txt"
EXPECTED = [json.loads(line) for line in (CASES / "xid" / "expected.jsonl").read_text().splitlines() if line]
#: What the agent counts: the case's second event is the ESR line of the first's out-of-range access
#: (pid 48213, the same instant), which continues that report.
COUNTED = EXPECTED[:1] + EXPECTED[2:]


def watch(**kwargs) -> tuple[KernelLogWatcher, XidStore]:
    store = XidStore()
    watcher = KernelLogWatcher(store, node="n", poll_seconds=0.05, **kwargs)
    return watcher, store


def events(store: XidStore) -> list:
    return store.view()[0]


def test_follows_a_file_as_it_grows(tmp_path: Path) -> None:
    log_file = tmp_path / "kern.log"
    lines = KERNEL_LOG.read_text().splitlines(keepends=True)
    log_file.write_text("".join(lines[:5]))
    watcher, store = watch(path=str(log_file))
    assert watcher.start() and watcher.up
    try:
        wait_for(lambda: len(events(store)) == 1, what="the first event (one XID 13 report of two lines)")
        with open(log_file, "a") as f:
            f.writelines(lines[5:])
        wait_for(lambda: len(events(store)) == len(COUNTED), what="all events")
        wait_for(lambda: watcher.parse_errors == 1, what="the truncated line")
    finally:
        watcher.stop()
    assert [(e.xid, e.pci_bus, e.gpu_uuid) for e in events(store)] == [
        (x["xid"], x["pci_bus"], x["gpu_uuid"]) for x in COUNTED
    ]
    assert store.view()[1][("0000:3b:00", 13, "application")] == 1  # before: 2 for one out-of-range access


def test_reopens_a_rotated_or_truncated_file(tmp_path: Path) -> None:
    log_file = tmp_path / "kern.log"
    log_file.write_text("NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x\n")
    watcher, store = watch(path=str(log_file))
    watcher.start()
    try:
        wait_for(lambda: len(events(store)) == 1, what="the first event")
        log_file.write_text("NVRM: Xid (PCI:0000:3b:00): 31, x\n")  # truncated and rewritten
        wait_for(lambda: len(events(store)) == 2, what="the event after truncation")
        rotated = tmp_path / "kern.log.1"
        os.rename(log_file, rotated)
        log_file.write_text("NVRM: Xid (PCI:0000:3b:00): 48, pid=2, name=b, DBE and more text here\n")
        wait_for(lambda: len(events(store)) == 3, what="the event after rotation")
    finally:
        watcher.stop()
    assert [e.xid for e in events(store)] == [13, 31, 48]


def test_reads_kmsg_records_and_dates_them(tmp_path: Path) -> None:
    # a regular file holding /dev/kmsg records stands in for the device (same record format)
    kmsg = tmp_path / "kmsg"
    kmsg.write_text(
        "6,1,100,-;usb 1-4: new device\n"
        "3,2,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        " SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n"
    )
    watcher, store = watch(kmsg=str(kmsg), boot_time=1000.0)
    assert watcher.start()
    try:
        event = wait_for(lambda: events(store), what="the XID 79")[0]
    finally:
        watcher.stop()
    assert (event.xid, event.time_unix, len(events(store))) == (79, 1005.0, 1)
    # the latest XID's time is the record's own (boot time + its microseconds since boot), even
    # though the agent read it from the ring buffer's backlog
    assert store.last_times() == {("0000:3b:00", 79, "node_reboot"): 1005.0}


def test_a_file_backlog_has_no_known_time_and_an_appended_line_is_dated_when_read(tmp_path: Path) -> None:
    log_file = tmp_path / "kern.log"
    log_file.write_text("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, name=a, DBE\n")  # may be days old
    watcher, store = watch(path=str(log_file))
    assert watcher.start()
    try:
        wait_for(lambda: len(events(store)) == 1, what="the backlog's XID 48")
        wait_for(lambda: watcher._caught_up, what="the watcher at the file's end")
        assert store.last_times() == {}
        before = time.time()
        with open(log_file, "a") as f:
            f.write("NVRM: Xid (PCI:0000:86:00): 79, pid=2, name=b, GPU has fallen off the bus.\n")
        wait_for(lambda: len(events(store)) == 2, what="the appended XID 79")
    finally:
        watcher.stop()
    (key, when), *rest = store.last_times().items()
    assert key == ("0000:86:00", 79, "node_reboot") and not rest
    assert before <= when <= time.time()


def test_the_latest_dated_time_wins_and_undated_reports_only_count() -> None:
    from observe.xid import KernelLogParser

    parser, store = KernelLogParser(), XidStore()
    line = "NVRM: Xid (PCI:0000:3b:00): 48, pid=5, name=python3, DBE"
    store.add(parser.feed(line, now=200.0))
    store.add(parser.feed(line, now=100.0))  # read later, happened earlier
    store.add(parser.feed(line, now=900.0), dated=False)
    assert store.view()[1] == {("0000:3b:00", 48, "gpu_reset"): 3}
    assert store.last_times() == {("0000:3b:00", 48, "gpu_reset"): 200.0}


def test_an_unreadable_kernel_log_is_survived_and_reported_once(
    unreadable_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    watcher, _ = watch(kmsg=str(unreadable_path))
    with caplog.at_level(logging.WARNING):
        assert watcher.start() is False
    assert not watcher.up and "Permission denied" in watcher.status
    assert len(caplog.records) == 1 and "CAP_SYSLOG" in caplog.records[0].getMessage()
    watcher.stop()


def test_store_counts_every_report_and_redacts_process_text() -> None:
    from observe.xid import KernelLogParser

    parser, store = KernelLogParser(), XidStore(keep=3)
    line = "NVRM: Xid (PCI:0000:3b:00): 13, pid=5, name=HF_TOKEN=hf_QmW3rT7yU1iO5pA9sD2fG6hJ0kL4zX8c, \x1b[31mboom"
    for i in range(5):
        store.add(parser.feed(line, now=10.0 * i))  # five faults, ten seconds apart
    recent, counts, _ = store.view()
    assert counts == {("0000:3b:00", 13, "application"): 5}
    assert len(recent) == 3
    assert recent[0].process == "HF_TOKEN=<redacted>" and "hf_Qm" not in recent[0].raw
    assert recent[0].message == "\\x1b[31mboom"
