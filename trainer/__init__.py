"""fsdp-observe's instrumented FSDP trainer for Hugging Face Llama models.

Run one process per rank under torchrun: ``torchrun --nproc-per-node=N --no-python
fsdp-observe-trainer --help`` (or let ``fsdp-observe train`` validate the flags and start it).
"""
