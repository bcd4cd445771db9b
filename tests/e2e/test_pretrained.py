"""``--model PATH``: a meta-device skeleton filled shard by shard from Hugging Face safetensors.

The checkpoint is a real ``save_pretrained`` directory (bf16, untied embeddings, cut into
several safetensors files). Each rank reads only its slices through DCP's Hugging Face
reader; the first step's loss must equal what ``transformers`` itself computes with
``from_pretrained`` on the same global batch, and every rank must end with the same weights.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from tests.support.trainer_runs import FAST, events, losses, read_log, run_trainer
from trainer.data import IGNORE_INDEX, BatchIterator, ByteTokenizer
from trainer.runspec.launch import installed_script


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("hf-llama")
    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=259,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out, max_shard_size="40KB")
    assert len(list(out.glob("*.safetensors"))) >= 3
    return out


def test_sharded_load_matches_transformers(checkpoint: Path, corpus: Path, tmp_path: Path, subprocess_env) -> None:
    log = tmp_path / "run.jsonl"
    proc = run_trainer(
        [
            "--model",
            str(checkpoint),
            "--data",
            str(corpus),
            "--steps",
            "2",
            *FAST,
            "--mixed-precision",
            "fp32",
            "--metrics",
            "off",
            "--log-json",
            str(log),
            "--verify-weights",
        ],
        subprocess_env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    records = read_log(log)
    assert events(records, "start")[0]["model"] == checkpoint.name

    model = LlamaForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    batch = next(BatchIterator([corpus / "docs.jsonl"], ByteTokenizer(), 64, 4, rank=0, world_size=1, seed=0))
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids).logits
    want = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE_INDEX).item()
    assert losses(records)[1][0] == pytest.approx(want, abs=1e-5)
    digests = events(records, "end")[0]["weights_sha256"]
    assert len(set(digests)) == 1


def test_weights_that_do_not_fit_the_config_are_one_line(
    checkpoint: Path, corpus: Path, tmp_path: Path, subprocess_env
) -> None:
    """A rank (world of one, no torchrun) refuses tensors of other shapes with one line, exit 2."""
    import json
    import shutil
    import subprocess

    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    config = json.loads((broken / "config.json").read_text())
    config["intermediate_size"] = 128
    (broken / "config.json").write_text(json.dumps(config))
    proc = subprocess.run(
        [installed_script(), "--model", str(broken), "--data", str(corpus), "--steps", "1", "--metrics", "off"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert errors[0].startswith(f"error: --model: cannot load the weights in {broken}: rank(s) 0:")
