"""fsdp-observe: observability for FSDP fine-tunes (catalog, agent, TUI, dashboards, CLI)."""
