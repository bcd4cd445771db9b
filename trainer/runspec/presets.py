"""Named model shapes: keyword arguments for ``transformers.LlamaConfig``.

Imports nothing heavy, so the launcher can validate ``--preset`` and ``--seq-len`` without
importing torch. Shapes of the real models come from their published ``config.json`` files
(meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf; meta-llama/Meta-Llama-3-8B; meta-llama/Llama-3.2-1B,
without its long-context RoPE scaling, which changes no shape and no FLOP count).
"""

from __future__ import annotations

from typing import Any

_LLAMA2_COMMON: dict[str, Any] = {
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}

PRESETS: dict[str, dict[str, Any]] = {
    # About 0.9 M parameters: trains a few hundred steps a minute on two CPU ranks. The vocabulary
    # covers the byte tokenizer (256 bytes + BOS, EOS, PAD). Tied embeddings, as small Llamas
    # (Llama 3.2 1B/3B) use, so the grouping of embed_tokens with lm_head is exercised.
    "tiny": {
        "vocab_size": 259,
        "hidden_size": 128,
        "intermediate_size": 352,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    },
    # About 6 M parameters: the CPU benchmark's shape, big enough that sharding and activation
    # checkpointing show in a rank's memory, small enough for a step in about a second on a core.
    "small": {
        "vocab_size": 259,
        "hidden_size": 256,
        "intermediate_size": 704,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    },
    "llama3.2-1b": {
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
    },
    "llama2-7b": {
        **_LLAMA2_COMMON,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
    },
    "llama2-13b": {
        **_LLAMA2_COMMON,
        "hidden_size": 5120,
        "intermediate_size": 13824,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "num_key_value_heads": 40,
    },
    "llama2-70b": {
        **_LLAMA2_COMMON,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
    "llama3-8b": {
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
    },
}
