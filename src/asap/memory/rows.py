"""What Memory gives back: typed rows. An ``Experiment`` (a workload and its key) and a ``Trial`` (one strategy
tried on it, the strategy completed once, where the row is read); ``to_dict`` writes each as the JSON of its row
(``asap memory --json``, ``Memory.export``), the one place they become mappings."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from asap.memory.records import _loads
from asap.memory.schema import _JSON_TRIAL
from asap.errors import AsapError
from asap.spec.strategy import Strategy, complete_strategy, parse_strategy
from asap.spec.words import TrialStatus


@dataclass(frozen=True)
class Experiment:
    """One row of ``experiments``: a workload (its fields under their canonical names) and its key."""

    id: int
    workload_key: str
    workload: dict[str, Any]
    created_at: str

    @classmethod
    def from_row(cls, r: sqlite3.Row) -> "Experiment":
        return cls(r["id"], r["workload_key"], json.loads(r["workload"]), r["created_at"])

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "workload_key": self.workload_key, "workload": self.workload,
                "created_at": self.created_at}


@dataclass(frozen=True)
class Trial:
    """One row of ``trials``. ``keys``: the strategy's keys as given and stored (a partial mapping, the layer split
    as text); ``strategy``: those keys completed with the documented defaults on the experiment's devices and
    framework (``complete_strategy``, no cost model), ``None`` where they do not complete there."""

    id: int
    experiment_id: int
    strategy_string: str
    keys: dict[str, Any]
    strategy: Strategy | None
    status: TrialStatus
    reason: str
    predicted_step_time_s: float | None
    measured_step_time_s: float | None
    diagnosis: Any
    executor: str
    pid: int | None
    host: str | None
    started_at: str
    ended_at: str | None
    traces: list[str] | None

    @classmethod
    def from_row(cls, r: sqlite3.Row, workload: dict[str, Any] | None) -> "Trial":
        d = {k: r[k] for k in r.keys() if k != "workload"}
        for k in _JSON_TRIAL:
            d[k] = _loads(d.get(k))
        keys = d.pop("strategy")
        return cls(**{**d, "keys": keys, "strategy": completed(keys, workload or {}),
                      "status": TrialStatus(d["status"])})

    def to_dict(self) -> dict[str, Any]:
        """The row as it is stored (``strategy``: the keys given), in the table's column order."""
        return {"id": self.id, "experiment_id": self.experiment_id, "strategy_string": self.strategy_string,
                "strategy": self.keys, "status": self.status.value, "reason": self.reason,
                "predicted_step_time_s": self.predicted_step_time_s,
                "measured_step_time_s": self.measured_step_time_s, "diagnosis": self.diagnosis,
                "executor": self.executor, "pid": self.pid, "host": self.host, "started_at": self.started_at,
                "ended_at": self.ended_at, "traces": self.traces}


def completed(keys: dict[str, Any] | None, workload: dict[str, Any]) -> Strategy | None:
    """A trial's stored keys completed on its experiment's devices and framework (the accelerator family's
    default where the workload names none); ``None`` where the workload lacks the figures or the keys do not
    complete there."""
    from asap.spec.framework import get_framework

    devices, family = workload.get("devices"), workload.get("accelerator_family")
    if not devices and "dp" not in (keys or {}):
        return None
    try:
        framework = get_framework(workload.get("framework"), str(family or ""))
        return complete_strategy(parse_strategy(keys or {}), int(devices or 0), framework=framework)
    except (AsapError, TypeError, ValueError, ZeroDivisionError):
        return None
