"""Where ``fsdp-observe top`` reads from: agents and trainers directly (``direct``), pods found through
the Kubernetes API (``kube``), or Prometheus' HTTP API (``prometheus``). Each turns what it reads
into an ``observe.cluster.ClusterSnapshot``. Nothing here imports torch, pynvml, the trainer or
the agent."""


class SourceError(ValueError):
    """A source cannot be used as given: one line naming the flag, the problem and the fix.

    Args:
        flag: the flag at fault (``--agents-file``). problem: what is wrong. fix: what to do.
    """

    exit_status = 2

    def __init__(self, flag: str, problem: str, fix: str) -> None:
        self.flag, self.problem, self.fix = flag, problem, fix
        super().__init__(f"{flag}: {problem}; {fix}")
