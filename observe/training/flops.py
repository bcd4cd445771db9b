"""Model FLOPs per token, device peak FLOP/s, and MFU. Imports no torch (a model is duck-typed).

Formulas and constants are cited inline; ``tests/cases/trainer-metrics.md`` holds the vectors the
tests check.
"""

from __future__ import annotations

from typing import Any

#: Dense BF16 tensor-core peak per device, FLOP/s, from NVIDIA's datasheets (A100: "NVIDIA A100
#: Tensor Core GPU" datasheet, 312 TFLOPS; H100 SXM and H200: "NVIDIA H100/H200 Tensor Core GPU"
#: datasheets, 989 TFLOPS dense, the 1,979 figure counts 2:4 sparsity and is never used;
#: H100 PCIe: 756 TFLOPS dense). Keys are matched against ``torch.cuda.get_device_name()``;
#: the first key contained in the name wins, so more specific names come first.
PEAK_BF16_FLOPS: dict[str, float] = {
    "H100 PCIe": 756e12,
    "H100 80GB HBM3": 989e12,  # the SXM5 board's name as CUDA reports it
    "H100 SXM": 989e12,
    "H200": 989e12,
    "A100": 312e12,
}


def flops_per_token(model: Any, seq_len: int) -> int:
    """Training FLOPs per token of a ``LlamaForCausalLM``: ``6 * N_matmul + 12 * L * d * T``.

    The PaLM paper's count (Chowdhery et al. 2022, appendix B), as torchtitan uses it:
    ``N_matmul`` is the parameter count without the input embedding (a lookup, not a matmul)
    when embeddings are untied; with tied embeddings the shared matrix is counted once, since
    ``lm_head`` multiplies by it. ``12 * L * d * T`` is the attention score and value matmuls.

    Args:
        model: a Hugging Face ``LlamaForCausalLM`` (before or after sharding; DTensor
            parameters count their global size).
        seq_len: tokens per sequence ``T``.

    Returns:
        FLOPs per token for forward plus backward (an int).
    """
    config = model.config
    n_params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings().weight
    if embedding is not output and not getattr(config, "tie_word_embeddings", False):
        n_params -= embedding.numel()
    return 6 * n_params + 12 * config.num_hidden_layers * config.hidden_size * seq_len


#: Attributes by which wrappers hold the model they wrap: ``torch.compile``'s ``OptimizedModule``
#: (``_orig_mod``), ``DistributedDataParallel`` and FSDP1's ``FullyShardedDataParallel`` (``module``).
_WRAPPED = {"OptimizedModule": "_orig_mod", "DistributedDataParallel": "module", "FullyShardedDataParallel": "module"}


def unwrap(model: Any) -> Any:
    """The user's model inside ``torch.compile``, DDP and FSDP1 wrappers (FSDP2's ``fully_shard``
    wraps nothing: it changes the module's class in place, see ``model_class_name``)."""
    for _ in range(8):
        attr = _WRAPPED.get(type(model).__name__)
        inner = getattr(model, attr, None) if attr else None
        if inner is None:
            return model
        model = inner
    return model


def model_class_name(model: Any) -> str:
    """The model's class name as its author wrote it: FSDP2's ``fully_shard`` swaps the class for a
    made-up ``FSDP<Name>`` subclassing ``FSDPModule`` and the original, whose name is returned."""
    model = unwrap(model)
    name = type(model).__name__
    if name.startswith("FSDP"):
        for base in type(model).__bases__:
            if base.__name__ == name[len("FSDP") :]:
                return base.__name__
    return name


def is_llama_like(model: Any) -> bool:
    """A model with a Hugging Face Llama-style ``config`` (``flops_per_token`` applies)."""
    config = getattr(model, "config", None)
    return config is not None and hasattr(config, "num_hidden_layers") and hasattr(model, "get_input_embeddings")


def context_length(model: Any) -> int | None:
    """The model's context length ``T`` (its config's ``max_position_embeddings``), or ``None``."""
    value = getattr(getattr(unwrap(model), "config", None), "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def model_flops_per_token(model: Any, seq_len: int | None) -> int:
    """FLOPs per token of any model, one figure per model (the same on every rank).

    The PaLM count (``flops_per_token``) for a model with a Hugging Face Llama-style ``config``,
    with ``T`` = ``seq_len`` when the caller knows the length it trains at, else the model's
    context length (``context_length``), as nanoGPT's ``estimate_mfu`` takes its ``block_size``;
    never a batch's width, which differs per rank with padded batches. Any other model:
    ``6 * parameters`` (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", section
    2.1: forward plus backward, attention left out).

    Raises:
        ValueError: a Llama-style model with neither ``seq_len`` nor a context length.
    """
    model = unwrap(model)
    if is_llama_like(model):
        length = seq_len or context_length(model)
        if length is None:
            raise ValueError("no sequence length: pass seq_len")
        return flops_per_token(model, length)
    return 6 * sum(int(p.numel()) for p in model.parameters())


def peak_flops(device_name: str | None) -> float | None:
    """Dense BF16 peak FLOP/s of a device, or ``None`` when it is not in ``PEAK_BF16_FLOPS``.

    A CPU (``device_name`` ``None``) and any unlisted GPU have no peak: MFU is then absent,
    never computed against another device's figure.
    """
    if not device_name:
        return None
    for key, value in PEAK_BF16_FLOPS.items():
        if key in device_name:
            return value
    return None


def mfu(flops_per_token_: float, tokens_per_second_per_device: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation, 0..1: ``flops_per_token * tokens/s per device / peak``.

    Args:
        flops_per_token_: from ``flops_per_token``.
        tokens_per_second_per_device: labelled tokens per second on one device (never a
            global count).
        peak: from ``peak_flops``; ``None`` gives ``None``.
    """
    if peak is None or peak <= 0:
        return None
    return flops_per_token_ * tokens_per_second_per_device / peak
