"""The XID cursor: a restarted watcher counts no XID twice (real threads, real files, a real state file).

``/dev/kmsg`` itself cannot be fed here, so its mode reads a regular file of kmsg records
(``pri,seq,usec,flags;message``), which the watcher reads the same way (one or more records per
read, sequence numbers in the prefix).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from observe.agent.klog import KernelRing
from observe.agent.xid_cursor import STATE_FILE, XidCursor, kmsg_sequence
from observe.agent.xid_watch import KernelLogWatcher, XidStore
from tests.support.processes import wait_for

BOOT = "5d1e0a2c-0000-4000-8000-00000000b007"


def xid_line(code: int, bus: str = "3b") -> str:
    return f"NVRM: Xid (PCI:0000:{bus}:00): {code}, pid=7, name=python, made up\n"


def kmsg_record(seq: int, code: int, bus: str = "3b") -> str:
    return f"3,{seq},{seq * 2_000_000},-;{xid_line(code, bus)}"  # 2 s apart: distinct faults


class Run:
    """One start of the watcher with a cursor, as the sampler wires them."""

    def __init__(
        self, state: Path, source: Path, follow_file: bool, boot_id: str | None = BOOT, ring: KernelRing | None = None
    ) -> None:
        self.store = XidStore()
        self.cursor = XidCursor(
            str(state),
            "syslog(2)" if ring else str(source),
            follow_file,
            boot_id,
            snapshot=lambda: self.store.view()[1:],
            min_interval=0.0,
        )
        restored = self.cursor.load(wait_seconds=0.2)
        self.why = restored.why
        self.taken_over = {code: n for (_, code, _), n in restored.counts.items()}
        self.store.restore(restored.counts, restored.uuids)
        kwargs: dict = {"path": str(source)} if follow_file else {"ring": ring} if ring else {"kmsg": str(source)}
        self.watcher = KernelLogWatcher(self.store, node="n", poll_seconds=0.05, cursor=self.cursor, **kwargs)
        assert self.watcher.start()

    def counts(self) -> dict[int, int]:
        return {code: n for (_, code, _), n in self.store.view()[1].items()}

    def stop(self) -> None:
        self.watcher.stop()
        self.cursor.close()


def test_kmsg_sequence_numbers() -> None:
    assert kmsg_sequence("6,20511,5678901234,-;NVRM: Xid (PCI:0000:3b:00): 63, x") == 20511
    assert kmsg_sequence(" DEVICE=+pci:0000:3b:00.0") is None
    assert kmsg_sequence("NVRM: Xid (PCI:0000:3b:00): 63, x") is None


def test_kmsg_restart_in_the_same_boot_skips_what_was_counted(tmp_path: Path) -> None:
    ring = tmp_path / "kmsg"
    ring.write_text(kmsg_record(10, 48) + kmsg_record(11, 79, "86"))
    first = Run(tmp_path / "state", ring, follow_file=False)
    wait_for(lambda: first.counts() == {48: 1, 79: 1}, what="two XIDs")
    with ring.open("a") as f:
        f.write(kmsg_record(12, 48))
    wait_for(lambda: first.counts() == {48: 2, 79: 1}, what="the third XID")
    first.stop()

    with ring.open("a") as f:  # logged while the agent was down
        f.write(kmsg_record(13, 13) + kmsg_record(14, 48))
    second = Run(tmp_path / "state", ring, follow_file=False)
    assert second.taken_over == {48: 2, 79: 1}  # before anything is read: the counter never dips
    wait_for(lambda: second.counts() == {48: 3, 79: 1, 13: 1}, what="the two XIDs logged while down")
    second.stop()
    assert second.why == "resuming after ring-buffer position 12"
    assert second.counts() == {48: 3, 79: 1, 13: 1}  # every record counted once


def syslog_line(stamp: str, code: int, bus: str = "3b") -> bytes:
    return f"<3>[{stamp}] {xid_line(code, bus)}".encode()


def test_syslog_restart_in_the_same_boot_skips_lines_up_to_the_saved_timestamp(tmp_path: Path) -> None:
    """syslog(2) lines have no sequence number: their timestamp, and how many before had the same."""
    buffer = bytearray(
        syslog_line(" 8123.004512", 48)
        + syslog_line(" 8123.004512", 79, "86")
        + b"<6>[ 8124.000001] usb 1-4: new high-speed USB device\n"
    )

    def ring() -> KernelRing:
        return KernelRing(read_all=lambda n: bytes(buffer[-n:]), buffer_bytes=1 << 16)

    first = Run(tmp_path / "state", tmp_path / "unused", follow_file=False, ring=ring())
    wait_for(lambda: first.counts() == {48: 1, 79: 1}, what="two XIDs with one timestamp")
    first.stop()
    buffer += syslog_line(" 8125.100000", 48) + syslog_line(" 8125.100000", 13)  # logged while down
    second = Run(tmp_path / "state", tmp_path / "unused", follow_file=False, ring=ring())
    wait_for(lambda: second.counts() == {48: 2, 79: 1, 13: 1}, what="the lines logged while down")
    second.stop()
    assert second.why == "resuming after ring-buffer position 8124 0"
    assert second.counts() == {48: 2, 79: 1, 13: 1}


def test_kmsg_after_a_reboot_counts_the_new_ring_from_zero(tmp_path: Path) -> None:
    ring = tmp_path / "kmsg"
    ring.write_text(kmsg_record(10, 48))
    first = Run(tmp_path / "state", ring, follow_file=False)
    wait_for(lambda: first.counts() == {48: 1}, what="the XID")
    first.stop()
    ring.write_text(kmsg_record(1, 79))  # the new boot's ring starts again at low sequence numbers
    second = Run(tmp_path / "state", ring, follow_file=False, boot_id="another-boot")
    wait_for(lambda: second.counts() == {79: 1}, what="the new boot's XID")
    second.stop()
    assert second.why == "a new boot: the kernel ring buffer starts afresh"


def test_a_file_is_read_on_from_its_last_line_rotated_and_truncated_ones_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("boot noise\n" + xid_line(48) + xid_line(79, "86"))
    first = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: first.counts() == {48: 1, 79: 1}, what="two XIDs")
    first.stop()
    with log.open("a") as f:
        f.write(xid_line(48))
    second = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: second.counts() == {48: 2, 79: 1}, what="the line appended while down")
    second.stop()

    os.rename(log, tmp_path / "kern.log.1")  # rotated while down: the new file is new lines
    log.write_text(xid_line(13))
    third = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: third.counts() == {48: 2, 79: 1, 13: 1}, what="the rotated file's XID")
    third.stop()

    log.write_text(xid_line(31) + xid_line(13))  # copytruncate and refill, past the old offset
    fourth = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: fourth.counts() == {48: 2, 79: 1, 13: 2, 31: 1}, what="the truncated file read again")
    fourth.stop()
    assert fourth.counts() == {48: 2, 79: 1, 13: 2, 31: 1}


def test_a_replaced_file_of_the_same_size_is_read_from_the_start(tmp_path: Path) -> None:
    """Same inode and size, other bytes before the saved offset: the tail hash tells them apart."""
    log = tmp_path / "kern.log"
    log.write_text(xid_line(48))
    first = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: first.counts() == {48: 1}, what="the XID")
    first.stop()
    with log.open("r+") as f:
        f.write(xid_line(31))  # the same length, written over in place
    second = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: second.counts() == {48: 1, 31: 1}, what="the XID written in place")
    second.stop()


def test_the_state_file_is_plain_and_holds_nothing_secret(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("NVRM: GPU at PCI:0000:3b:00: GPU-2f7a1c3e-8d4b-4e61-9a0f-5c3e2b1d7a90\n" + xid_line(48))
    run = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: run.counts() == {48: 1}, what="the XID")
    run.stop()
    path = tmp_path / "state" / STATE_FILE
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    data = json.loads(path.read_text())
    assert data["counts"] == [["0000:3b:00", 48, "gpu_reset", 1]]
    assert data["uuids"] == {"0000:3b:00": "GPU-2f7a1c3e-8d4b-4e61-9a0f-5c3e2b1d7a90"}
    assert data["file"]["offset"] == log.stat().st_size
    assert "python" not in path.read_text()  # no process names, messages or raw lines


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "state unreadable"),
        ("[]", "state has the wrong shape"),
        (json.dumps({"version": 1, "source": "SOURCE", "counts": 3}), "state has the wrong shape"),
        (
            json.dumps({"version": 1, "source": "/var/log/other.log", "counts": []}),
            "state was for '/var/log/other.log', not 'SOURCE'",
        ),
    ],
)
def test_a_broken_or_foreign_state_file_means_counting_afresh(tmp_path: Path, content: str, why: str) -> None:
    log = tmp_path / "kern.log"
    log.write_text(xid_line(48))
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / STATE_FILE).write_text(content.replace("SOURCE", str(log)))
    run = Run(tmp_path / "state", log, follow_file=True)
    wait_for(lambda: run.counts() == {48: 1}, what="the XID")
    run.stop()
    assert run.why == why.replace("SOURCE", str(log)) and run.taken_over == {}
    assert json.loads((tmp_path / "state" / STATE_FILE).read_text())["counts"] == [["0000:3b:00", 48, "gpu_reset", 1]]


def test_a_second_agent_on_the_node_keeps_no_state_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(xid_line(48))
    first = Run(tmp_path / "state", log, follow_file=True)
    with caplog.at_level(logging.WARNING):
        second = Run(tmp_path / "state", log, follow_file=True)
    try:
        assert not second.cursor.enabled
        assert [r.getMessage() for r in caplog.records if "XID state" in r.getMessage()] == [
            f"XID state: another agent holds {tmp_path / 'state' / STATE_FILE}; a restart of this agent counts the "
            f"kernel log's XIDs again (reported once)"
        ]
        wait_for(lambda: second.counts() == {48: 1} and first.counts() == {48: 1}, what="both count")
    finally:
        second.stop()
        first.stop()
