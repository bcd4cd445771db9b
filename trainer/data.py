"""Real text → packed token blocks → per-rank batches.

The stream: files in a seeded order (re-shuffled each epoch), each document tokenised and
followed by EOS, concatenated and cut into blocks of ``seq_len + 1`` tokens. Block ``g`` of the
global stream belongs to rank ``g % world_size``, so ranks read disjoint data and the whole
layout is a pure function of (files, tokenizer, seq_len, seed). Inputs are ``block[:-1]`` and
targets ``block[1:]``, so every token of a full block carries a label.

With validation on, a document whose text hashes below ``--val-fraction`` is held out: the
training stream skips it and the validation stream is made of those documents only.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.runspec.corpus import is_held_out, read_documents

#: Target value of positions that carry no label (torch's ``cross_entropy`` default).
IGNORE_INDEX = -100


class ByteTokenizer:
    """UTF-8 bytes as tokens 0..255, plus BOS=256, EOS=257, PAD=258 (``vocab_size`` 259).

    Needs no download and covers any text, which makes it the default for the ``tiny`` preset.
    """

    bos_id, eos_id, pad_id = 256, 257, 258
    vocab_size = 259

    def encode(self, text: str) -> np.ndarray:
        """Text → int64 token ids, shape ``(len(text.encode()),)``."""
        return np.frombuffer(text.encode("utf-8", errors="replace"), dtype=np.uint8).astype(np.int64)


class HFTokenizer:
    """A local Hugging Face tokenizer (``AutoTokenizer.from_pretrained(path)``)."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path)
        self.eos_id = self._tok.eos_token_id if self._tok.eos_token_id is not None else 0
        self.vocab_size = len(self._tok)

    def encode(self, text: str) -> np.ndarray:
        """Text → int64 token ids without special tokens, shape ``(n,)``."""
        return np.asarray(self._tok.encode(text, add_special_tokens=False), dtype=np.int64)


Tokenizer = ByteTokenizer | HFTokenizer


@dataclass(frozen=True)
class Batch:
    """One rank's batch for one step.

    Attributes:
        input_ids: int64, shape ``(batch_size, seq_len)``.
        targets: int64, shape ``(batch_size, seq_len)``; ``IGNORE_INDEX`` where no label.
        labelled_tokens: positions of ``targets`` that carry a label, counted on the host when
            the batch is built, so reading it never synchronises with a device.
    """

    input_ids: torch.Tensor
    targets: torch.Tensor
    labelled_tokens: int

    @property
    def samples(self) -> int:
        """Number of sequences in the batch."""
        return int(self.input_ids.shape[0])


def count_labelled_tokens(targets: np.ndarray | torch.Tensor) -> int:
    """Positions of ``targets`` that carry a label (not ``IGNORE_INDEX``)."""
    return int((targets != IGNORE_INDEX).sum())


class EmptyStream(ValueError):
    """A whole pass over the corpus yielded no token (every document empty or held out)."""


def token_stream(
    files: list[Path],
    tokenizer: Tokenizer,
    seed: int,
    epochs: int | None = None,
    held_out: float = 0.0,
    split: str = "train",
) -> Iterator[np.ndarray]:
    """Tokenised documents, each followed by EOS, file order reshuffled per epoch.

    Args:
        files: the corpus (``trainer.runspec.corpus.resolve_data_files``).
        tokenizer: byte or Hugging Face tokenizer.
        seed: file order of epoch ``e`` is ``random.Random(seed + e).shuffle(files)``.
        epochs: stop after this many passes (``None``: endless).
        held_out: the validation fraction (``is_held_out``); 0 holds nothing out.
        split: ``train`` (documents not held out) or ``val`` (only those held out).

    Raises:
        EmptyStream: a pass over the corpus produced no token for ``split``.
    """
    want_held_out = split == "val"
    eos = np.array([tokenizer.eos_id], dtype=np.int64)
    epoch = 0
    while epochs is None or epoch < epochs:
        order = list(files)
        random.Random(seed + epoch).shuffle(order)
        produced = False
        for path in order:
            for doc in read_documents(path):
                if is_held_out(doc, held_out) != want_held_out:
                    continue
                tokens = tokenizer.encode(doc)
                if tokens.size:
                    produced = True
                    yield tokens
                    yield eos
        if not produced:
            raise EmptyStream(f"no {split} document in {len(files)} file(s)")
        epoch += 1


def packed_blocks(
    stream: Iterator[np.ndarray], block_len: int, rank: int, world_size: int, offset: int = 0
) -> Iterator[np.ndarray]:
    """Cut a token stream into ``block_len`` blocks and keep every ``world_size``-th from ``rank``,
    counted from global block ``offset`` (blocks before it were read by an earlier world size).

    A final partial block is padded with ``IGNORE_INDEX`` (its padding carries no label).

    Yields:
        int64 arrays of shape ``(block_len,)``.
    """
    pending: list[np.ndarray] = []
    have = 0
    index = 0
    for tokens in stream:
        pending.append(tokens)
        have += tokens.size
        if have < block_len:
            continue
        flat = np.concatenate(pending)
        full = flat.size // block_len
        for i in range(full):
            if index >= offset and (index - offset) % world_size == rank:
                yield flat[i * block_len : (i + 1) * block_len]
            index += 1
        rest = flat[full * block_len :]
        pending, have = [rest], rest.size
    if have and index >= offset and (index - offset) % world_size == rank:
        tail = np.full(block_len, IGNORE_INDEX, dtype=np.int64)
        tail[:have] = np.concatenate(pending)
        yield tail


def make_batch(blocks: list[np.ndarray], pad_id: int) -> Batch:
    """Stack ``(seq_len + 1)``-token blocks into a ``Batch`` (inputs ``[:-1]``, targets ``[1:]``)."""
    stacked = np.stack(blocks)
    inputs = stacked[:, :-1].copy()
    targets = stacked[:, 1:].copy()
    inputs[inputs == IGNORE_INDEX] = pad_id
    return Batch(torch.from_numpy(inputs), torch.from_numpy(targets), count_labelled_tokens(targets))


class BatchIterator:
    """Endless per-rank batches of packed real text.

    Args:
        files: the corpus.
        tokenizer: how text becomes ids.
        seq_len: tokens per sequence.
        batch_size: sequences per batch.
        rank, world_size: this rank's share of the block stream.
        seed: corpus order.
        skip_batches: batches already consumed (resuming a run); their blocks are re-derived
            (tokenised again) and dropped, so the next batch is exactly the one that followed.
        block_offset: global blocks read before at another world size (``TrainerState.blocks_before``).
        held_out: the validation fraction whose documents training skips (0: none).
        split: ``train`` or ``val`` (see ``token_stream``).

    Raises:
        EmptyStream: (from ``next``) the split has no document.
    """

    def __init__(
        self,
        files: list[Path],
        tokenizer: Tokenizer,
        seq_len: int,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        skip_batches: int = 0,
        held_out: float = 0.0,
        split: str = "train",
        block_offset: int = 0,
    ) -> None:
        self.batch_size = batch_size
        self.pad_id = getattr(tokenizer, "pad_id", tokenizer.eos_id)
        stream = token_stream(files, tokenizer, seed, held_out=held_out, split=split)
        self._blocks = packed_blocks(stream, seq_len + 1, rank, world_size, block_offset)
        for _ in range(skip_batches * batch_size):
            next(self._blocks)
        self.batches_consumed = skip_batches

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> Batch:
        blocks = [next(self._blocks) for _ in range(self.batch_size)]
        self.batches_consumed += 1
        return make_batch(blocks, self.pad_id)
