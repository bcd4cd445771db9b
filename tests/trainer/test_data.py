"""Packing, per-rank sharding and token counting on real text."""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import numpy as np
import pytest
import torch

from observe.errors import UserError
from trainer.data import IGNORE_INDEX, BatchIterator, ByteTokenizer, count_labelled_tokens, make_batch, packed_blocks
from trainer.runspec.corpus import read_documents, resolve_data_files, stdlib_sources


def test_stdlib_corpus_is_real_python_source() -> None:
    files = stdlib_sources()
    assert len(files) > 100
    assert all(f.suffix == ".py" and "site-packages" not in f.parts for f in files)
    assert any(f.name == "argparse.py" for f in files)


def test_counting_excludes_padding() -> None:
    targets = torch.tensor([[5, 6, IGNORE_INDEX, IGNORE_INDEX], [1, 2, 3, 4]])
    assert count_labelled_tokens(targets) == 6
    assert count_labelled_tokens(targets.numpy()) == 6


def test_partial_tail_block_is_padded_and_its_padding_carries_no_label() -> None:
    stream = iter([np.arange(10, dtype=np.int64)])
    blocks = list(packed_blocks(stream, block_len=4, rank=0, world_size=1))
    assert [b.tolist() for b in blocks] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, IGNORE_INDEX, IGNORE_INDEX]]
    batch = make_batch(blocks, pad_id=258)
    assert batch.labelled_tokens == 3 + 3 + 1
    assert batch.input_ids[2].tolist() == [8, 9, 258]  # padding never reaches the embedding as -100


def test_full_blocks_label_every_position(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello world, " * 200)
    it = BatchIterator(
        resolve_data_files([str(tmp_path)]), ByteTokenizer(), seq_len=16, batch_size=4, rank=0, world_size=1, seed=0
    )
    batch = next(it)
    assert batch.input_ids.shape == (4, 16)
    assert batch.labelled_tokens == 4 * 16
    assert torch.equal(batch.input_ids[:, 1:], batch.targets[:, :-1])


def _blocks(files, rank: int, world: int, n: int, seed: int = 0) -> list[bytes]:
    it = BatchIterator(files, ByteTokenizer(), seq_len=32, batch_size=1, rank=rank, world_size=world, seed=seed)
    return [next(it).input_ids.numpy().tobytes() for _ in range(n)]


def test_ranks_read_disjoint_shards_that_cover_the_stream() -> None:
    files = stdlib_sources()[:40]
    single = _blocks(files, 0, 1, 60)
    rank0, rank1 = _blocks(files, 0, 2, 30), _blocks(files, 1, 2, 30)
    assert not set(rank0) & set(rank1)
    assert rank0 == single[0::2] and rank1 == single[1::2]


def test_layout_is_deterministic_given_seed() -> None:
    files = stdlib_sources()[:40]
    assert _blocks(files, 1, 2, 10, seed=3) == _blocks(files, 1, 2, 10, seed=3)
    assert _blocks(files, 1, 2, 10, seed=3) != _blocks(files, 1, 2, 10, seed=4)


def test_skip_batches_resumes_at_the_same_place() -> None:
    files = stdlib_sources()[:40]
    full = BatchIterator(files, ByteTokenizer(), 32, 2, rank=0, world_size=2, seed=1)
    expected = [b.input_ids for b in islice(full, 7)][5:]
    resumed = BatchIterator(files, ByteTokenizer(), 32, 2, rank=0, world_size=2, seed=1, skip_batches=5)
    for want in expected:
        assert torch.equal(next(resumed).input_ids, want)


def test_jsonl_documents_take_the_text_field(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(
        "\n".join([json.dumps({"text": "one"}), "not json", json.dumps({"id": 3}), json.dumps({"text": "two"})])
    )
    assert list(read_documents(path)) == ["one", "two"]


def test_data_errors_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--data: nothing matches"):
        resolve_data_files([str(tmp_path / "missing*.txt")])
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(UserError, match="--data: no non-empty"):
        resolve_data_files([str(tmp_path / "empty.txt")])
    (tmp_path / "x.bin").write_bytes(b"\0")
    with pytest.raises(UserError, match="unsupported type"):
        resolve_data_files([str(tmp_path / "x.bin")])


def _docs_file(tmp_path: Path, n: int = 400) -> Path:
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"document number {i}: " + "text " * (i % 7 + 1)}) for i in range(n)))
    return path


def test_held_out_split_is_a_stable_share_of_documents() -> None:
    from trainer.data import is_held_out

    texts = [f"doc {i}" for i in range(20_000)]
    share = sum(is_held_out(t, 0.05) for t in texts) / len(texts)
    assert 0.045 < share < 0.055
    assert [is_held_out(t, 0.05) for t in texts[:100]] == [is_held_out(t, 0.05) for t in texts[:100]]
    assert not any(is_held_out(t, 0.0) for t in texts)


def test_train_and_validation_streams_split_the_documents(tmp_path: Path) -> None:
    from trainer.data import token_stream

    files = [_docs_file(tmp_path)]
    tok = ByteTokenizer()

    def docs(split: str) -> set[bytes]:
        return {
            t.tobytes() for t in token_stream(files, tok, seed=0, epochs=1, held_out=0.1, split=split) if t.size > 1
        }

    train, val = docs("train"), docs("val")
    assert val and train and not train & val
    assert len(train | val) == 400
    assert 20 < len(val) < 60


def test_an_empty_split_raises_instead_of_spinning(tmp_path: Path) -> None:
    from trainer.data import EmptyStream

    path = tmp_path / "one.txt"
    path.write_text("a single document")
    it = BatchIterator([path], ByteTokenizer(), 8, 1, rank=0, world_size=1, seed=0, held_out=1e-12, split="val")
    with pytest.raises(EmptyStream, match="no val document"):
        next(it)


def test_skip_batches_with_a_held_out_split(tmp_path: Path) -> None:
    files = [_docs_file(tmp_path)]
    full = BatchIterator(files, ByteTokenizer(), 16, 2, rank=1, world_size=2, seed=0, held_out=0.1)
    expected = [b.input_ids for b in islice(full, 6)][4:]
    resumed = BatchIterator(files, ByteTokenizer(), 16, 2, rank=1, world_size=2, seed=0, held_out=0.1, skip_batches=4)
    assert resumed.batches_consumed == 4
    for want in expected:
        assert torch.equal(next(resumed).input_ids, want)


def test_a_resize_continues_the_global_stream_without_repeating_or_skipping() -> None:
    """--resume-any-world-size: 2 ranks read 5 batches of 2 blocks (20 global blocks), then 3 ranks
    continue from block 20 (``block_offset``): together exactly the stream one rank would read."""
    files = stdlib_sources()[:40]
    single = _blocks(files, 0, 1, 38)

    def read(rank: int, world: int, n: int, offset: int = 0) -> list[bytes]:
        it = BatchIterator(
            files, ByteTokenizer(), seq_len=32, batch_size=2, rank=rank, world_size=world, seed=0, block_offset=offset
        )
        return [row.numpy().tobytes() for _ in range(n) for row in next(it).input_ids]

    before = [read(r, 2, 5) for r in (0, 1)]
    after = [read(r, 3, 3, offset=20) for r in (0, 1, 2)]
    assert sorted(b for rank in before for b in rank) == sorted(single[:20])
    assert sorted(b for rank in after for b in rank) == sorted(single[20:38])
    assert after[1][:2] == [single[21], single[24]]  # rank r takes block 20 + r, then every third
