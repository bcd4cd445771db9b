"""The Hugging Face ``LlamaForCausalLM`` to train: built on the meta device, filled after sharding.

No process ever holds the whole model: ``build_model`` makes a parameter-less skeleton on the
meta device, ``trainer.parallelize`` shards it, and ``materialize`` allocates each rank's
shards on its device and fills them, either from a local ``from_pretrained`` checkpoint (each
rank reads only its slices of the safetensors files, through ``torch.distributed.checkpoint``'s
Hugging Face reader) or with a seeded initialisation that produces the same weights for any
world size.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_model_state_dict
from torch.distributed.tensor import DTensor, distribute_tensor
from transformers import LlamaConfig, LlamaForCausalLM

from observe.errors import UserError
from trainer.checkpoint import describe_failure
from trainer.runspec.config import ModelConfig
from trainer.runspec.presets import PRESETS


def llama_config(cfg: ModelConfig) -> LlamaConfig:
    """The ``LlamaConfig`` of a preset or of a checkpoint directory (``config.json``)."""
    if cfg.path is not None:
        return LlamaConfig.from_pretrained(cfg.path)
    return LlamaConfig(**PRESETS[cfg.preset])


def build_model(cfg: ModelConfig) -> LlamaForCausalLM:
    """The model's skeleton on the meta device (no memory for weights), in training mode.

    Attention uses PyTorch's SDPA kernels; the KV cache is off (training only).
    """
    config = llama_config(cfg)
    config._attn_implementation = "sdpa"
    config.use_cache = False
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    return model.train()


def materialize(model: LlamaForCausalLM, device: torch.device, cfg: ModelConfig, seed: int) -> None:
    """Allocate the (sharded) parameters on ``device`` and fill them.

    ``--model PATH``: ``load_pretrained``; a preset: ``init_weights(seed)``. Then the rotary
    embedding's buffers, which no checkpoint stores, are computed again. On a model that is
    not sharded, ``to_empty`` unties tied embeddings (it makes a new parameter per module), so
    they are tied again first; FSDP keeps them tied itself.

    Raises:
        UserError: the checkpoint does not fit the model (flag ``--model``).
    """
    model.to_empty(device=device)
    embedding, output = model.get_input_embeddings(), model.get_output_embeddings()
    if model.config.tie_word_embeddings and output.weight is not embedding.weight:
        output.weight = embedding.weight
    if cfg.path is not None:
        load_pretrained(model, cfg.path)
    else:
        init_weights(model, seed)
    reset_rotary_buffers(model)


def _copy_full(param: torch.Tensor, full: torch.Tensor) -> None:
    """Copy the full tensor ``full`` into ``param``: into its local shard when it is a DTensor.

    ``distribute_tensor(..., src_data_rank=None)`` cuts this rank's piece out of its own copy
    of ``full`` without communicating (every rank holds the same ``full``).
    """
    if isinstance(param, DTensor):
        piece = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
        param.to_local().copy_(piece.to_local())
    else:
        param.copy_(full)


@torch.no_grad()
def init_weights(model: LlamaForCausalLM, seed: int) -> None:
    """Seeded initialisation, the same weights whatever the world size and sharding.

    Hugging Face's Llama scheme (``_init_weights``): matrices ~ N(0, ``initializer_range``),
    RMSNorm weights 1. One generator on the parameters' device, seeded with ``seed``, draws each
    full tensor in ``named_parameters()`` order (a tied matrix once); each rank keeps its shard.
    Peak extra memory is one full parameter.
    """
    params = list(model.named_parameters())
    device = params[0][1].device
    generator = torch.Generator(device=device).manual_seed(seed)
    std = model.config.initializer_range
    for _, param in params:
        full = torch.empty(param.shape, dtype=torch.float32, device=device)
        if param.ndim == 1:
            full.fill_(1.0)
        else:
            full.normal_(0.0, std, generator=generator)
        _copy_full(param, full)


def load_pretrained(model: LlamaForCausalLM, path: str) -> None:
    """Fill the sharded model from the ``*.safetensors`` files of a ``from_pretrained`` directory.

    ``torch.distributed.checkpoint.load`` with ``HuggingFaceStorageReader``: each rank requests
    only the slices of each tensor its shards cover, and copies them in place (converting the
    dtype). With tied embeddings the shared matrix is read once, as ``model.embed_tokens.weight``
    (Hugging Face does not store ``lm_head.weight`` for tied models).

    Raises:
        UserError: a tensor is missing or has another shape (flag ``--model``).
    """
    state = get_model_state_dict(model)
    if model.get_input_embeddings().weight is model.get_output_embeddings().weight:
        state.pop("lm_head.weight", None)
    try:
        dcp.load(state, storage_reader=dcp.HuggingFaceStorageReader(str(Path(path))))
    except CheckpointException as exc:
        raise UserError(
            "--model",
            f"cannot load the weights in {path}: {describe_failure(exc)}",
            "pass a Llama from_pretrained directory whose tensors match its config.json",
        ) from None


@torch.no_grad()
def reset_rotary_buffers(model: LlamaForCausalLM) -> None:
    """Recompute the rotary embedding's ``inv_freq`` buffers (not persistent, so no checkpoint
    holds them, and ``to_empty`` left them uninitialised)."""
    rotary = model.model.rotary_emb
    fresh = type(rotary)(model.config)
    for name, buffer in fresh.named_buffers():
        getattr(rotary, name).copy_(buffer)
