"""Every pod fsdp-observe creates, against the Pod Security Standards (``pod_security.py``): baseline
at least, restricted where the feature allows, and each exception listed here with the feature
that needs it. A new exception, or one that no longer applies, fails the test."""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from observe.k8s import names
from observe.k8s.job_settings import load_settings
from observe.k8s.kinds.pytorchjob import render
from observe.k8s.kinds.trainjob import render as render_trainjob
from tests.support.kube_checks import K8S_VERSION, REPO, kustomize
from tests.support.pod_security import BASELINE_CAPABILITIES, violations
from tests.support.trainer_v2 import effective_pod

DAEMONSETS = REPO / "daemonsets"
AGENT = names.AGENT_NAME

#: object -> {violation: why it is kept}. "baseline" lists what keeps a pod from baseline; a pod
#: also missing restricted lists that under "restricted" (baseline's list applies there too).
EXCEPTIONS: dict[str, dict[str, dict[str, str]]] = {
    AGENT: {
        "baseline": {
            "Capabilities: agent adds SYSLOG": "XIDs from the kernel ring buffer through syslog(2): CAP_SYSLOG where kernel.dmesg_restrict=1"
        },
        "restricted": {
            "Capabilities: agent adds SYSLOG (restricted)": "the same capability",
            "Running as Non-root: agent": "an added capability takes effect only for uid 0",
            "Running as Non-root user: agent runAsUser 0": "the same",
        },
    },
    f"{AGENT} + agent-host-processes": {
        "baseline": {
            "Capabilities: agent adds SYSLOG": "as the default agent",
            "Host Namespaces: hostPID": "the node's processes: users and commands of GPU processes",
        },
        "restricted": {
            "Capabilities: agent adds SYSLOG (restricted)": "as the default agent",
            "Running as Non-root: agent": "as the default agent",
            "Running as Non-root user: agent runAsUser 0": "as the default agent",
        },
    },
    f"{AGENT} + agent-restricted": {"baseline": {}, "restricted": {}},
    f"{AGENT} + agent-nonroot": {
        "baseline": {
            "Capabilities: agent adds SYSLOG": "seccomp's RuntimeDefault admits syslog(2) only to a container "
            "holding it (not effective for uid 65534: the read works where kernel.dmesg_restrict=0)"
        },
        "restricted": {"Capabilities: agent adds SYSLOG (restricted)": "the same capability"},
    },
    **{
        f"{AGENT} + {component}": {
            "baseline": {
                "Capabilities: agent adds SYSLOG": "as the default agent",
                "HostPath Volumes: state": "the XID cursor outlives the pod, so a replaced agent does not "
                "set again what a person cleared after the repair",
            },
            "restricted": {
                "Capabilities: agent adds SYSLOG (restricted)": "as the default agent",
                "Running as Non-root: agent": "as the default agent",
                "Running as Non-root user: agent runAsUser 0": "as the default agent",
                "Volume Types: state is hostPath": "the same hostPath",
            },
        }
        for component in ("node-condition", "node-taint")
    },
    "fsdp-observe-etcd": {"baseline": {}, "restricted": {}},
    "fsdp-observe-viewer": {"baseline": {}, "restricted": {}},
    "fsdp-observe-htop": {
        "baseline": {"Host Namespaces: hostPID": "htop lists the node's processes (opt-in debug)"},
        "restricted": {},
    },
    "fsdp-observe-nvtop": {
        "baseline": {"Host Namespaces: hostPID": "nvtop names GPU processes (opt-in debug)"},
        "restricted": {},
    },
    "pytorchjob worker": {"baseline": {}, "restricted": {}},
    # the pod Trainer makes of the TrainJob example on the stock runtime (tests/support/trainer_v2.py)
    "trainjob node": {"baseline": {}, "restricted": {}},
}


def overlay(tmp: Path, component: str) -> list[dict]:
    rel = os.path.relpath(DAEMONSETS, tmp)
    (tmp / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [rel], "components": [f"{rel}/components/{component}"]})
    )
    return kustomize(tmp)


@pytest.fixture(scope="module")
def pods(tmp_path_factory) -> dict[str, dict]:
    """name -> pod template of everything the manifests and ``job render`` create."""
    out: dict[str, dict] = {}
    for objs in (kustomize(DAEMONSETS), kustomize(DAEMONSETS / "debug"), kustomize(DAEMONSETS / "viewer")):
        for o in objs:
            if o["kind"] in ("DaemonSet", "Deployment"):
                out[o["metadata"]["name"]] = o["spec"]["template"]
    for component in ("agent-host-processes", "agent-restricted", "agent-nonroot", "node-condition", "node-taint"):
        objs = overlay(tmp_path_factory.mktemp(component), component)
        (ds,) = [o for o in objs if o["kind"] == "DaemonSet" and o["metadata"]["name"] == AGENT]
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
        out[f"{AGENT} + {component}"] = ds["spec"]["template"]
    job = render(load_settings(REPO / "examples" / "llama2-7b.env"), run_id="pss-1")
    out["pytorchjob worker"] = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    trainjob = render_trainjob(load_settings(REPO / "examples" / "llama2-7b-trainjob.env"), run_id="pss-2")
    node = effective_pod(trainjob, 1)
    out["trainjob node"] = {"metadata": node["metadata"], "spec": node["spec"]}
    return out


def test_every_pod_is_listed(pods: dict[str, dict]) -> None:
    assert set(pods) == set(EXCEPTIONS)


@pytest.mark.parametrize("name", sorted(EXCEPTIONS))
def test_each_pod_meets_baseline_or_restricted_but_for_its_listed_exceptions(pods: dict[str, dict], name: str) -> None:
    listed = EXCEPTIONS[name]
    assert sorted(violations(pods[name], "baseline")) == sorted(listed["baseline"])
    assert sorted(violations(pods[name], "restricted")) == sorted({**listed["baseline"], **listed["restricted"]})
    assert all(why for why in (*listed["baseline"].values(), *listed["restricted"].values()))


def test_the_default_agent_is_unprivileged_with_one_named_capability(pods: dict[str, dict]) -> None:
    spec = pods[AGENT]["spec"]
    (agent,) = spec["containers"]
    sc = agent["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": list(names.AGENT_CAPABILITIES)}
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not spec.get("hostPID") and not spec.get("hostNetwork") and not spec.get("hostIPC")
    assert all("hostPath" not in v for v in spec["volumes"])
    assert spec["automountServiceAccountToken"] is False


# --- the checker itself: every control catches a pod that breaks it ------------------------------------

GOOD = {
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "c",
                "image": "x",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
}


def broken(change) -> dict:
    pod = yaml.safe_load(yaml.safe_dump(GOOD))
    change(pod["spec"], pod["spec"]["containers"][0], pod["spec"]["containers"][0]["securityContext"])
    return pod


@pytest.mark.parametrize(
    "level, change, control",
    [
        ("baseline", lambda s, c, sc: s.update(hostPID=True), "Host Namespaces: hostPID"),
        ("baseline", lambda s, c, sc: s.update(hostNetwork=True), "Host Namespaces: hostNetwork"),
        ("baseline", lambda s, c, sc: s.update(hostIPC=True), "Host Namespaces: hostIPC"),
        ("baseline", lambda s, c, sc: sc.update(privileged=True), "Privileged Containers: c"),
        ("baseline", lambda s, c, sc: sc["capabilities"].update(add=["SYS_ADMIN"]), "Capabilities: c adds SYS_ADMIN"),
        (
            "baseline",
            lambda s, c, sc: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
            "HostPath Volumes: h",
        ),
        (
            "baseline",
            lambda s, c, sc: c.update(ports=[{"containerPort": 80, "hostPort": 80}]),
            "Host Ports: c hostPort 80",
        ),
        ("baseline", lambda s, c, sc: sc.update(appArmorProfile={"type": "Unconfined"}), "AppArmor: c Unconfined"),
        ("baseline", lambda s, c, sc: sc.update(seLinuxOptions={"type": "spc_t"}), "SELinux: c"),
        ("baseline", lambda s, c, sc: sc.update(procMount="Unmasked"), "/proc Mount Type: c"),
        ("baseline", lambda s, c, sc: sc.update(seccompProfile={"type": "Unconfined"}), "Seccomp: c Unconfined"),
        (
            "baseline",
            lambda s, c, sc: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
            "Sysctls: kernel.msgmax",
        ),
        ("baseline", lambda s, c, sc: sc.update(windowsOptions={"hostProcess": True}), "HostProcess: hostProcess true"),
        (
            "restricted",
            lambda s, c, sc: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
            "Volume Types: n is nfs",
        ),
        ("restricted", lambda s, c, sc: sc.pop("allowPrivilegeEscalation"), "Privilege Escalation: c"),
        ("restricted", lambda s, c, sc: s["securityContext"].pop("runAsNonRoot"), "Running as Non-root: c"),
        ("restricted", lambda s, c, sc: sc.update(runAsUser=0), "Running as Non-root user: c runAsUser 0"),
        ("restricted", lambda s, c, sc: s["securityContext"].pop("seccompProfile"), "Seccomp: c unset"),
        (
            "restricted",
            lambda s, c, sc: sc["capabilities"].update(drop=["NET_RAW"]),
            "Capabilities: c does not drop ALL",
        ),
        (
            "restricted",
            lambda s, c, sc: sc["capabilities"].update(add=["CHOWN"]),
            "Capabilities: c adds CHOWN (restricted)",
        ),
    ],
)
def test_the_checker_catches_each_control(level: str, change, control: str) -> None:
    assert violations(GOOD, "restricted") == []
    assert control in violations(broken(change), level)
    if level == "restricted":
        assert control not in violations(broken(change), "baseline")


def test_the_checker_fails_the_agent_as_it_was() -> None:
    """The DaemonSet as it once was: privileged, hostPID, the /dev/kmsg hostPath, uid 0."""
    old = {
        "spec": {
            "hostPID": True,
            "containers": [{"name": "agent", "securityContext": {"privileged": True, "runAsUser": 0}}],
            "volumes": [{"name": "kmsg", "hostPath": {"path": "/dev/kmsg"}}],
        }
    }
    assert sorted(violations(old, "baseline")) == [
        "Host Namespaces: hostPID",
        "HostPath Volumes: kmsg",
        "Privileged Containers: agent",
    ]
    assert "NET_BIND_SERVICE" in BASELINE_CAPABILITIES and "SYSLOG" not in BASELINE_CAPABILITIES
