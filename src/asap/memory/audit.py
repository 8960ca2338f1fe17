"""The Sharding Memory's audit trail: what each agent step saw, weighed and decided."""

from __future__ import annotations

from typing import Any

from pydantic import RootModel, field_validator

from asap.memory.connection import Store
from asap.memory.records import _dumps, _loads, _now
from asap.memory.schema import _JSON_AUDIT
from asap.errors import AsapError, validated


class Candidates(RootModel[Any]):
    """What an agent step weighed: a list of ``{strategy, kept, why}`` mappings (``strategy`` required)."""

    @field_validator("root", mode="before")
    @classmethod
    def _candidates(cls, v: Any) -> Any:
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"must be a list of {{strategy, kept, why}}, got {type(v).__name__}")
        for c in v:
            if not isinstance(c, dict) or "strategy" not in c:
                raise ValueError(f"each must be a mapping with strategy, kept and why, got {c!r}")
        return v


class Audit(Store):
    """The ``audit`` table's methods of ``Memory``."""

    def log(self, experiment_id: int, agent: str, step: str, inputs: Any = None, retrieved: list | None = None,
            candidates: list | None = None, outputs: Any = None, trial_id: int | None = None) -> int:
        """One audit row: what ``agent`` saw (``inputs``, the ids it ``retrieved``), weighed (``candidates``:
        ``[{strategy, kept, why}]``) and produced (``outputs``) at ``step``. Its id."""
        if candidates is not None:
            validated(Candidates, candidates, whole="candidates")
        args = (int(experiment_id), None if trial_id is None else int(trial_id), str(agent), str(step),
                _dumps(inputs, "inputs"), _dumps(None if retrieved is None else list(retrieved), "retrieved"),
                _dumps(None if candidates is None else list(candidates), "candidates"), _dumps(outputs, "outputs"),
                _now())

        def run(cur):
            if cur.execute("SELECT 1 FROM experiments WHERE id = ?", (args[0],)).fetchone() is None:
                raise AsapError("experiment", f"no experiment {experiment_id} in {self.path}")
            if args[1] is not None and cur.execute("SELECT 1 FROM trials WHERE id = ?",
                                                   (args[1],)).fetchone() is None:
                raise AsapError("trial", f"no trial {trial_id} in {self.path}")
            cur.execute("INSERT INTO audit (experiment_id, trial_id, agent, step, inputs, retrieved, candidates, "
                        "outputs, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", args)
            return cur.lastrowid

        return self._write(run)

    def audit(self, experiment_id: int | None = None) -> list[dict]:
        """The audit rows (of one experiment, or all), in the order they were written."""
        if experiment_id is None:
            rows = self._read("SELECT * FROM audit ORDER BY id")
        else:
            rows = self._read("SELECT * FROM audit WHERE experiment_id = ? ORDER BY id", (int(experiment_id),))
        out = []
        for r in rows:
            d = {k: r[k] for k in r.keys()}
            for k in _JSON_AUDIT:
                d[k] = _loads(d.get(k))
            out.append(d)
        return out
