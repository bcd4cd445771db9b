"""The training-metrics core: every per-step training number, for any FSDP run.

Torch-free at import. ``collector`` turns host-side state into ``fsdp_train_*`` series at scrape
time; ``window`` (log windows), ``phases`` (phases and goodput), ``flops`` (FLOPs per token, peak
FLOP/s, MFU), ``histogram`` and ``server`` (the per-rank endpoint and its port rule) feed it.
Nothing here imports the top-level ``trainer`` package: a user's own ``trainer.py`` may shadow it.
"""
