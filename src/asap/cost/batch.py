"""Strategies as numpy arrays for the cost model: ``StrategyBatch`` (defined with the knobs' encoding in
``asap.spec.batch``, shared with the rules), and the helpers that price each distinct combination of a few
columns once (``unique_index``, ``expand``).
"""

from __future__ import annotations

import numpy as np

from asap.spec.batch import StrategyBatch, gather
from asap.spec.knobs import COLUMNS

__all__ = ["StrategyBatch", "gather", "unique_index", "expand", "COLUMNS"]


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
