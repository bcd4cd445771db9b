"""The kernel log when it misbehaves: crafted log files for
file mode (a line without a newline, copytruncate refilled past the read position, a deleted or
unreadable log), and the ``syslog(2)`` reader over crafted ring buffers and over this machine's
real one."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from observe.agent.klog import KernelRing, timestamp
from observe.agent.logfile import MAX_LINE_BYTES, FollowedFile
from observe.agent.xid_watch import KernelLogWatcher, XidStore
from observe.xid import KernelLogParser
from tests.support.processes import wait_for

XID = "NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, name=python, x\n"


def watch(**kwargs) -> tuple[KernelLogWatcher, XidStore]:
    store = XidStore()
    return KernelLogWatcher(store, node="n", poll_seconds=0.05, **kwargs), store


def codes(store: XidStore) -> list[int]:
    return [e.xid for e in store.view()[0]]


# --- file mode ----------------------------------------------------------------------------------


def test_a_run_without_newlines_is_cut_and_costs_linear_time(tmp_path: Path) -> None:
    """32 MB without a newline, then an XID: the XID is seen within seconds and the run is one
    cut line (the old follower re-split the whole pending buffer on every 64 KB read: 40 MB
    took 10.7 s of CPU, 100 MB did not finish in 120 s)."""
    log = tmp_path / "kern.log"
    log.write_text(XID.format(code=13))
    watcher, store = watch(path=str(log))
    assert watcher.start()
    try:
        wait_for(lambda: codes(store) == [13], what="the first XID")
        cpu = time.process_time()
        with open(log, "ab") as f:
            for _ in range(32):
                f.write(b"z" * (1 << 20))
            f.write(("\n" + XID.format(code=31)).encode())
        wait_for(lambda: codes(store) == [13, 31], timeout=20, what="the XID after 32 MB without a newline")
        assert time.process_time() - cpu < 5.0
        assert watcher.long_lines == 1 and watcher.up
    finally:
        watcher.stop()


def test_a_cut_line_keeps_its_start() -> None:
    """An XID line longer than the cap still yields its XID (the report is at the line's start)."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(XID.format(code=79).rstrip("\n") + "y" * (3 * MAX_LINE_BYTES) + "\nnext\n")
    try:
        followed = FollowedFile(f.name)
        followed.open()
        lines = []
        while chunk := followed.read_lines():
            lines += chunk
        followed.close()
    finally:
        os.unlink(f.name)
    assert [len(line) for line in lines] == [MAX_LINE_BYTES, 4] and followed.long_lines == 1
    assert KernelLogParser().feed(lines[0].decode()).xid == 79


def test_copytruncate_refilled_past_the_old_position_before_a_poll_loses_nothing(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("".join(f"[{i}.0] usb: line {i}\n" for i in range(200)) + XID.format(code=13))
    watcher, store = watch(
        path=str(log),
    )
    watcher.poll_seconds = 1.0  # room to truncate and refill between two checks
    assert watcher.start()
    try:
        wait_for(lambda: codes(store) == [13], what="the first XID")
        size = log.stat().st_size
        with open(log, "r+") as f:  # what logrotate's copytruncate does, then the next writes
            f.truncate(0)
            f.write(XID.format(code=79) + "".join(f"[{i}.5] refill {i}\n" for i in range(400)))
        assert log.stat().st_size > size and log.stat().st_ino == os.stat(log).st_ino
        wait_for(lambda: codes(store) == [13, 79], timeout=10, what="the XID at the start of the refilled file")
    finally:
        watcher.stop()


def test_a_refill_with_the_same_first_bytes_is_read_again_from_its_start(tmp_path: Path) -> None:
    """A log whose first 256 bytes do not change (a fixed banner) truncated and refilled past the
    read position before a poll. Before: taken for the same file grown, the refill's lines up to the
    old position were never read (the probe: 20 lines written, 10 counted)."""
    banner = "".join(f"kernel: Linux version 6.8.0 banner line {i}\n" for i in range(10))  # > 256 bytes
    log = tmp_path / "kern.log"
    log.write_text(banner + "".join(XID.format(code=13).replace("pid=1", f"pid={i}") for i in range(10)))
    watcher, store = watch(path=str(log))
    watcher.poll_seconds = 1.0  # room to truncate and refill between two checks
    assert watcher.start()
    try:
        wait_for(lambda: len(codes(store)) == 10, what="the first ten XIDs")
        size = log.stat().st_size
        with open(log, "r+") as f:
            f.truncate(0)
            f.write(banner + "".join(XID.format(code=31).replace("pid=1", f"pid={i}") for i in range(20)))
        assert log.stat().st_size > size
        wait_for(lambda: codes(store).count(31) == 20, timeout=10, what="every XID of the refilled file")
    finally:
        watcher.stop()
    assert codes(store) == [13] * 10 + [31] * 20


def test_a_refill_between_a_check_and_the_next_read_is_read_from_its_start(tmp_path: Path) -> None:
    """The same refill as above, landing after the watcher's check and before its read (the order
    of one poll). Before: the read went on at the old position and took only the refill's last 10
    lines; the next check compared the bytes that read had just taken and saw nothing wrong."""
    banner = "".join(f"kernel: Linux version 6.8.0 banner line {i}\n" for i in range(10))
    log = tmp_path / "kern.log"
    log.write_text(banner + "".join(XID.format(code=13).replace("pid=1", f"pid={i}") for i in range(10)))
    followed = FollowedFile(str(log))
    followed.open()
    try:
        first = [line for chunk in iter(followed.read_lines, []) for line in chunk]
        assert followed.check() is None and len(first) == 20
        with open(log, "r+") as f:
            f.truncate(0)
            f.write(banner + "".join(XID.format(code=31).replace("pid=1", f"pid={i}") for i in range(20)))
        again = [line for chunk in iter(followed.read_lines, []) for line in chunk]
    finally:
        followed.close()
    assert [KernelLogParser().feed(line.decode()).xid for line in again[10:]] == [31] * 20
    assert len(again) == 30 and followed.reopened == 1


def test_a_file_grown_with_the_same_content_is_not_read_twice(tmp_path: Path) -> None:
    """``dmesg > file`` run again: the same lines and more. Read on from where it was, not again."""
    lines = "".join(XID.format(code=13).replace("pid=1", f"pid={i}") for i in range(5))
    log = tmp_path / "kern.log"
    log.write_text(lines)
    watcher, store = watch(path=str(log))
    watcher.poll_seconds = 1.0
    assert watcher.start()
    try:
        wait_for(lambda: len(codes(store)) == 5, what="five XIDs")
        with open(log, "r+") as f:
            f.truncate(0)
            f.write(lines + XID.format(code=48))
        wait_for(lambda: 48 in codes(store), timeout=10, what="the new XID")
        time.sleep(1.5)
    finally:
        watcher.stop()
    assert codes(store) == [13] * 5 + [48]


def test_a_deleted_log_reports_not_ok_and_a_recreated_one_is_read(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(XID.format(code=13))
    watcher, store = watch(path=str(log))
    assert watcher.start()
    try:
        wait_for(lambda: codes(store) == [13], what="the first XID")
        log.unlink()
        wait_for(lambda: not watcher.up, timeout=10, what="the source to report the deleted log")
        assert "is gone" in watcher.status and str(log) in watcher.status
        log.write_text(XID.format(code=48))
        wait_for(lambda: watcher.up and codes(store) == [13, 48], timeout=10, what="the recreated log")
    finally:
        watcher.stop()


def test_an_unreadable_log_reports_not_ok(tmp_path: Path) -> None:
    """The log replaced by something that cannot be read as a file (a directory: even root gets
    EISDIR) makes the source not ok; a readable file again makes it ok."""
    log = tmp_path / "kern.log"
    log.write_text(XID.format(code=13))
    watcher, store = watch(path=str(log))
    assert watcher.start()
    try:
        wait_for(lambda: codes(store) == [13], what="the first XID")
        log.unlink()
        log.mkdir()
        wait_for(lambda: "Is a directory" in watcher.status, timeout=10, what="the unreadable log")
        assert not watcher.up
        log.rmdir()
        log.write_text(XID.format(code=31))
        wait_for(lambda: watcher.up and codes(store) == [13, 31], timeout=10, what="a readable log again")
    finally:
        watcher.stop()


def test_the_sampler_shows_a_broken_log_as_a_source_that_is_down(tmp_path: Path) -> None:
    from observe.agent.exposition import render
    from observe.agent.sampler import Sampler, Settings

    log = tmp_path / "kern.log"
    log.write_text("hello\n")
    sampler = Sampler(Settings(node="n", kernel_log=str(log), kmsg=str(tmp_path / "none")))
    sampler.watcher.poll_seconds = 0.05
    sampler.start()
    try:
        assert sampler.sample().agent.sources["kernel_log"] == "ok"
        log.unlink()
        wait_for(lambda: not sampler.watcher.up, timeout=10, what="the watcher to notice")
        snapshot = sampler.sample()
        assert "is gone" in snapshot.agent.sources["kernel_log"]
        assert 'fsdp_node_agent_source_up{node="n",source="kernel_log"} 0.0' in render(snapshot).decode()
    finally:
        sampler.stop()


# --- syslog(2) --------------------------------------------------------------------------------------


class Ring:
    """A crafted kernel ring buffer: ``read_all(n)`` returns its newest ``n`` bytes, as syslog(2) does."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.capacity, self.text, self.reads = capacity, b"", []

    def log(self, *lines: str) -> None:
        self.text = (self.text + "".join(f"{line}\n" for line in lines).encode())[-self.capacity :]
        cut = self.text.find(b"\n") + 1 if len(self.text) == self.capacity else 0
        self.text = self.text[cut:]  # the ring drops whole records

    def read_all(self, n: int) -> bytes:
        self.reads.append(n)
        return self.text[-n:]


def test_the_ring_reader_returns_each_line_once() -> None:
    ring = Ring()
    ring.log("<6>[    1.000000] boot", "<3>[    2.500000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x")
    reader = KernelRing(ring.read_all, buffer_bytes=ring.capacity)
    assert reader.new_lines() == [
        b"<6>[    1.000000] boot",
        b"<3>[    2.500000] NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=a, x",
    ]
    assert reader.new_lines() == []
    ring.log("<6>[    3.000000] later")
    assert reader.new_lines() == [b"<6>[    3.000000] later"]
    assert ring.reads[-1] < ring.capacity  # found in the tail: the whole buffer is not read each time


def test_the_ring_reader_survives_the_ring_wrapping_past_its_last_line() -> None:
    ring = Ring(capacity=4096)
    ring.log(*(f"<6>[{i:5d}.000000] old {i}" for i in range(10)))
    reader = KernelRing(ring.read_all, buffer_bytes=ring.capacity)
    assert len(reader.new_lines()) == 10
    ring.log(*(f"<6>[{i:5d}.000000] flood {i:04d} " + "x" * 40 for i in range(10, 400)))
    new = reader.new_lines()
    assert new and all(b"flood" in line for line in new)  # nothing old again, nothing twice
    assert [timestamp(line) for line in new] == sorted(timestamp(line) for line in new)
    assert reader.new_lines() == []


def test_the_watcher_reads_xids_through_syslog_and_dates_them_from_boot() -> None:
    ring = Ring()
    ring.log("<6>[   10.000000] boot")
    watcher, store = watch(ring=KernelRing(ring.read_all, buffer_bytes=ring.capacity), boot_time=1000.0)
    assert watcher.start() and watcher.source == "syslog(2)"
    try:
        ring.log(
            "<3>[   42.250000] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus."
        )
        event = wait_for(lambda: store.view()[0], what="the XID from the ring")[0]
        time.sleep(0.2)
    finally:
        watcher.stop()
    assert (event.xid, event.time_unix, len(store.view()[0])) == (79, 1042.25, 1)


@pytest.mark.skipif(os.geteuid() != 0, reason="writing a line into the real kernel log needs root")
def test_the_real_syslog_call_reads_a_line_written_to_the_kernel_log() -> None:
    """This machine's own ring buffer through the real klogctl (root here has CAP_SYSLOG): a
    harmless marker line (no XID) written to /dev/kmsg comes back exactly once."""
    reader = KernelRing()
    reader.new_lines()  # everything so far
    marker = f"fsdp-observe test marker {uuid.uuid4().hex}"
    with open("/dev/kmsg", "w") as kmsg:
        kmsg.write(marker + "\n")
    seen = wait_for(lambda: [line for line in reader.new_lines() if marker.encode() in line], what="the marker")
    assert len(seen) == 1 and timestamp(seen[0]) is not None
    assert not [line for line in reader.new_lines() if marker.encode() in line]


def test_a_refused_syslog_call_falls_back_to_nvml_with_the_capability_named(caplog) -> None:
    def refuse(n: int) -> bytes:
        raise PermissionError(1, "Operation not permitted")

    class Refused(KernelRing):
        def __init__(self) -> None:  # the constructor's probe, as the real call does without CAP_SYSLOG
            super().__init__(refuse, buffer_bytes=4096)

    watcher, _ = watch(syslog=True)
    watcher._ring = None
    import observe.agent.xid_watch as xw

    original = xw.KernelRing
    xw.KernelRing = Refused  # type: ignore[misc]
    try:
        assert watcher.start() is False
    finally:
        xw.KernelRing = original  # type: ignore[misc]
    assert not watcher.up and "syslog(2)" in watcher.status and "Operation not permitted" in watcher.status
    assert "CAP_SYSLOG" in caplog.text
