"""Strategies as numpy arrays for the cost model: ``StrategyBatch`` (defined with the knobs' encoding in
``asap.spec.batch``, shared with the rules), and the helpers that price each distinct combination of a few
columns once (``unique_index``, ``expand``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from asap.spec.batch import StrategyBatch, gather
from asap.spec.knobs import COLUMNS

__all__ = ["StrategyBatch", "gather", "unique_index", "expand", "per_combination", "COLUMNS"]


def unique_index(S: StrategyBatch, keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(a representative row of each distinct combination of ``keys``, every row's combination)."""
    code = np.zeros(len(S), dtype=np.int64)
    for k in keys:
        col = getattr(S, k)
        if len(col) and int(col.max()) >= 1 << 16:  # large codes (MaxText remat policies): their ranks
            col = np.unique(col, return_inverse=True)[1].reshape(-1)
        code = code * (int(col.max()) + 1 if len(col) else 1) + col
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def expand(value, inverse: np.ndarray):
    """Map a per-combination result (array, dataclass or dict of arrays) back onto the rows of the batch."""
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return gather(value, inverse)
    if isinstance(value, dict):
        return {k: expand(v, inverse) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(expand(v, inverse) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return type(value)(**{f: expand(getattr(value, f), inverse) for f in value.__dataclass_fields__})
    if isinstance(value, list):  # a table shared by every row (e.g. the layouts)
        return value
    return value


class ReadingBatch(StrategyBatch):
    """A batch that records in ``reads`` every column read of it (and of the batches taken from it)."""

    reads: set[str]

    def __getattribute__(self, name: str):
        if name in _COLUMN_NAMES:
            object.__getattribute__(self, "reads").add(name)
        return object.__getattribute__(self, name)

    @staticmethod
    def of(S: StrategyBatch, reads: set[str]) -> "ReadingBatch":
        out = ReadingBatch.__new__(ReadingBatch)
        out.__dict__.update(S.__dict__)
        out.__dict__["reads"] = reads
        return out

    def take(self, index) -> "ReadingBatch":
        return ReadingBatch.of(StrategyBatch.take(self, index), self.reads)

    def value(self, column: str, i: int) -> int:
        self.reads.add(column)
        return StrategyBatch.value(self, column, i)


_COLUMN_NAMES = frozenset(COLUMNS)


def per_combination(price: Callable[[StrategyBatch], Any], S: StrategyBatch, keys: tuple[str, ...]) -> Any:
    """``price(S)`` (a function of each row's own columns, per row whatever rows are beside it: the cost
    model's figures), priced once per distinct combination of ``keys`` and ``expand``-ed to the rows; the
    columns it reads are recorded, and where one is not among ``keys`` (the combinations cannot tell its
    rows apart) every row is priced instead: the figures are ``price(S)``'s either way."""
    first, row = unique_index(S, keys)
    reads: set[str] = set()
    value = price(ReadingBatch.of(S.take(first), reads))
    if not reads <= set(keys):
        return price(S)
    return expand(value, row)
