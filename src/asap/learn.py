"""``asap learn``: measured runs into the Sharding Memory, and the cost model corrected by them for a job.

In: a validation-case file (``learn_cases``: the format of ``shared/reference/*.json``, each case's open knobs
completed as ``asap validate`` completes them), or a stack's own config and training log (``learn_log``: the
step-time lines read by the stack's parser, ``asap.execute.logs``, the warm-up steps dropped, the median step and
its spread, the peak memory where the log prints it). Each run is stored with its job (model, cluster, train as
``asap.spec`` mappings), its complete strategy and where it came from (``asap.memory.runs``); the same run twice
is refused. Tune trials go in as they finish (``asap.agents.coordinator``).

Out: ``learned_for(job, memory)``, the job's cluster corrected by the measured runs of the same stack on the same
accelerator family (``asap.cost.learning``: a factor per term, shrunk toward the catalog; runs on the job's own
cluster, of a model of its size and at its scale weigh most). ``estimate``, ``plan``, ``compare``, ``propose``
and ``validate`` take ``--memory DB`` and price on that cluster; their JSON says ``learned_from`` (the runs' ids)
and ``corrections`` (term: factor).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

from asap.cost.learning import LEARN_TERMS, Learned, MeasuredRun, fit, fitted_terms, run_sigma
from asap.errors import AsapError
from asap.memory import DuplicateRun, Memory, MeasuredRunRow, job_document, store_run
from asap.spec.hardware import Cluster, cluster_from_dict, load_cluster
from asap.spec.job import Job
from asap.spec.model import model_from_dict
from asap.spec.strategy import Strategy, resolve_strategy
from asap.spec.train import TrainSpec


# --------------------------------------------------------------------------------------------------------
# A job as the Memory stores it, and back
# --------------------------------------------------------------------------------------------------------


def job_of(doc: dict[str, Any]) -> Job:
    spec = doc["cluster"]
    cluster = cluster_from_dict(spec) if isinstance(spec, dict) else load_cluster(str(spec))
    return Job.resolve(model_from_dict(doc["model"]), cluster, TrainSpec.from_dict(doc["train"]))


def strategy_of(job: Job, keys: dict[str, Any]) -> Strategy:
    return resolve_strategy(keys, job.model, job.train, job.devices, framework=job.framework)


# --------------------------------------------------------------------------------------------------------
# In: cases and logs
# --------------------------------------------------------------------------------------------------------


@dataclass
class Ingested:
    """What one ``asap learn`` stored (``added``: Memory ids with their source) and refused (reason each)."""

    added: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"added": self.added, "refused": self.refused}


def learn_cases(mem: Memory, path: str | Path) -> Ingested:
    """Every case of a validation-case file into ``mem``: its job, the completion of its stated knobs that
    trained (``asap.validate.completion_that_trained``) and its published step; a case already there is
    refused (named in ``refused``)."""
    from asap.validate import completion_that_trained, load_cases, published_step_time
    from asap.spec.strategy import parse_strategy

    out = Ingested()
    for i, case in enumerate(load_cases(path)):
        cid = str(case.get("id", f"cases[{i}]")) if isinstance(case, dict) else f"cases[{i}]"
        if not isinstance(case, dict):
            raise AsapError(f"cases[{i}]", "must be a mapping")
        try:
            doc = {"model": case["model"], "cluster": case["cluster"], "train": case["train"]}
            step = published_step_time(case.get("published"), cid)
        except KeyError as e:
            raise AsapError(cid, f"missing field {e}") from None
        job = job_of(doc)
        strategy = completion_that_trained(job, parse_strategy(case.get("strategy") or {},
                                                               field=f"{cid}.strategy")).best.strategy
        try:
            rid = store_run(mem, job, doc, strategy, step, source_kind="case", source_file=str(path),
                            source_ref=cid, measured_at=case.get("date"))
        except DuplicateRun as e:
            out.refused.append({"source_ref": cid, "reason": e.problem})
            continue
        out.added.append({"id": rid, "source_ref": cid, "measured_step_time_s": step})
    return out


@dataclass(frozen=True)
class LogSteps:
    """A training log's steps: the median after warm-up (s), its spread (the median absolute deviation, s), how
    many steps were kept, and the peak device memory the log printed (GiB, the largest; None if it prints none)."""

    step_time_s: float
    spread_s: float
    steps: int
    peak_memory_gb: float | None


def read_log(stack: str, text: str, job: Job, where: str) -> LogSteps:
    """The steps of ``stack``'s log ``text`` (``asap.execute.logs.parse_log``): the stack's warm-up steps
    dropped (all kept when no more remain), the median and its median absolute deviation. A text without one
    step line of the stack is refused in one line."""
    from asap.execute.logs import log_format, parse_log, peak_memory_gb

    fmt = log_format(stack)
    parsed = parse_log(stack, text, tokens_per_step=job.train.tokens_per_step, devices=job.devices)
    if not parsed.step_times_s:
        raise AsapError("log", f"{where} is not a {stack} training log (no step-time line like the stack prints)")
    times = parsed.step_times_s
    kept = times[fmt.warmup:] if len(times) > fmt.warmup else times
    median = statistics.median(kept)
    spread = statistics.median(abs(t - median) for t in kept)
    return LogSteps(median, spread, len(kept), peak_memory_gb(stack, text))


def learn_log(mem: Memory, job: Job, strategy: Strategy, log: str | Path, *, cluster_spec: Any = None,
              config: str = "") -> dict[str, Any]:
    """One training log of ``job`` run with ``strategy`` into ``mem``; what was stored."""
    path = Path(log)
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise AsapError("log", f"cannot read {log}: {e.strerror or e}") from None
    steps = read_log(job.framework.name, text, job, str(log))
    doc = job_document(job, cluster_spec)
    from datetime import datetime, timezone

    measured_at = datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).isoformat(timespec="seconds")
    rid = store_run(mem, job, doc, strategy, steps.step_time_s, source_kind="log", source_file=config,
                    source_ref=str(log), measured_at=measured_at, step_time_spread_s=steps.spread_s,
                    steps=steps.steps, peak_memory_gb=steps.peak_memory_gb)
    return {"id": rid, "source_ref": str(log), "measured_step_time_s": steps.step_time_s,
            "step_time_spread_s": steps.spread_s, "steps": steps.steps, "peak_memory_gb": steps.peak_memory_gb}


def cluster_spec_of(text: str | None) -> Any:
    """What ``--cluster`` names, as the Memory keeps it: a preset's name, or a file's mapping."""
    if text is None:
        return None
    from asap.spec.files import read_mapping

    return read_mapping(Path(text), "cluster") if Path(text).exists() else text


def learn_job_log(mem: Memory, config: str, log: str, cluster: str | None = None) -> dict[str, Any]:
    """``asap learn --job CONFIG --log LOG [--cluster C]``: the stack's config read (``asap.emit.read.read_job``)
    into the job and strategy, the log into its steps, one measured run stored."""
    from asap.emit.read import read_job
    spec = cluster_spec_of(cluster)
    read = read_job(Path(config), cluster=load_cluster(spec) if spec is not None else None)
    if read.cluster is None:
        raise AsapError("cluster", f"{config} does not state the cluster: name it with --cluster")
    train = read.train if read.framework is None else replace(read.train, framework=_framework_name(read.framework))
    job = Job.resolve(read.model, read.cluster, train)
    strategy = read.strategy if isinstance(read.strategy, Strategy) else strategy_of(job, dict(read.strategy))
    return learn_log(mem, job, strategy, log, cluster_spec=spec if spec is not None else _cluster_doc(read.cluster),
                     config=str(config))


def _framework_name(fw: Any) -> str:
    return str(getattr(fw, "name", fw))


def _cluster_doc(cluster: Cluster) -> dict[str, Any]:
    return cluster.to_dict()


# --------------------------------------------------------------------------------------------------------
# Out: the job corrected
# --------------------------------------------------------------------------------------------------------


def runs_for(rows: Iterable[MeasuredRunRow], job: Job) -> list[MeasuredRun]:
    """The rows of the job's stack and accelerator family as ``MeasuredRun``s weighted for ``job``
    (``asap.cost.learning.run_sigma``); a row whose job no longer reads is left out."""
    out = []
    for r in rows:
        if r.stack != job.framework.name or r.accelerator_family != job.cluster.accelerator.family:
            continue
        try:
            run_job = job_of(r.job)
            strategy = strategy_of(run_job, r.strategy)
        except AsapError:
            continue
        out.append(MeasuredRun(run_job, strategy, r.measured_step_time_s, run_sigma(run_job, job), r.id))
    return out


def fit_for(job: Job, runs: list[MeasuredRun], terms=LEARN_TERMS, records=None) -> Learned:
    """``asap.cost.learning.fit`` of ``runs`` for ``job``: the kernel terms whose catalog constants were fitted on
    the family's published runs of the job's precision classes narrowed (``fitted_terms``; ``records``: the runs
    that fit, default the shipped ones)."""
    family, precision = job.cluster.accelerator.family, job.train.precision
    return fit(runs, terms, fitted=fitted_terms(family, precision, records))


def learned_for(job: Job, memory: str | Path | Memory | None, terms=LEARN_TERMS) -> Learned:
    """The terms learned for ``job`` from the measured runs in ``memory`` (nothing: ``Learned()``)."""
    if memory is None:
        return Learned()
    if isinstance(memory, Memory):
        rows = memory.measured_runs(job.framework.name, job.cluster.accelerator.family)
    else:
        with Memory.open(memory) as mem:
            rows = mem.measured_runs(job.framework.name, job.cluster.accelerator.family)
    return fit_for(job, runs_for(rows, job), terms)


def learned_job(job: Job, memory: str | Path | Memory | None) -> tuple[Job, Learned]:
    """The job on its cluster corrected by what ``memory``'s runs teach, and what they taught."""
    learned = learned_for(job, memory)
    return learned.apply_job(job), learned


def learned_fields(learned: Learned) -> dict[str, Any]:
    """The JSON's ``learned_from`` (the runs' ids), ``corrections`` (term: factor, the terms that moved) and
    ``learned_spread`` (the runs' relative residuals after the correction, their standard deviation; None with
    fewer than two runs: what ``asap.cost.bands`` narrows the interval toward)."""
    return {"learned_from": list(learned.learned_from), "corrections": learned.corrections(),
            "learned_spread": learned.residual_spread}


def learned_text(learned: Learned) -> str:
    """One line for the human output: which runs corrected the model and by how much."""
    if not learned.learned_from:
        return "learned from no measured run (the catalog's constants)"
    moved = ", ".join(f"{t} x{f:.3f}" for t, f in learned.corrections().items()) or "nothing moved"
    ids = ", ".join(str(i) for i in learned.learned_from)
    return f"learned from measured run{'s' if len(learned.learned_from) > 1 else ''} {ids}: {moved} " \
           f"(a factor above 1: that part of the machine is slower than the catalog)"
