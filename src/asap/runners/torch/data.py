"""Deterministic training data: every parallel layout sees the same global batches in the same order.

The global batch of step ``s`` is a pure function of (seed, s), generated whole on every rank; each
data-parallel rank then takes its rows. Two sources:

* ``SyntheticTokens``: a seeded Markov token stream. Each token has four possible successors drawn once
  from the seed, so a model can learn it (the loss falls from ln(vocab) towards ln(4)) and the data never
  runs out.
* ``TextFileTokens``: windows of a real text file, one byte per token (needs vocab >= 256), at offsets drawn
  from (seed, step).
"""

from __future__ import annotations

from pathlib import Path

import torch

from asap.errors import AsapError

SUCCESSORS = 4


def _generator(seed: int, step: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + 12345) % (2**63 - 1))


class SyntheticTokens:
    def __init__(self, vocab_size: int, seed: int = 0):
        self.vocab_size = vocab_size
        self.seed = seed
        g = torch.Generator().manual_seed(seed + 1)
        self.table = torch.randint(vocab_size, (vocab_size, SUCCESSORS), generator=g)

    def batch(self, step: int, global_batch: int, seq_len: int) -> torch.Tensor:
        """(global_batch, seq_len + 1) int64 tokens: inputs are [:, :-1], labels [:, 1:]."""
        g = _generator(self.seed, step)
        out = torch.empty(global_batch, seq_len + 1, dtype=torch.long)
        out[:, 0] = torch.randint(self.vocab_size, (global_batch,), generator=g)
        choice = torch.randint(SUCCESSORS, (global_batch, seq_len), generator=g)
        for t in range(seq_len):
            out[:, t + 1] = self.table[out[:, t], choice[:, t]]
        return out


class TextFileTokens:
    def __init__(self, path: str | Path, vocab_size: int, seed: int = 0):
        p = Path(path)
        if not p.is_file():
            raise AsapError("data", f"'{path}' is not a file")
        if vocab_size < 256:
            raise AsapError("data", f"a text file is read one byte per token and needs vocab_size >= 256, got {vocab_size}")
        self.data = torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8).long()
        self.seed = seed

    def batch(self, step: int, global_batch: int, seq_len: int) -> torch.Tensor:
        n = self.data.numel()
        if n < seq_len + 2:
            raise AsapError("data", f"the file has {n} bytes, fewer than seq_len + 2 = {seq_len + 2}")
        g = _generator(self.seed, step)
        starts = torch.randint(n - seq_len - 1, (global_batch,), generator=g)
        idx = starts.unsqueeze(1) + torch.arange(seq_len + 1).unsqueeze(0)
        return self.data[idx]


def make_source(vocab_size: int, seed: int, path: str | None = None):
    return TextFileTokens(path, vocab_size, seed) if path else SyntheticTokens(vocab_size, seed)


def local_rows(batch: torch.Tensor, dp_rank: int, dp: int) -> torch.Tensor:
    """The contiguous block of rows data-parallel rank ``dp_rank`` trains on."""
    rows = batch.shape[0] // dp
    return batch[dp_rank * rows:(dp_rank + 1) * rows]


def document_ids(samples: list[list[int]], seq_len: int) -> torch.Tensor:
    """(rows, seq_len) int64: each position's document within its packed sample (documents of the given
    lengths in order; the positions past them form one more document, the padding, which is trained on like
    any other so that every row holds seq_len tokens and every rank the same count)."""
    out = torch.empty(len(samples), seq_len, dtype=torch.long)
    for r, docs in enumerate(samples):
        ids = torch.repeat_interleave(torch.arange(len(docs)), torch.tensor(docs, dtype=torch.long))
        out[r, : len(ids)] = ids
        out[r, len(ids):] = len(docs)
    return out


def step_samples(n_samples: int, step: int, global_batch: int) -> list[int]:
    """The packed samples step ``step`` trains: the next global batch of the file, cycling."""
    return [(step * global_batch + i) % n_samples for i in range(global_batch)]


def attention_work(doc_ids: torch.Tensor) -> float:
    """sum over rows of sum(l^2) of the row's documents, over rows x seq_len^2: the attention FLOPs of these
    rows relative to full-length single-document rows (``asap.balance.AttentionWork``'s q, averaged)."""
    rows, seq = doc_ids.shape
    total = sum(float((torch.bincount(r).double() ** 2).sum()) for r in doc_ids.cpu())
    return total / (rows * seq ** 2)
