"""The Sharding Memory's experiments: one row per workload, found again by its ``workload_key``, and the
experiments most like a workload."""

from __future__ import annotations

import json

from asap.memory.connection import Store
from asap.memory.records import _dumps, _now, normalize_workload, workload_key
from asap.memory.rows import Experiment
from asap.memory.similarity import workload_similarity
from asap.errors import AsapError


class Experiments(Store):
    """The ``experiments`` table's methods of ``Memory``."""

    def experiment(self, workload: dict) -> int:
        """The id of the experiment of this workload (by ``workload_key``), created if it is new."""
        w = normalize_workload(workload)
        key = workload_key(w)
        body = _dumps(w, "workload")

        def run(cur):
            row = cur.execute("SELECT id, workload FROM experiments WHERE workload_key = ?", (key,)).fetchone()
            if row is None:
                cur.execute("INSERT INTO experiments (workload_key, workload, created_at) VALUES (?, ?, ?)",
                            (key, body, _now()))
                return cur.lastrowid
            old = json.loads(row[1])
            merged = {**old, **{k: v for k, v in w.items() if v is not None and old.get(k) is None}}
            if merged != old:  # a later description that knows more (the family, the parameter count)
                cur.execute("UPDATE experiments SET workload = ? WHERE id = ?", (_dumps(merged, "workload"), row[0]))
            return row[0]

        return self._write(run)

    def experiments(self) -> list[Experiment]:
        """Every experiment, oldest first."""
        return [Experiment.from_row(r) for r in self._read("SELECT * FROM experiments ORDER BY id")]

    def get_experiment(self, experiment_id: int) -> Experiment:
        rows = self._read("SELECT * FROM experiments WHERE id = ?", (int(experiment_id),))
        if not rows:
            raise AsapError("experiment", f"no experiment {experiment_id} in {self.path}")
        return Experiment.from_row(rows[0])

    def similar_experiments(self, workload: dict, k: int = 5) -> list[tuple[Experiment, float]]:
        """Other experiments (not this workload's own), most similar first, with a score in [0, 1]: a weighted
        sum of the same model family (0.3; the same model name when a family is missing), a parameter count
        close on a log scale (0.3; 0 at 100x apart), the same accelerator family (0.2; the same accelerator
        name when a family is missing) and a device count close on a log scale (0.2; 0 at 64x apart). A figure
        one side lacks adds nothing. Experiments scoring 0 are left out."""
        w = normalize_workload(workload)
        own = workload_key(w)
        scored = []
        for e in self.experiments():
            if e.workload_key == own:
                continue
            s = workload_similarity(w, e.workload)
            if s > 0:
                scored.append((e, s))
        scored.sort(key=lambda es: (-es[1], -es[0].id))
        return scored[:max(0, int(k))]
