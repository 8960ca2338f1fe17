"""The initial weights and the data of a JAX run: the reference trainer's own, so both backends see the same.

The weights are ``asap.runners.torch.model.build_model(spec, seq_len, seed)``'s (the full torch model initialised from
one seed, independent of the layout) exported to numpy under the torch parameter names; the batches are
``asap.runners.torch.data``'s (the seeded synthetic stream or a text file), generated whole for every step. Both need
PyTorch on the CPU only.
"""

from __future__ import annotations

import numpy as np

from asap.errors import AsapError
from asap.spec.model import ModelSpec


def _torch():
    try:
        import torch
    except ImportError:
        raise AsapError("backend", "the jax backend takes its weights and data from asap.runners.torch, which needs "
                                   "PyTorch (pip install torch)") from None
    return torch


def initial_weights(spec: ModelSpec, seq_len: int, seed: int) -> dict[str, np.ndarray]:
    """{torch parameter name: fp32 array}; with tied embeddings the head is the embedding (one entry)."""
    _torch()
    from asap.runners.torch.model import build_model

    model = build_model(spec, seq_len, seed)
    out = {name: p.detach().numpy().astype(np.float32).copy() for name, p in model.named_parameters()}
    if spec.tie_embeddings:
        out.pop("output.weight", None)
    return out


class Batches:
    """``batch(step)`` -> (inputs, labels) int32 arrays (global_batch, seq_len) of step ``step``."""

    def __init__(self, spec: ModelSpec, global_batch: int, seq_len: int, seed: int, path: str | None = None):
        _torch()
        from asap.runners.torch.data import make_source

        self.source = make_source(spec.vocab_size, seed, path)
        self.global_batch, self.seq_len = global_batch, seq_len

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        tokens = self.source.batch(step, self.global_batch, self.seq_len).numpy().astype(np.int32)
        return tokens[:, :-1], tokens[:, 1:]
