"""Strategies as numpy arrays, so that one call of the cost model prices a whole search space, and the rules
(``asap.spec.legality``, ``asap.spec.stack_rules``) test a whole space at once.

A ``StrategyBatch`` holds one equal-length integer array per knob of ``asap.spec.knobs.KNOBS`` (a single
strategy is a batch of one), each value as its knob's batch code (``Knob.code``: ``recompute`` and
``schedule`` hold ``Recompute`` / ``Schedule`` codes, IntEnums, so ``S.recompute == Recompute.FULL`` works
inside numpy; an enum its index in the knob's choices); ``split`` indexes ``layer_splits``, the explicit layer
splits of the batch (index 0 is the default split). A column left out at construction holds its knob's
default code (dp must be given).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from asap.spec.knobs import COLUMNS, KNOBS, KnobKind, knob_of_column
from asap.spec.strategy import Strategy


class StrategyBatch:
    """The columns of ``COLUMNS`` (one per knob, ``asap.spec.knobs``) and the table of layer splits."""

    def __init__(self, layer_splits: tuple[tuple[int, ...], ...] = ((),), **columns: np.ndarray):
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise TypeError(f"StrategyBatch: unknown columns {sorted(unknown)}")
        n = len(columns["dp"])
        for name in COLUMNS:
            col = columns.get(name)
            if col is None:
                col = np.full(n, knob_of_column(name).default_code, dtype=np.int64)
            self.__dict__[name] = col
        self.layer_splits = layer_splits

    def __getattr__(self, name: str) -> np.ndarray:
        """A column not built yet: a batch of ``take`` gathers each column of its source on first read (the
        pricing reads a few of the 25 columns of most of its batches)."""
        lazy = self.__dict__.get("_lazy")
        if lazy is None or name not in lazy[0]:
            raise AttributeError(name)
        col = gather(lazy[0][name], lazy[1])
        self.__dict__[name] = col
        return col

    def __len__(self) -> int:
        lazy = self.__dict__.get("_lazy")
        return len(lazy[1]) if lazy is not None else int(self.dp.shape[0])

    def __getitem__(self, key: str) -> np.ndarray:
        return getattr(self, key)

    def __contains__(self, key: str) -> bool:
        return key in COLUMNS

    def __iter__(self):
        return iter(COLUMNS)

    def keys(self):
        return COLUMNS

    @classmethod
    def from_strategies(cls, strategies: Iterable[Strategy]) -> "StrategyBatch":
        """The strategies' rows, each knob coded by its ``Knob.code`` (the layer split: an index into the
        batch's table of splits)."""
        rows = list(strategies)
        splits: list[tuple[int, ...]] = [()]
        for s in rows:
            if s.layer_split and s.layer_split not in splits:
                splits.append(s.layer_split)
        cols = {k.column: [splits.index(s.layer_split) for s in rows] if k.kind is KnobKind.SPLIT
                else [k.code(getattr(s, k.name)) for s in rows] for k in KNOBS}
        return cls(**{k: np.array(v, dtype=np.int64) for k, v in cols.items()}, layer_splits=tuple(splits))

    @classmethod
    def concatenate(cls, parts: list["StrategyBatch"]) -> "StrategyBatch":
        """The rows of every part in turn; the parts share one table of layer splits."""
        splits = parts[0].layer_splits
        if any(p.layer_splits != splits for p in parts):
            raise ValueError("StrategyBatch.concatenate: the parts have different layer_splits tables")
        return cls(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in COLUMNS}, layer_splits=splits)

    def take(self, index) -> "StrategyBatch":
        """The rows ``index`` (an integer array, a slice, a mask), their columns gathered when first read: the
        same values as gathering every column now."""
        lazy = self.__dict__.get("_lazy")
        if lazy is None and isinstance(index, slice):  # views, no copy
            return StrategyBatch(**{k: self.__dict__[k][index] for k in COLUMNS}, layer_splits=self.layer_splits)
        rows = index if isinstance(index, np.ndarray) and index.dtype.kind in "iu" else np.arange(len(self))[index]
        source, at = (lazy[0], gather(lazy[1], rows)) if lazy is not None else ({k: self.__dict__[k] for k in COLUMNS},
                                                                                rows)
        out = StrategyBatch.__new__(StrategyBatch)
        out.__dict__.update(_lazy=(source, np.asarray(at, dtype=np.int64)), layer_splits=self.layer_splits)
        return out

    def value(self, column: str, i: int) -> int:
        """Row ``i``'s code in ``column`` (read off the source of a batch of ``take``: no column built)."""
        lazy = self.__dict__.get("_lazy")
        if lazy is not None and column not in self.__dict__:
            return int(lazy[0][column][lazy[1][i]])
        return int(getattr(self, column)[i])

    def layer_split(self, i: int) -> tuple[int, ...]:
        return self.layer_splits[self.value("split", i)]

    def strategy(self, i: int, dispatcher: int | None = None) -> Strategy:
        """Row ``i`` as a Strategy (each code decoded by its ``Knob.decode``); ``dispatcher`` gives the priced one
        for a row left to the fastest (an unpriced such row reads as the first dispatcher)."""
        d: dict[str, Any] = {k.name: k.decode(self.value(k.column, i)) for k in _CODED}
        if dispatcher is not None:
            d["dispatcher"] = _DISPATCHER.decode(dispatcher)
        return Strategy(**d, layer_split=self.layer_split(i))

    @property
    def devices(self) -> np.ndarray:
        return self.dp * self.tp * self.pp * self.cp


_CODED = tuple(k for k in KNOBS if k.kind is not KnobKind.SPLIT)
_DISPATCHER = next(k for k in KNOBS if k.name == "dispatcher")


def gather(values, index):
    """``values[index]`` along the first axis. An integer index array goes through ``ndarray.take``: the same
    elements, copied by numpy's contiguous take loop, about 4x faster than fancy indexing for the [N, K] row
    gathers of the pricing (measured: 131k rows of a [44k, 8] float array, 3.0 ms against 12.0 ms); slices,
    masks and scalars index as before."""
    if isinstance(index, np.ndarray) and index.dtype.kind in "iu" and isinstance(values, np.ndarray) \
            and values.ndim >= 1:
        return values.take(index, axis=0)
    return values[index]
