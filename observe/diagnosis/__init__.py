"""Which rank is stuck and which is slow: a pure judgement over per-rank evidence (no I/O).

The sources (``observe.sources.forensics``) gather ``RankEvidence`` from the ranks' ``/debug/state``
pages or from Prometheus; ``judge`` turns it into one ``Verdict``; ``fsdp-observe diagnose``, the
TUI's Run screen and the tests feed it the same way.
"""

from observe.diagnosis.evidence import Collective, Group, RankEvidence, Unreached, from_state
from observe.diagnosis.judge import judge
from observe.diagnosis.verdict import KINDS, VERDICTS, Culprit, Verdict

__all__ = [
    "KINDS",
    "VERDICTS",
    "Collective",
    "Culprit",
    "Group",
    "RankEvidence",
    "Unreached",
    "Verdict",
    "from_state",
    "judge",
]
