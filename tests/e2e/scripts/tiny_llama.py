"""What the third-party training scripts beside this file share: a tiny Llama and its data.

Nothing here knows fsdp-observe. The model is a ``LlamaForCausalLM`` built from a config (no hub);
the data are fixed-length sequences whose first ``MASKED`` labels are -100 (a prompt), so the
labelled token count is exact: ``sequences * (SEQ - MASKED)``.
"""

import json
import os

import torch

VOCAB, SEQ, MASKED = 256, 32, 8


def config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ,
        tie_word_embeddings=False,
    )


def model(seed=0):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(config())


def sequences(n, seed=0):
    """``n`` examples ``{"input_ids", "labels"}`` of ``SEQ`` tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    labels = ids.clone()
    labels[:, :MASKED] = -100
    return [{"input_ids": i, "labels": lab} for i, lab in zip(ids, labels, strict=True)]


def rank():
    return int(os.environ.get("RANK", "0"))


def write_json(path, value):
    """Rank-suffixed JSON record of what the script logged itself."""
    with open(f"{path}.rank{rank()}", "w") as fh:
        json.dump(value, fh)
