"""Kubernetes names shared by ``daemonsets/``, ``fsdp-observe job`` and the TUI's pod discovery.

Standard library only. The YAML under ``daemonsets/`` is plain YAML and spells these values too;
``tests/k8s/test_manifests.py`` fails when the two disagree, so this module is the one place to
change them.

Labels follow https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/:
selectors use only ``app.kubernetes.io/name`` and ``app.kubernetes.io/component`` (selectors are
immutable, so they never carry a version); ``part-of`` and ``version`` are added to every object's
metadata by ``daemonsets/kustomization.yaml``.
"""

from __future__ import annotations

from observe.catalog import AGENT_PORT, TRAINER_PORT_BASE

#: Namespace of the add-on (agent, etcd, RBAC, monitors). Training jobs may live anywhere.
NAMESPACE = "fsdp-observe"
APP = "fsdp-observe"

AGENT_LABELS: dict[str, str] = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "agent"}
TRAINER_LABELS: dict[str, str] = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "trainer"}
ETCD_LABELS: dict[str, str] = {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/component": "rendezvous"}
#: Pods of ``fsdp-observe top --kube`` run inside the cluster (docs/kubernetes.md): the
#: NetworkPolicies admit them to the agents and the trainer exporters.
VIEWER_LABELS: dict[str, str] = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": "viewer"}
#: Where kube-prometheus-stack's Prometheus runs (docs/kubernetes.md installs it in ``monitoring``)
#: and the label its operator puts on the Prometheus pods; the NetworkPolicies admit these pods.
PROMETHEUS_NAMESPACE = "monitoring"
PROMETHEUS_POD_LABELS: dict[str, str] = {"app.kubernetes.io/name": "prometheus"}
#: The service account ``top --kube`` uses inside the cluster, and the Role it is bound to.
VIEWER_NAME = "fsdp-observe-viewer"
#: kube-prometheus-stack's Prometheus selects ServiceMonitors, PodMonitors and PrometheusRules by
#: ``release: <Helm release name>`` unless installed with ``*SelectorNilUsesHelmValues=false``.
#: ``kube-prometheus-stack`` is the release name its README uses; see docs/kubernetes.md to change it.
PROMETHEUS_SELECTOR_LABELS: dict[str, str] = {"release": "kube-prometheus-stack"}
#: Pod label carrying the run id (= torchrun's rendezvous id = the trainer's ``run_id`` label).
RUN_ID_LABEL = "fsdp-observe/run-id"

# --- the node agent's contract ------------------------------------------------------------------
# What daemonsets/agent-daemonset.yaml assumes of ``fsdp-observe agent``. Change it here and in
# that file together; the manifest tests compare them.
AGENT_NAME = "fsdp-observe-agent"
#: Where the agent keeps its kernel-log position and XID counts across restarts (a hostPath, so a
#: new pod on the node takes them over: observe.agent.xid_cursor).
AGENT_STATE_DIR = "/var/lib/fsdp-observe"
AGENT_COMMAND: tuple[str, ...] = (
    "fsdp-observe",
    "agent",
    "--address",
    "0.0.0.0",
    "--port",
    str(AGENT_PORT),
    "--kernel-log-source",
    "syslog",
    "--state-dir",
    AGENT_STATE_DIR,
)
AGENT_PORT_NAME = "metrics"
AGENT_HEALTH_PATH = "/healthz"
#: Downward-API variable the agent (and every trainer rank) reads for its ``node`` label.
NODE_NAME_ENV = "NODE_NAME"
#: The one capability the agent pod keeps: syslog(2) reads of the kernel ring buffer (XIDs).
AGENT_CAPABILITIES: tuple[str, ...] = ("SYSLOG",)
#: How the agent reaches NVML (libnvidia-ml.so.1) without requesting a GPU: the NVIDIA container
#: runtime (GPU Operator or EKS GPU AMI, as the default runtime) injects the driver library and
#: every GPU's device node when it sees these variables.
AGENT_NVIDIA_ENV: dict[str, str] = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"}

# --- trainer pods ------------------------------------------------------------------------------
#: The training operator fills in its defaults (the c10d port) only for a container of this name.
TRAINER_CONTAINER = "pytorch"
#: The operator's rendezvous port for c10d (kubeflow training-operator ``pytorchjob-port``).
OPERATOR_PORT_NAME = "pytorchjob-port"
OPERATOR_PORT = 23456
#: Ranks per node the trainer PodMonitor scrapes (ports ``metrics-0`` .. ``metrics-7``): the most
#: GPUs one node of the common training instance types (p4d, p5, a3) carries.
MAX_RANKS_PER_NODE = 8
#: The trainer PodMonitor's scrape interval (``daemonsets/trainer-podmonitor.yaml``, every endpoint).
TRAINER_SCRAPE_INTERVAL_SECONDS = 15
#: ``--metrics-linger`` of rendered jobs: two scrape intervals (what the cluster-mode scaling report
#: needs to see every rank's last step, docs/scaling.md) and 5 s of slack. A fixed wait: a pod
#: just discovered may be scraped for the first time only after its last step.
RENDERED_METRICS_LINGER_SECONDS = 2 * TRAINER_SCRAPE_INTERVAL_SECONDS + 5
#: Labels the Kubeflow training operator sets on a PyTorchJob's pods.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"

# --- rendezvous --------------------------------------------------------------------------------
ETCD_SERVICE = "fsdp-observe-etcd"
ETCD_CLIENT_PORT = 2379
#: Cluster DNS name of the etcd Service, reachable from a job in any namespace.
ETCD_HOST = f"{ETCD_SERVICE}.{NAMESPACE}.svc"


def trainer_port_name(local_rank: int) -> str:
    """Container port name of a rank's ``/metrics`` (``metrics-0`` for local rank 0; ≤ 15 chars)."""
    return f"metrics-{local_rank}"


def trainer_port(local_rank: int, base: int = TRAINER_PORT_BASE) -> int:
    """Container port of a rank's ``/metrics``: ``base + local_rank`` (the trainer's rule)."""
    return base + local_rank


def selector(labels: dict[str, str]) -> str:
    """A label selector string (``k=v,k=v``) for the Kubernetes API's ``labelSelector``."""
    return ",".join(f"{key}={value}" for key, value in labels.items())
