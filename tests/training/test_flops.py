"""FLOPs per token and MFU against the vectors of tests/cases/trainer-metrics.md."""

from __future__ import annotations

import pytest
from transformers import LlamaConfig, LlamaForCausalLM

from observe.training.flops import flops_per_token, mfu, peak_flops

CASE_SHAPE = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=176,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
)


@pytest.mark.parametrize("tied, n_params", [(False, 133_440), (True, 117_056)])
def test_flops_per_token_vectors(tied: bool, n_params: int) -> None:
    model = LlamaForCausalLM(LlamaConfig(**CASE_SHAPE, tie_word_embeddings=tied))
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert flops_per_token(model, seq_len=32) == 751_488


def test_flops_per_token_grows_with_sequence_length() -> None:
    model = LlamaForCausalLM(LlamaConfig(**CASE_SHAPE, tie_word_embeddings=False))
    assert flops_per_token(model, 64) - flops_per_token(model, 32) == 12 * 2 * 64 * 32


def test_mfu_vector_h100_sxm() -> None:
    peak = peak_flops("NVIDIA H100 80GB HBM3")
    assert peak == 989e12
    assert mfu(5.79e10, 5_762, peak) == pytest.approx(0.337, abs=5e-4)


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
    ],
)
def test_known_peaks(name: str, peak: float) -> None:
    assert peak_flops(name) == peak


@pytest.mark.parametrize("name", [None, "", "NVIDIA GeForce RTX 4090", "NVIDIA L4", "Tesla V100-SXM2-16GB"])
def test_unknown_device_has_no_mfu(name) -> None:
    assert peak_flops(name) is None
    assert mfu(1e9, 1e4, peak_flops(name)) is None
