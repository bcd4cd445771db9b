"""The Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/,
Kubernetes 1.34) as a check over a pod spec, for the manifest tests.

Why our own: the reference implementation (k8s.io/pod-security-admission) is Go and needs an API
server; nothing on PyPI implements the standards themselves. Each control below names the fields
the standard restricts and the values it allows; ``tests/k8s/test_pod_security.py`` proves every
control catches a pod that breaks it.

``violations(pod, level)`` returns ``control: detail`` strings: for ``baseline`` the baseline
controls, for ``restricted`` the baseline controls and the restricted ones.
"""

from __future__ import annotations

#: Capabilities baseline allows a container to add (the standard's list).
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: Sysctls baseline allows (the standard's "safe" set as of 1.34).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
#: Volume types restricted allows.
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
LEVELS = ("baseline", "restricted")


def _containers(spec: dict) -> list[dict]:
    return [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]


def _sc(obj: dict) -> dict:
    return obj.get("securityContext") or {}


def baseline(spec: dict, annotations: dict[str, str] | None = None) -> list[str]:
    """Violations of the baseline controls."""
    out: list[str] = []
    pod, containers = _sc(spec), _containers(spec)
    if (pod.get("windowsOptions") or {}).get("hostProcess") or any(
        (_sc(c).get("windowsOptions") or {}).get("hostProcess") for c in containers
    ):
        out.append("HostProcess: hostProcess true")
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(f"Host Namespaces: {field}")
    for c in containers:
        name, sc = c["name"], _sc(c)
        if sc.get("privileged"):
            out.append(f"Privileged Containers: {name}")
        for cap in (sc.get("capabilities") or {}).get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                out.append(f"Capabilities: {name} adds {cap}")
        for port in c.get("ports") or []:
            if port.get("hostPort"):
                out.append(f"Host Ports: {name} hostPort {port['hostPort']}")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"/proc Mount Type: {name}")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            out.append(f"HostPath Volumes: {volume['name']}")
    for where, sc in [("pod", pod)] + [(c["name"], _sc(c)) for c in containers]:
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"AppArmor: {where} Unconfined")
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES or "user" in se or "role" in se:
            out.append(f"SELinux: {where}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"Seccomp: {where} Unconfined")
    for key, value in (annotations or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and value == "unconfined":
            out.append(f"AppArmor: {key.rsplit('/', 1)[1]} unconfined")
    for sysctl in pod.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"Sysctls: {sysctl['name']}")
    return out


def restricted_only(spec: dict) -> list[str]:
    """Violations of the controls restricted adds to baseline."""
    out: list[str] = []
    pod, containers = _sc(spec), _containers(spec)
    for volume in spec.get("volumes") or []:
        kind = next(k for k in volume if k != "name")
        if kind not in RESTRICTED_VOLUMES:
            out.append(f"Volume Types: {volume['name']} is {kind}")
    for c in containers:
        name, sc = c["name"], _sc(c)
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"Privilege Escalation: {name}")
        non_root = sc.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"Running as Non-root: {name}")
        if sc.get("runAsUser", pod.get("runAsUser")) == 0:
            out.append(f"Running as Non-root user: {name} runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"Seccomp: {name} {seccomp or 'unset'}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"Capabilities: {name} does not drop ALL")
        for cap in caps.get("add") or []:
            if cap != "NET_BIND_SERVICE":
                out.append(f"Capabilities: {name} adds {cap} (restricted)")
    if pod.get("runAsUser") == 0:
        out.append("Running as Non-root user: pod runAsUser 0")
    return out


def violations(pod: dict, level: str) -> list[str]:
    """What keeps the pod (``{"metadata": ..., "spec": ...}``, or a template) from ``level``."""
    if level not in LEVELS:
        raise ValueError(f"level {level!r}: use one of {LEVELS}")
    spec, annotations = pod["spec"], (pod.get("metadata") or {}).get("annotations")
    found = baseline(spec, annotations)
    return found + restricted_only(spec) if level == "restricted" else found
