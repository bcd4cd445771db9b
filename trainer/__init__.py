"""fsdp-observe's instrumented FSDP trainer for Hugging Face Llama models.

Run one process per rank under torchrun: ``torchrun --nproc-per-node=N -m trainer --help``.
"""
