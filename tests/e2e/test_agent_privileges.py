"""The least privilege that keeps each agent feature, measured: the real agent process run
with exactly the privileges of each manifest, by ``setpriv`` (uid, capability sets, no_new_privs)
and ``unshare`` (a PID namespace of its own, as a pod without hostPID has), reading this machine's
real procfs and kernel ring buffer; GPUs from the stand-in NVML library (no privilege involved:
on a node the NVIDIA runtime injects the library and device nodes).

What cannot be measured here, and is taken from the sources the docs cite: the container's device
cgroup (refuses /dev/kmsg to an unprivileged container) and the RuntimeDefault seccomp profile
(allows syslog(2) only with CAP_SYSLOG). This machine has kernel.dmesg_restrict=1, as most
distributions do; the test needs root to drop privileges from, and says so when it has not.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_nvml import FakeNvml
from tests.support.native import NVML_SONAME
from tests.support.processes import REPO, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
    reason="dropping privileges needs root, setpriv and unshare (util-linux)",
)

#: The manifests' privileges as setpriv arguments (docs/kubernetes.md "Privileges" has the table).
DEFAULT = [
    "--reuid=0",
    "--regid=0",
    "--clear-groups",
    "--inh-caps=-all,+syslog",
    "--bounding-set=-all,+syslog",
    "--no-new-privs",
]
NO_CAPABILITY_ROOT = [
    "--reuid=0",
    "--regid=0",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
]
RESTRICTED = [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all",
    "--no-new-privs",
]
NON_ROOT_AMBIENT_SYSLOG = [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=-all,+syslog",
    "--ambient-caps=-all,+syslog",
    "--bounding-set=-all,+syslog",
    "--no-new-privs",
]
#: components/agent-nonroot: uid 65534, CAP_SYSLOG in the container's set (bounding) but not effective.
NON_ROOT = [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=-all",
    "--bounding-set=-all,+syslog",
    "--no-new-privs",
]
OWN_PID_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def _searchable_by_others(path: Path) -> list[tuple[Path, int]]:
    """Give every folder above ``path`` that others cannot enter the search bit (``o+x``), as a
    container image's folders have it; returns what to put back. A clean clone in ``mktemp -d``
    (0700, as CI's are) otherwise hides the checkout, and so the editable
    install's ``observe``, from the uid-65534 agent."""
    changed = []
    for folder in path.resolve().parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
            changed.append((folder, stat.S_IMODE(mode)))
    return changed


@pytest.fixture(scope="module")
def world_readable(native) -> Iterator[Path]:
    """The stand-in NVML library and sleeper where uid 65534 can read them (pytest's tmp is 0700),
    and the checkout reachable by that uid (``_searchable_by_others``)."""
    restore = _searchable_by_others(REPO / "observe")
    root = Path(tempfile.mkdtemp(prefix="fsdp-observe-priv-"))
    root.chmod(0o755)
    shutil.copy(native.fake_nvml / NVML_SONAME, root / NVML_SONAME)
    shutil.copy(native.sleeper, root / "sleeper")
    for p in root.iterdir():
        p.chmod(0o755)
    yield root
    shutil.rmtree(root)
    for folder, mode in restore:
        folder.chmod(mode)


def run_agent(prefix: list[str], world_readable: Path, *args: str) -> dict:
    """Start the agent under ``prefix``, return its first full ``/snapshot``, stop it."""
    fake = FakeNvml(world_readable, world_readable / "scenario.conf")
    fake.set("gpus 2")
    env = fake.env()
    env["HOME"] = "/tmp"
    cmd = [
        *prefix,
        sys.executable,
        "-m",
        "observe.cli",
        "agent",
        "--port",
        "0",
        "--address",
        "127.0.0.1",
        "--interval",
        "0.5",
        *args,
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"(http://\S+)/metrics", line)
        assert match, f"no URL from {cmd}: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        base = match.group(1)
        return wait_for(
            lambda: (s := httpx.get(f"{base}/snapshot", timeout=5).json())["agent"]["collections"] >= 2 and s,
            what="two collections",
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def setpriv(*flags: str) -> list[str]:
    return ["setpriv", *flags]


@pytest.fixture
def other_users_process(world_readable: Path) -> Iterator[int]:
    """A process of another user (uid 4242) in the host PID namespace, with a secret on its command line."""
    proc = subprocess.Popen(
        [
            "setpriv",
            "--reuid=4242",
            "--regid=4242",
            "--clear-groups",
            str(world_readable / "sleeper"),
            "train.py",
            "--hf_token",
            "opensesame",
        ]
    )
    wait_for(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().count(b"\0") >= 3, what="the sleeper")
    yield proc.pid
    proc.kill()
    proc.wait()


def command_of(snapshot: dict, pid: int) -> str | None:
    return next((p["command"] for p in snapshot["processes"] if p["pid"] == pid), None)


def test_the_default_daemonset_reads_the_kernel_log_with_syslog_alone(
    world_readable: Path, other_users_process: int
) -> None:
    """uid 0, CAP_SYSLOG only, no_new_privs, its own PID namespace (no hostPID)."""
    snap = run_agent(
        OWN_PID_NAMESPACE + setpriv(*DEFAULT),
        world_readable,
        "--max-processes",
        "5000",
        "--kernel-log-source",
        "syslog",
    )
    sources = snap["agent"]["sources"]
    assert sources == {"procfs": "ok", "nvml": "ok", "kernel_log": "ok"}, sources
    assert len(snap["gpus"]) == 2 and all(g["temperature_celsius"] == 45 for g in snap["gpus"])
    assert command_of(snap, other_users_process) is None  # another PID namespace's process is not seen
    assert any("only its own PID namespace" in n for n in snap["agent"]["notices"])
    assert snap["host"]["memory"]["total_bytes"] > 0 and snap["host"]["cpu_count"] == os.cpu_count()


def test_without_syslog_the_kernel_log_is_refused_even_to_root(world_readable: Path) -> None:
    """The one capability is the one needed: uid 0 with none falls back to NVML events."""
    snap = run_agent(setpriv(*NO_CAPABILITY_ROOT), world_readable, "--kernel-log-source", "syslog")
    kernel_log = snap["agent"]["sources"]["kernel_log"]
    assert "Operation not permitted" in kernel_log and "XIDs from NVML events" in kernel_log
    assert snap["agent"]["sources"]["nvml"] == "ok"


def test_the_restricted_component_keeps_host_gpu_and_process_data(
    world_readable: Path, other_users_process: int
) -> None:
    """uid 65534, no capability (Pod Security restricted): no kernel log, everything else; and
    with the host PID namespace even other users' processes, command lines redacted."""
    snap = run_agent(setpriv(*RESTRICTED), world_readable, "--max-processes", "5000", "--kernel-log-source", "syslog")
    assert "Operation not permitted" in snap["agent"]["sources"]["kernel_log"]
    assert snap["agent"]["sources"]["nvml"] == "ok" and len(snap["gpus"]) == 2
    assert command_of(snap, other_users_process).endswith("sleeper train.py --hf_token <redacted>")
    assert not any("only its own PID namespace" in n for n in snap["agent"]["notices"])


def test_kmsg_is_refused_without_syslog_too(world_readable: Path) -> None:
    """/dev/kmsg asks the kernel the same question (dmesg_restrict): CAP_SYSLOG opens it here, where
    no device cgroup stands in the way, and nothing less does."""
    assert run_agent(setpriv(*DEFAULT), world_readable)["agent"]["sources"]["kernel_log"] == "ok"
    kernel_log = run_agent(setpriv(*RESTRICTED), world_readable)["agent"]["sources"]["kernel_log"]
    assert "Operation not permitted" in kernel_log or "Permission denied" in kernel_log


def test_a_non_root_user_would_do_with_an_ambient_capability(world_readable: Path) -> None:
    """Why the DaemonSet keeps uid 0: a non-root process reads the log with CAP_SYSLOG as an
    ambient capability, which Kubernetes cannot grant (an added capability reaches only uid 0)."""
    snap = run_agent(setpriv(*NON_ROOT_AMBIENT_SYSLOG), world_readable, "--kernel-log-source", "syslog")
    assert snap["agent"]["sources"]["kernel_log"] == "ok"


def test_the_nonroot_component_reads_the_kernel_log_exactly_where_the_node_allows_any_user(
    world_readable: Path,
) -> None:
    """uid 65534 with CAP_SYSLOG only in its bounding set: the kernel answers the read as it would
    any user's, so the outcome follows kernel.dmesg_restrict (1 here: refused, NVML events; on a
    node with 0 the same process reads the log). The seccomp condition (the capability in the
    container's set) cannot be measured here."""
    restricted = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    snap = run_agent(setpriv(*NON_ROOT), world_readable, "--kernel-log-source", "syslog")
    kernel_log = snap["agent"]["sources"]["kernel_log"]
    if restricted:
        assert "Operation not permitted" in kernel_log and "XIDs from NVML events" in kernel_log
    else:
        assert kernel_log == "ok"
    assert snap["agent"]["sources"]["nvml"] == "ok" and len(snap["gpus"]) == 2


def test_the_nonroot_flags_are_the_components(tmp_path: Path) -> None:
    from observe.k8s import names
    from tests.support.kube_checks import kustomize

    rel = os.path.relpath(REPO / "daemonsets", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(f"resources: [{rel}]\ncomponents: [{rel}/components/agent-nonroot]\n")
    ds = next(o for o in kustomize(tmp_path) if o["kind"] == "DaemonSet" and o["metadata"]["name"] == names.AGENT_NAME)
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert sc["runAsUser"] == 65534 and "--reuid=65534" in NON_ROOT
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG"]} and "--bounding-set=-all,+syslog" in NON_ROOT


def test_the_measured_privileges_are_the_manifests() -> None:
    """The setpriv flags above are the DaemonSet's and the restricted component's securityContext."""
    from observe.k8s import names
    from tests.support.kube_checks import kustomize

    ds = next(
        o
        for o in kustomize(REPO / "daemonsets")
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == names.AGENT_NAME
    )
    sc = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    caps = {c.lower() for c in sc["capabilities"]["add"]}
    assert sc["runAsUser"] == 0 and f"--inh-caps=-all,+{','.join(sorted(caps))}" in DEFAULT
    assert sc["allowPrivilegeEscalation"] is False and "--no-new-privs" in DEFAULT
    assert "hostPID" not in ds["spec"]["template"]["spec"]  # measured with a PID namespace of its own
