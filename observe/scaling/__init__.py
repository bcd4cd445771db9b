"""``fsdp-observe scaling``: throughput, step time and memory against the number of ranks.

Modules, one concern each:

- ``snapshot``: a rank's counters, gauges and step-time histogram at one instant, read from a
  ``/metrics`` scrape or a Prometheus query (the same ``Sample`` shape either way).
- ``figures``: the arithmetic: two snapshots per rank → one world size's figures; sizes →
  a report with scaling efficiency.
- ``local``: runs the same short job at several world sizes on this machine and scrapes it.
- ``prometheus``: reads finished runs from Prometheus' HTTP API (cluster mode).
- ``output``: the terminal table and ``report.json``; ``plot``: ``report.png`` (matplotlib).
- ``queries``: PromQL for the same efficiency across runs, for the training-run dashboard.
- ``cli``: the command line.

This package imports neither torch nor matplotlib at import time.
"""
