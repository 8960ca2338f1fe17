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
