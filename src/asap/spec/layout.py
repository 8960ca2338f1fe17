"""The one layer layout: which transformer layers, and which of the embedding, MTP modules and LM head, sit on
each pipeline chunk and each device.

A pipeline of ``pp`` stages with ``vpp`` chunks per device has pp * vpp chunks (virtual stages); chunk j runs
on device j mod pp (Megatron-Core's interleaved order, torch.distributed.pipelining's loop placement). The
embedding sits on chunk 0, the MTP modules and the LM head (with the loss) on the last chunk; the first
``first_dense_layers`` transformer layers of an MoE model are dense, the rest MoE.

Default split (what ``estimate`` prices, what ``asap run`` trains, the stage ILP's uniform baseline): every
chunk gets L // (pp vpp) layers and the remainder goes to the chunks from the middle outwards, so the end
chunks, which also carry the embedding and the head, get an extra layer last. When there are more chunks than
layers (up to L + 2), the first and then the last chunk hold only the embedding / the head.
A ``layer_split`` (strategy key, ``5/4/4/3``: layers per chunk in chunk order) replaces the default; the end
chunks may hold 0 layers, the others at least one.

Every consumer reads this module: the cost model (``cost.units``), the stage problem and its splits (``search.stages``, ``search.split_dp``) and the
trainer (``train.parallel.pipeline_split``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property, lru_cache

import numpy as np

from asap.errors import AsapError


class Unit(IntEnum):
    """The kinds of units a model is a chain of (columns of ``Layout.device_units``)."""

    EMBEDDING = 0
    DENSE = 1
    MOE = 2
    MTP = 3
    HEAD = 4


UNITS = tuple(Unit)


def default_chunk_layers(num_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per chunk under the default split (see the module docstring)."""
    if chunks < 1:
        raise AsapError("strategy.pp", f"needs at least one pipeline chunk, got {chunks}")
    if chunks > num_layers + 2:
        raise AsapError("strategy.vpp", f"pp*vpp = {chunks} chunks exceed num_layers+2 = {num_layers + 2} "
                                        "(each needs a layer; the embedding and the loss may count as one each)")
    empty = max(0, chunks - num_layers)  # chunks that hold only the embedding (first) or the head (last)
    counts = [0] * chunks
    body = list(range(chunks))
    if empty >= 1:
        body.remove(0)
    if empty >= 2:
        body.remove(chunks - 1)
    n = len(body)
    per, extra = divmod(num_layers, n)
    for j in body:
        counts[j] = per
    for i in range(extra):  # the remainder from the middle outwards: n//2, n//2 - 1, n//2 + 1, ...
        counts[body[(n // 2 + (i + 1) // 2 * (-1) ** i) % n]] += 1
    return tuple(counts)


def parse_layer_split(text, field: str = "strategy.layer_split") -> tuple[int, ...]:
    """``"5/4/4/3"`` (or ``5,4,4,3`` or a list) as a tuple of layers per chunk; structure is checked later."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    else:
        parts = [p for p in str(text).replace(",", "/").split("/") if p.strip() != ""]
    if not parts:
        raise AsapError(field, "is empty (give layers per pipeline chunk, e.g. 5/4/4/3)")
    out = []
    for p in parts:
        try:
            v = int(str(p).strip())
        except ValueError:
            raise AsapError(field, f"'{p}' is not an integer (give layers per pipeline chunk, e.g. 5/4/4/3)") from None
        if v < 0:
            raise AsapError(field, f"layer counts must be >= 0, got {v}")
        out.append(v)
    return tuple(out)


def format_layer_split(split: tuple[int, ...]) -> str:
    return "/".join(str(x) for x in split)


def check_layer_split(split: tuple[int, ...], num_layers: int, chunks: int,
                      field: str = "strategy.layer_split") -> None:
    if len(split) != chunks:
        raise AsapError(field, f"gives {len(split)} chunks but pp*vpp = {chunks}")
    if sum(split) != num_layers:
        raise AsapError(field, f"places {sum(split)} layers but the model has {num_layers}")
    for j, n in enumerate(split):
        if n == 0 and 0 < j < chunks - 1:
            raise AsapError(field, f"chunk {j} holds no layer (only the first and last chunks, which hold the "
                                   "embedding and the head, may be empty)")
    if chunks == 1 and split[0] != num_layers:
        raise AsapError(field, f"one chunk must hold all {num_layers} layers")


@dataclass(frozen=True)
class Layout:
    """Units per chunk and per device of one (model, pp, vpp, split)."""

    pp: int
    vpp: int
    chunk_layers: tuple[int, ...]
    chunk_units: np.ndarray  # [chunks, len(Unit)] unit counts per chunk
    explicit: bool  # given as a layer_split (not the default)

    @property
    def chunks(self) -> int:
        return self.pp * self.vpp

    @property
    def device_units(self) -> np.ndarray:
        """[pp, len(Unit)]: unit counts per device (the sum of its chunks d, d + pp, ...)."""
        return self.chunk_units.reshape(self.vpp, self.pp, len(UNITS)).sum(axis=0)

    def chunk_ranges(self) -> list[range]:
        """Transformer-layer indices per chunk."""
        out, start = [], 0
        for n in self.chunk_layers:
            out.append(range(start, start + n))
            start += n
        return out

    def device_chunks(self, device: int) -> list[int]:
        return [device + v * self.pp for v in range(self.vpp)]

    @cached_property
    def representatives(self) -> tuple[np.ndarray, np.ndarray]:
        """``representative_devices()``, computed once per layout."""
        return self.representative_devices()

    def representative_devices(self) -> tuple[np.ndarray, np.ndarray]:
        """(device indices, their unit counts): one device per distinct unit count, the lowest index, since it
        holds the most micro-batches in flight; every stage-level maximum (time, memory) is among them."""
        rows, first = np.unique(self.device_units, axis=0, return_index=True)
        order = np.argsort(first)
        return first[order], rows[order]

    @property
    def is_uniform_chunks(self) -> bool:
        return len(set(self.chunk_layers)) == 1


def chunk_unit_counts(chunk_layers: tuple[int, ...], first_dense: int, mtp_layers: int) -> np.ndarray:
    counts = np.zeros((len(chunk_layers), len(UNITS)), dtype=np.int64)
    start = 0
    for j, n in enumerate(chunk_layers):
        dense = max(0, min(start + n, first_dense) - start)
        counts[j, Unit.DENSE] = dense
        counts[j, Unit.MOE] = n - dense
        start += n
    counts[0, Unit.EMBEDDING] = 1
    counts[-1, Unit.MTP] = mtp_layers
    counts[-1, Unit.HEAD] = 1
    return counts


@lru_cache(maxsize=4096)
def _layout(num_layers: int, first_dense: int, mtp_layers: int, pp: int, vpp: int,
            split: tuple[int, ...]) -> Layout:
    chunks = pp * vpp
    if split:
        check_layer_split(split, num_layers, chunks)
        layers = split
    else:
        layers = default_chunk_layers(num_layers, chunks)
    counts = chunk_unit_counts(layers, first_dense, mtp_layers)
    counts.setflags(write=False)
    return Layout(pp=pp, vpp=vpp, chunk_layers=layers, chunk_units=counts, explicit=bool(split))


def layout(model, pp: int, vpp: int = 1, split: tuple[int, ...] | None = ()) -> Layout:
    """The layout of ``model`` (a ModelSpec) over pp stages of vpp chunks; ``split`` empty = the default."""
    first_dense = model.moe.first_dense_layers if model.moe is not None else model.num_layers
    return _layout(model.num_layers, first_dense, model.mtp_layers, int(pp), int(vpp), tuple(split or ()))
