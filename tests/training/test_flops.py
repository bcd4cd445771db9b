"""FLOPs per token and MFU against the vectors of tests/cases/trainer-metrics.md."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from transformers import LlamaConfig, LlamaForCausalLM

from observe import catalog as c
from observe.training import TrainingMetrics
from observe.training.flops import flops_per_token, mfu, peak_flops
from tests.support.collector import scrape

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


def test_one_model_gives_one_flops_figure_whatever_each_ranks_batch_width() -> None:
    """Padded batches differ in width per rank; FLOPs per token is the model's, from its context."""
    model = LlamaForCausalLM(LlamaConfig(**CASE_SHAPE, max_position_embeddings=48, tie_word_embeddings=False))
    figures = []
    for width in (12, 20):  # rank 0's and rank 1's first batches
        m = TrainingMetrics(model=model, serve=False)
        ids = torch.zeros(2, width, dtype=torch.long)
        m.recorder.record_batch({"input_ids": ids, "labels": ids}, 0.0, 0.0)
        (value,) = scrape(m.recorder.collector)[c.TRAIN_FLOPS_PER_TOKEN.name].values()
        figures.append(value)
        m.close(linger_seconds=0)
    assert figures == [flops_per_token(model, 48)] * 2


def test_the_model_label_is_the_models_class_not_fsdps(tmp_path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = LlamaForCausalLM(LlamaConfig(**CASE_SHAPE))
        fully_shard(model)
        assert type(model).__name__ == "FSDPLlamaForCausalLM"
        m = TrainingMetrics(model=torch.compile(model), serve=False)
        (info,) = scrape(m.recorder.collector)[c.TRAIN_INFO.name]
        m.close(linger_seconds=0)
        assert dict(info)["model"] == "LlamaForCausalLM"
    finally:
        dist.destroy_process_group()
