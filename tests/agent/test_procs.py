"""The process table: real processes through the real /proc, and fixture procfs trees for faults."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from observe.agent.procs import PF_KTHREAD, ProcessTable, parse_cgroup
from tests.support.processes import wait_for


def make_proc(
    root: Path,
    pid: int,
    comm: str = "worker",
    state: str = "S",
    ppid: int = 1,
    utime: int = 10,
    stime: int = 5,
    threads: int = 3,
    rss_pages: int = 256,
    cmdline: bytes = b"worker\0--flag\0",
    cgroup: str = "0::/\n",
    flags: int = 0,
) -> Path:
    """A ``/proc/<pid>`` directory with the files the table reads (fields at their proc(5) positions)."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    fields = [state, ppid, 0, 0, 0, -1, flags, 0, 0, 0, 0, utime, stime, 0, 0, 20, 0, threads, 0, 12345]
    fields += [1 << 20, rss_pages]  # vsize 23, rss 24
    (d / "stat").write_text(f"{pid} ({comm}) " + " ".join(map(str, fields)) + " 0 0 0\n")
    (d / "cmdline").write_bytes(cmdline)
    (d / "cgroup").write_text(cgroup)
    return d


def test_a_real_process_reads_like_htop(sleepers) -> None:
    proc = sleepers(["trainer-like", "--lr", "1e-4"])
    table = ProcessTable()
    table.refresh(time.monotonic())
    table.refresh(time.monotonic() + 1)
    info = table.info(proc.pid, memory_total_bytes=1 << 34)
    assert info.command == "trainer-like --lr 1e-4"
    assert (info.ppid, info.state, info.cpu_cores) == (os.getpid(), "sleeping", 0.0)
    assert info.rss_bytes > 0 and 0 < info.memory_ratio < 1 and info.threads == 1
    assert info.user is not None and info.cpu_seconds >= 0
    assert table.count >= 2 and table.threads >= table.count
    assert sum(table.by_state.values()) == table.count
    table.close()


def test_a_busy_process_shows_cpu_and_ranks_first() -> None:
    """Ranked by CPU, then memory: the spinner above an idle process that holds more memory (busier
    processes of other programs may rank above both on a shared machine)."""
    idle = subprocess.Popen(
        [sys.executable, "-c", "import time; held = bytes(range(256)) * 200_000; print(flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE,
    )
    idle.stdout.readline()  # its 51 MB are held
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        table = ProcessTable()
        table.refresh(time.monotonic())
        first = None

        def used_cpu() -> bool:
            nonlocal first
            table.refresh(time.monotonic())
            info = table.info(spinner.pid, None)
            first = first if first is not None else info.cpu_seconds
            return info.cpu_seconds > first

        wait_for(used_cpu, what="the spinner to use CPU time")
        busy, still = table.info(spinner.pid, None), table.info(idle.pid, None)
        assert busy.cpu_cores > 0 and not still.cpu_cores and still.rss_bytes > busy.rss_bytes
        ranked = table.busiest(table.count)
        assert ranked.index(spinner.pid) < ranked.index(idle.pid)
        table.close()
    finally:
        for proc in (spinner, idle):
            proc.kill()
            proc.wait()


def test_a_process_that_exits_is_dropped_without_errors(sleepers, caplog: pytest.LogCaptureFixture) -> None:
    procs = [sleepers(["short-lived"]) for _ in range(3)]
    table = ProcessTable()
    table.refresh(time.monotonic())
    for proc in procs:
        proc.kill()
        proc.wait()
        assert table.info(proc.pid, None) is not None  # still in this reading; its cmdline is gone
    with caplog.at_level(logging.INFO, logger="observe.agent.procs"):
        for _ in range(3):
            table.refresh(time.monotonic())
    assert all(p.pid not in table for p in procs)
    assert not table.errors
    table.close()


def test_exit_between_listing_and_reading_is_survived_and_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_proc(tmp_path, 100)
    (tmp_path / "101").mkdir()  # listed, but its files are gone: the process exited mid-read
    (tmp_path / "102").mkdir()
    table = ProcessTable(str(tmp_path))
    with caplog.at_level(logging.INFO, logger="observe.agent.procs"):
        for _ in range(3):
            table.refresh(time.monotonic())
    assert table.pids() == [100]
    assert not table.errors
    assert len([r for r in caplog.records if "exited while it was read" in r.getMessage()]) == 1


@pytest.mark.parametrize("keep_open", [True, False])
def test_an_unreadable_entry_is_counted_and_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, keep_open: bool
) -> None:
    make_proc(tmp_path, 100)
    (tmp_path / "200").mkdir()
    (tmp_path / "200" / "stat").mkdir()  # reading it fails (EISDIR), for root as for anyone
    table = ProcessTable(str(tmp_path), keep_open=keep_open)
    with caplog.at_level(logging.WARNING, logger="observe.agent.procs"):
        for _ in range(3):
            table.refresh(time.monotonic())
    assert table.pids() == [100]
    assert table.errors["proc_unreadable"] == 3
    assert len(caplog.records) == 1 and "reported once" in caplog.records[0].getMessage()


def test_a_garbled_stat_is_a_parse_error(tmp_path: Path) -> None:
    make_proc(tmp_path, 100)
    (make_proc(tmp_path, 300) / "stat").write_text("300 (broken\n")
    table = ProcessTable(str(tmp_path))
    table.refresh(time.monotonic())
    assert table.pids() == [100] and table.errors["proc_parse"] == 1


def test_fixture_fields_land_where_proc5_puts_them(tmp_path: Path) -> None:
    make_proc(
        tmp_path,
        42,
        comm="odd ) name (x",
        state="D",
        ppid=7,
        utime=300,
        stime=100,
        threads=9,
        rss_pages=1000,
        cmdline=b"python\0train.py\0--password=opensesame\0",
    )
    table = ProcessTable(str(tmp_path))
    table.refresh(0.0)
    info = table.info(42, memory_total_bytes=None)
    assert (info.name, info.state, info.ppid, info.threads) == ("odd ) name (x", "disk_sleep", 7, 9)
    assert info.cpu_seconds == pytest.approx(400 / os.sysconf("SC_CLK_TCK"))
    assert info.rss_bytes == 1000 * os.sysconf("SC_PAGE_SIZE") and info.memory_ratio is None
    assert info.command == "python train.py --password=<redacted>"
    assert info.cpu_cores is None  # first reading: no interval yet (absent, not 0)


def test_cpu_share_is_ticks_over_wall_time(tmp_path: Path) -> None:
    make_proc(tmp_path, 42, utime=100, stime=0)
    table = ProcessTable(str(tmp_path))
    table.refresh(10.0)
    hz = os.sysconf("SC_CLK_TCK")
    make_proc(tmp_path, 42, utime=100 + 3 * hz, stime=0)  # 3 s of CPU in 2 s of wall time
    table.refresh(12.0)
    assert table.info(42, None).cpu_cores == pytest.approx(1.5)
    table.refresh(13.0)  # unchanged stat: idle
    assert table.info(42, None).cpu_cores == 0.0


def test_exec_refreshes_the_command_line(tmp_path: Path) -> None:
    make_proc(tmp_path, 42, comm="bash", cmdline=b"bash\0-c\0python train.py\0")
    table = ProcessTable(str(tmp_path), keep_open=False)
    table.refresh(0.0)
    assert table.info(42, None).command == "bash -c python train.py"
    make_proc(tmp_path, 42, comm="python", cmdline=b"python\0train.py\0")
    table.refresh(1.0)
    assert table.info(42, None).command == "python train.py"


def test_kernel_threads_show_their_name_in_brackets(tmp_path: Path) -> None:
    make_proc(tmp_path, 2, comm="kthreadd", cmdline=b"", flags=PF_KTHREAD | 0x40)
    table = ProcessTable(str(tmp_path))
    table.refresh(0.0)
    assert table.info(2, None).command == "[kthreadd]"
    (tmp_path / "2" / "cmdline").write_bytes(b"never\0read\0")  # a kernel thread's is cached
    table.refresh(1.0)
    assert table.info(2, None).command == "[kthreadd]"


def test_a_process_read_mid_exec_shows_its_arguments_once_they_are_there(tmp_path: Path) -> None:
    """Between exec's new name and its new arguments, ``/proc/pid/cmdline`` reads empty. Before: the
    agent cached ``[sleeper]`` for the process's life (seen once in the test suite, on a real exec)."""
    make_proc(tmp_path, 42, comm="sleeper", cmdline=b"")
    table = ProcessTable(str(tmp_path))
    table.refresh(0.0)
    assert table.info(42, None).command == "[sleeper]"
    (tmp_path / "42" / "cmdline").write_bytes(b"sleeper\0--for\0ever\0")
    table.refresh(1.0)
    assert table.info(42, None).command == "sleeper --for ever"


def test_processes_show_their_pod_and_container(tmp_path: Path) -> None:
    uid, cid = "0f2c9a44-52a3-4b8e-9c41-3e2d7f1a6b90", "a" * 64
    make_proc(
        tmp_path,
        5,
        cgroup=f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n",
    )
    table = ProcessTable(str(tmp_path))
    table.refresh(0.0)
    info = table.info(5, None)
    assert (info.pod_uid, info.container_id) == (uid, cid)


@pytest.mark.parametrize(
    "text, pod, container",
    [
        (
            "12:memory:/kubepods/burstable/pod0f2c9a44-52a3-4b8e-9c41-3e2d7f1a6b90/" + "b" * 64 + "\n",
            "0f2c9a44-52a3-4b8e-9c41-3e2d7f1a6b90",
            "b" * 64,
        ),
        ("0::/system.slice/docker-" + "c" * 64 + ".scope\n", None, "c" * 64),
        ("0::/user.slice/user-1000.slice/session-2.scope\n", None, None),
        ("", None, None),
    ],
)
def test_cgroup_layouts(text: str, pod: str | None, container: str | None) -> None:
    assert parse_cgroup(text) == (pod, container)


def test_busiest_orders_by_cpu_then_memory(tmp_path: Path) -> None:
    for pid, rss in ((1, 10), (2, 30), (3, 20)):
        make_proc(tmp_path, pid, rss_pages=rss)
    table = ProcessTable(str(tmp_path))
    table.refresh(0.0)
    assert table.busiest(2) == [2, 3]


def test_idle_processes_are_read_again_every_few_collections(tmp_path: Path) -> None:
    make_proc(tmp_path, 10, utime=0, stime=0)
    table = ProcessTable(str(tmp_path), idle_every=5)
    table.refresh(0.0)
    table.refresh(1.0)  # unchanged: idle, and from now on read every 5th collection (staggered by pid)
    hz = os.sysconf("SC_CLK_TCK")
    make_proc(tmp_path, 10, utime=2 * hz, stime=0)  # it wakes up and uses 2 s of CPU
    shares = []
    for now in (2.0, 3.0, 4.0):  # collections 3, 4, 5: pid 10 is due at the 5th
        table.refresh(now)
        shares.append(table.info(10, None).cpu_cores)
    assert shares == [0.0, 0.0, pytest.approx(2 / 3)]  # 2 s of CPU over the 3 s since its last read
    table.refresh(5.0)  # busy at its last read: read every collection again
    assert table.info(10, None).cpu_cores == 0.0
