"""The node agent: host, process, GPU and XID collection served as /metrics and /snapshot (docs/agent.md)."""
