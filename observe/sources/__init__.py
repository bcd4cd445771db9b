"""Where ``fsdp-observe top`` reads from: agents and trainers directly (``direct``), pods found through
the Kubernetes API (``kube``), or Prometheus' HTTP API (``prometheus``). Each turns what it reads
into an ``observe.sources.view.ClusterSnapshot``. Nothing here imports torch, pynvml, the trainer or
the agent; a source that cannot be used as given raises ``observe.errors.UserError``."""
