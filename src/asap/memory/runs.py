"""The Sharding Memory's measured runs: step times measured on real machines (a published case, a stack's own
training log, a tune trial), each with the job and strategy that made it and where it came from, the matter
``asap learn`` teaches the cost model with (``asap.cost.learning``). The same run (its job, strategy and measured
step) is refused a second time."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from asap.errors import AsapError
from asap.memory.connection import Store
from asap.memory.records import _dumps, _now

if TYPE_CHECKING:
    from asap.spec.job import Job
    from asap.spec.strategy import Strategy

SOURCE_KINDS = ("case", "log", "trial")
# what a stored run keeps of its train spec: the kernels it compiled too (torchtitan's [compile]: they price its
# elementwise traffic and its loss), absent where the stack's default held
TRAIN_FIELDS = ("global_batch", "seq_len", "precision", "framework", "moe_imbalance", "fused_elementwise",
                "compiled_loss")


class DuplicateRun(AsapError):
    """The run is in the Memory already (the same job, strategy and measured step)."""


@dataclass(frozen=True)
class MeasuredRunRow:
    """One row of ``measured_runs``. ``job``: ``{model, cluster, train}`` as the cost model reads them
    (``asap.spec`` mappings); ``strategy``: the complete strategy it ran."""

    id: int
    stack: str
    accelerator: str
    accelerator_family: str
    cluster_name: str
    devices: int
    precision: str
    job: dict[str, Any]
    strategy: dict[str, Any]
    measured_step_time_s: float
    step_time_spread_s: float | None
    steps: int | None
    peak_memory_gb: float | None
    source_kind: str
    source_file: str
    source_ref: str
    measured_at: str | None
    added_at: str
    trial_id: int | None

    @classmethod
    def from_row(cls, r) -> "MeasuredRunRow":
        d = {k: r[k] for k in r.keys() if k != "run_key"}
        d["job"], d["strategy"] = json.loads(d["job"]), json.loads(d["strategy"])
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def source(self) -> str:
        """Where it came from, in a few words: ``case ID of FILE``, ``log PATH``, ``trial N``."""
        where = f" of {self.source_file}" if self.source_file and self.source_kind == "case" else ""
        return f"{self.source_kind} {self.source_ref}{where}".strip()


def run_key(job: dict[str, Any], strategy: dict[str, Any], measured_step_time_s: float) -> str:
    """The run's identity: its job, strategy and measured step (to 6 significant digits), canonical JSON hashed."""
    body = json.dumps({"job": job, "strategy": strategy, "step": f"{measured_step_time_s:.6g}"}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:32]


class MeasuredRuns(Store):
    """The ``measured_runs`` table's methods of ``Memory``."""

    def add_measured_run(self, *, stack: str, accelerator: str, accelerator_family: str, devices: int,
                         precision: str, job: dict[str, Any], strategy: dict[str, Any],
                         measured_step_time_s: float, source_kind: str, source_file: str = "",
                         source_ref: str = "", cluster_name: str = "", step_time_spread_s: float | None = None,
                         steps: int | None = None, peak_memory_gb: float | None = None,
                         measured_at: str | None = None, trial_id: int | None = None) -> int:
        """Store one measured run; its id. The same run again (same job, strategy and step) is refused with the
        id it has."""
        if source_kind not in SOURCE_KINDS:
            raise AsapError("source_kind", f"must be one of {', '.join(SOURCE_KINDS)}, got {source_kind!r}")
        step = float(measured_step_time_s)
        if not step > 0 or step == float("inf"):
            raise AsapError("measured_step_time_s", f"must be a positive number of seconds, got {step!r}")
        key = run_key(job, strategy, step)
        args = (key, stack, accelerator, accelerator_family, cluster_name or "", int(devices), precision,
                _dumps(job, "job"), _dumps(strategy, "strategy"), step, step_time_spread_s, steps, peak_memory_gb,
                source_kind, source_file or "", source_ref or "", measured_at, _now(), trial_id)

        def run(cur):
            old = cur.execute("SELECT id, source_kind, source_ref FROM measured_runs WHERE run_key = ?",
                              (key,)).fetchone()
            if old is not None:
                raise DuplicateRun("run", f"{source_ref or 'this run'} is already in {self.path} as measured run "
                                       f"{old[0]} ({old[1]} {old[2]}): duplicates are refused")
            cur.execute("INSERT INTO measured_runs (run_key, stack, accelerator, accelerator_family, cluster_name, "
                        "devices, precision, job, strategy, measured_step_time_s, step_time_spread_s, steps, "
                        "peak_memory_gb, source_kind, source_file, source_ref, measured_at, added_at, trial_id) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", args)
            return cur.lastrowid

        return self._write(run)

    def has_measured_run(self, job: dict[str, Any], strategy: dict[str, Any], measured_step_time_s: float) -> bool:
        key = run_key(job, strategy, float(measured_step_time_s))
        return bool(self._read("SELECT 1 FROM measured_runs WHERE run_key = ?", (key,)))

    def measured_runs(self, stack: str | None = None, accelerator_family: str | None = None) -> list[MeasuredRunRow]:
        """The measured runs (of one stack and accelerator family, or all), oldest first."""
        sql, args = "SELECT * FROM measured_runs", []
        where = [(c, v) for c, v in (("stack", stack), ("accelerator_family", accelerator_family)) if v is not None]
        if where:
            sql += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
            args = [v for _, v in where]
        return [MeasuredRunRow.from_row(r) for r in self._read(sql + " ORDER BY id", args)]


def job_document(job: "Job", cluster_spec: Any = None) -> dict[str, Any]:
    """``{model, cluster, train}`` as a measured run keeps its job: the model's mapping, the cluster as given (a
    preset name, a mapping; its ``to_dict`` where none is given) and the train spec with the stack resolved."""
    train = replace(job.train, framework=job.framework.name)
    doc = {k: getattr(train, k) for k in TRAIN_FIELDS}
    doc = {k: v for k, v in doc.items() if v is not None and not (k == "moe_imbalance" and v == 1.0)}
    return {"model": job.model.to_dict(), "cluster": cluster_spec if cluster_spec is not None else
            job.cluster.to_dict(), "train": doc}


def store_run(mem: "MeasuredRuns", job: "Job", doc: dict[str, Any], strategy: "Strategy", step_s: float,
              **provenance) -> int:
    """One measured run into ``mem`` (``add_measured_run``), its stack and machine read from ``job``."""
    acc = job.cluster.accelerator
    return mem.add_measured_run(stack=job.framework.name, accelerator=acc.name, accelerator_family=acc.family,
                                cluster_name=job.cluster.name, devices=job.devices, precision=job.train.precision,
                                job=doc, strategy=strategy.to_dict(), measured_step_time_s=step_s, **provenance)
