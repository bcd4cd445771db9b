"""Building the Hugging Face ``LlamaForCausalLM`` to train."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainer.config import ModelConfig
from trainer.presets import PRESETS


def llama_config(cfg: ModelConfig) -> LlamaConfig:
    """The ``LlamaConfig`` of a preset or of a checkpoint directory (``config.json``)."""
    if cfg.path is not None:
        return LlamaConfig.from_pretrained(cfg.path)
    return LlamaConfig(**PRESETS[cfg.preset])


def build_model(cfg: ModelConfig, seed: int) -> LlamaForCausalLM:
    """The model in fp32 on the CPU, identical on every rank.

    A preset gets random weights from ``torch.manual_seed(seed)``, so every rank builds the
    same full model before sharding; ``--model PATH`` loads the checkpoint with
    ``from_pretrained``. Attention uses PyTorch's SDPA kernels.

    Returns:
        The model in training mode.
    """
    if cfg.path is not None:
        model = LlamaForCausalLM.from_pretrained(cfg.path, dtype=torch.float32, attn_implementation="sdpa")
    else:
        torch.manual_seed(seed)
        config = llama_config(cfg)
        config._attn_implementation = "sdpa"
        model = LlamaForCausalLM(config)
    model.config.use_cache = False
    return model.train()
