"""Strategies as numpy arrays, so that one call of the cost model prices a whole search space.

Every cost function takes a ``StrategyBatch`` whose fields are equal-length integer arrays (a single strategy
is a batch of one). Strings are coded: recompute none/selective/full = 0/1/2; schedule as ``SCHEDULE_CODE``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable

import numpy as np

from asap.spec.strategy import RECOMPUTE, SCHEDULES, Strategy

RECOMPUTE_CODE = {name: i for i, name in enumerate(RECOMPUTE)}  # none 0, selective 1, full 2
SCHEDULE_CODE = {name: i for i, name in enumerate(SCHEDULES)}  # 1f1b 0, interleaved 1, zb 2, gpipe 3


@dataclass
class StrategyBatch:
    dp: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    vpp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    mbs: np.ndarray
    recompute: np.ndarray
    zero: np.ndarray
    sp: np.ndarray
    schedule: np.ndarray

    def __len__(self) -> int:
        return int(self.dp.shape[0])

    @classmethod
    def from_strategies(cls, strategies: Iterable[Strategy]) -> "StrategyBatch":
        rows = list(strategies)
        cols = {}
        for f in fields(cls):
            if f.name == "recompute":
                cols[f.name] = np.array([RECOMPUTE_CODE[s.recompute] for s in rows], dtype=np.int64)
            elif f.name == "schedule":
                cols[f.name] = np.array([SCHEDULE_CODE[s.schedule] for s in rows], dtype=np.int64)
            else:
                cols[f.name] = np.array([getattr(s, f.name) for s in rows], dtype=np.int64)
        return cls(**cols)

    def take(self, index) -> "StrategyBatch":
        return StrategyBatch(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def strategy(self, i: int) -> Strategy:
        d = {f.name: int(getattr(self, f.name)[i]) for f in fields(self)}
        d["recompute"] = RECOMPUTE[d["recompute"]]
        d["schedule"] = SCHEDULES[d["schedule"]]
        return Strategy(**d)

    @property
    def devices(self) -> np.ndarray:
        return self.dp * self.tp * self.pp * self.cp


def unique_rows(S: StrategyBatch, keys: tuple[str, ...]) -> tuple[StrategyBatch, np.ndarray]:
    """The distinct combinations of ``keys`` in S (other columns from a representative row) and, for every row
    of S, the index of its combination: terms that depend on a few knobs are computed once per combination."""
    code = np.zeros(len(S), dtype=np.int64)
    for k in keys:
        col = getattr(S, k)
        code = code * (int(col.max()) + 1 if len(col) else 1) + col
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return S.take(first), inverse.reshape(-1)


def expand(value, inverse: np.ndarray):
    """Map a per-combination result (array, dataclass or dict of arrays) back onto the rows of the batch."""
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        return value[inverse]
    if isinstance(value, dict):
        return {k: expand(v, inverse) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(expand(v, inverse) for v in value)
    if hasattr(value, "__dataclass_fields__"):
        return type(value)(**{f: expand(getattr(value, f), inverse) for f in value.__dataclass_fields__})
    return value


def by_unique(S: StrategyBatch, keys: tuple[str, ...], fn):
    """``fn(S)`` evaluated once per distinct combination of ``keys`` and broadcast back to every row."""
    if len(S) < 64:
        return fn(S)
    sub, inverse = unique_rows(S, keys)
    return expand(fn(sub), inverse)
