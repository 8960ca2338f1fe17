"""The Coordinator: Analyzer -> Proposer -> executor -> Memory, until the budget is spent or two trials in a row
bring less than ``MIN_GAIN``; it never re-runs a strategy Memory already has for the same job, and after
every measured trial it refits a per-run correction of the cost model (``Correction``) so that later
predictions close in on the machine being tuned.

The correction (``asap.agents.correction``) is three factors of the machine against the catalog (compute,
scale-up fabric, scale-out fabric), applied to the cost model's inputs and fitted to the trials so far as a
maximum a posteriori estimate, so that the planner and the proposer price every strategy on the corrected
machine. When the proposals are within the model's error, the loop runs the one that would narrow the factors
most.

With ``verify`` (``asap tune --verify-numerics``), every strategy measured after the first must also align
numerically with the first one's run (``asap.numerics.align.NumericsCheck``) before it counts: one that does
not is recorded as failed, with the first diverging operator as its reason, and is never adopted as best.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, cast

import numpy as np

from asap.agents.analyzer import Analysis, Analyzer
from asap.agents.correction import Correction, fit_correction, information_gain, sensitivities
from asap.agents.llm import LLMAdvisor
from asap.agents.proposer import Proposal, Proposer, parse_current
from asap.agents.workload import workload_record
from asap.cost.estimate import Estimate, estimate
from asap.errors import AsapError
from asap.measure import MIN_NOISE_REL, Verdict, gain_beyond_noise
from asap.memory import Memory
from asap.memory.rows import Trial
from asap.spec.job import Job
from asap.spec.outcome import Result, TrialExecutor
from asap.spec.strategy import Strategy, fit_strategy
from asap.spec.words import ENDED_STATUSES, TrialStatus


# (strategy, measured step s, noise) of the best ok trial so far
Best = tuple[Strategy, float, float | None]

N_CLOSE = 6  # the fastest candidates weighed by what they would teach when the model cannot tell them apart


def canon(strategy: Strategy) -> str:
    """Memory's spelling of a strategy (``Strategy.key``)."""
    return strategy.key()


@dataclass(frozen=True)
class Known:
    """A strategy Memory has for this job, run to an end: the strategy (parsed once, where the trial is read), its
    trial, how it ended and what it measured."""

    strategy: Strategy
    trial_id: int | None
    status: TrialStatus
    measured_step_time_s: float | None


MIN_GAIN = 0.02  # two trials in a row below this improvement (or within the noise) end the loop
PATIENCE = 2


@dataclass
class TrialRecord:
    strategy: Strategy
    status: TrialStatus  # ok | failed | skipped
    reason: str
    measured_step_time_s: float | None
    predicted_step_time_s: float | None
    catalog_step_time_s: float | None
    diagnosis: dict | None = None
    trial_id: int | None = None
    traces: list[str] = field(default_factory=list)
    # why it gained or lost against the best trial before it: the trace diff (asap diagnose --compare) when
    # both were profiled, else the cost model's term-by-term comparison (asap compare) of the two
    explanation: str = ""
    # the measurement (asap.measure): relative spread of the timed steps, the median's relative noise (0 for a
    # prediction), how many runs were pooled, the precision it trained in; and the verdict against the best
    measured_spread: float | None = None
    noise: float | None = None
    repeats: int = 1
    precision: str | None = None
    verdict: str = ""  # "+12.0% (beyond the noise floor 4.0%)" or "+1.0%: within noise (floor 4.0%): not adopted"
    adopted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy.to_dict(), "strategy_string": str(self.strategy), "status": self.status.value,
                "reason": self.reason, "measured_step_time_s": self.measured_step_time_s,
                "predicted_step_time_s": self.predicted_step_time_s,
                "catalog_step_time_s": self.catalog_step_time_s, "diagnosis": self.diagnosis,
                "trial_id": self.trial_id, "explanation": self.explanation,
                "measured_spread": self.measured_spread, "noise": self.noise, "repeats": self.repeats,
                "precision": self.precision, "verdict": self.verdict, "adopted": self.adopted}


def measurement_fields(res: Result) -> dict[str, Any]:
    """The TrialRecord fields of an executor's result (an ``asap.spec.outcome.Measurement``: its step statistics,
    read as attributes; the same figures ``Measurement.to_dict`` prints)."""
    if not res.ok:
        return {}
    stats = res.stats
    return {"measured_spread": stats.measured_spread if stats else None,
            "noise": stats.noise if stats else (0.0 if res.predicted else None),
            "repeats": (stats.repeats if stats else 1) or 1, "precision": res.precision}


def adopt(record: TrialRecord, best: Best | None) -> Verdict | None:
    """Whether ``record`` (an ok trial) becomes the best: the first always; a later one only when it is faster
    than the best ``(strategy, step s, noise)`` beyond both measurements' noise
    (``asap.measure.gain_beyond_noise``). Sets the record's ``adopted`` and ``verdict``; returns the verdict
    (None for the first)."""
    if best is None:
        record.adopted, record.verdict = True, "first measured trial"
        return None
    assert record.measured_step_time_s is not None  # adopt is only asked about ok trials, which are measured
    v = gain_beyond_noise(record.measured_step_time_s, record.noise, best[1], best[2])
    record.adopted = v.beyond_noise
    record.verdict = v.words() + ("" if v.beyond_noise else ": not adopted")
    return v


@dataclass
class Coordinator:
    job: Job  # its cluster: the catalog's (or calibrated) machine the loop's model starts from
    executor: TrialExecutor  # an asap.execute.base.Executor
    memory: Memory  # its trials come back typed (asap.memory.Trial)
    budget: int
    start: str | dict | None = None
    on_trial: Callable[[TrialRecord, "Coordinator"], None] | None = None
    llm: LLMAdvisor | None = None  # for the proposer, optional
    # --verify-numerics: verify(first ok trial's strategy, new strategy) -> None if they align, else the reason
    # (asap.numerics.align.NumericsCheck); a new strategy that does not align is recorded failed, never best
    verify: Callable[[Strategy, Strategy], str | None] | None = None
    trials: list[TrialRecord] = field(default_factory=list)
    correction: Correction = field(default_factory=Correction)
    # (strategy, measured step time s) of every ok trial the correction is fitted to, Memory's earlier ones too
    pairs: list[tuple[Strategy, float]] = field(default_factory=list)
    # (strategy, measured step s, noise) of the best trial when ``run`` ended (Memory's earlier ones too)
    best: Best | None = field(default=None, init=False)
    _given: Strategy | None = field(default=None, init=False, repr=False)  # ``start`` parsed, once (``given``)

    def corrected(self) -> Job:
        """The job on the machine as the correction fitted so far sees it."""
        return replace(self.job, cluster=self.correction.apply(self.job.cluster))

    def run(self) -> dict[str, Any]:
        workload = {**workload_record(self.job), "machine": self.executor.machine}
        ran = self.executor.run_precision()
        if ran:  # what the trials train in (fp32 on CPU processes), not what the job asked for
            workload["precision"] = ran
        exp = self.memory.experiment(workload)
        known = self._known(exp)
        self.pairs = self._known_pairs(known)
        self.correction = self._fit(self.pairs)
        current: Strategy | None = self._start()
        best = self._best_known(known)
        stall, executed = 0, 0
        while executed < self.budget:
            strategy, diagnosis, considered = self._next(current if not self.trials else None, best, known)
            if strategy is None:
                break
            key = canon(strategy)
            if key in known:
                self._record_skip(strategy, known[key])
                current = None
                continue
            record = self._trial(exp, strategy, diagnosis, considered)
            executed += 1
            known[key] = Known(strategy, record.trial_id, record.status, record.measured_step_time_s)
            if record.status == TrialStatus.OK:
                assert record.measured_step_time_s is not None  # an ok trial has its measured step time
                self.pairs.append((strategy, record.measured_step_time_s))
                self.correction = self._fit(self.pairs)
                v = adopt(record, best)
                stall = stall + 1 if v is not None and (v.gain < MIN_GAIN or not v.beyond_noise) else 0
                if record.adopted:
                    best = (strategy, record.measured_step_time_s, record.noise)
            else:
                stall += 1
            if stall >= PATIENCE:
                break
        self.best = best
        return self.result(best)

    def _start(self) -> Strategy:
        """The given start, else the planner's fastest strategy the executor can run (on the loop's model):
        no trial spent on a default that the cost model already knows does not fit."""
        if self.start:
            return self.given()
        from asap.search.nofit import NoFitError
        from asap.search.planner import plan

        try:
            rows = plan(self.corrected(), top=20, split_candidates=0).candidates
        except NoFitError:
            rows = []
        runnable = [e.strategy for e in rows if not self._refused(e.strategy)]
        return runnable[0] if runnable else self.given()

    def given(self) -> Strategy:
        """The given start (the defaults completed where none was given), parsed the first time it is asked for."""
        if self._given is None:
            self._given = parse_current(self.start, self.job)
        return self._given

    def _refused(self, strategy: Strategy) -> str | None:
        return self.executor.refuses(strategy)

    def _next(self, first: Strategy | None, best: Best | None,
              known: dict[str, Known]) -> tuple[Strategy | None, Analysis | None, list]:
        """The first trial runs the start; every later one the fastest untried of the proposals and the planner's
        best (by information gain among the fastest when the proposals are within the model's error)."""
        if first is not None:
            return first, None, []
        base = best[0] if best else self.given()
        job = self.corrected()
        diagnosis = Analyzer(job.cluster).analyze(estimate(job, base))
        proposer = Proposer(job, self.memory, llm=self.llm)
        ps = proposer.propose(base, diagnosis, exclude=self._tried_strings(known))
        # the loop's aim is the fastest measured step: the three proposals (moves to reason about) and the
        # planner's best on the corrected machine compete, priced alike; when the proposer finds the current
        # strategy within the model's error of them all, the one that teaches the correction most runs first
        pool = [p.strategy for p in ps.proposals] + proposer._planner_best(top=30)
        fresh: dict[str, tuple[float, Strategy]] = {}
        for s in pool:
            if canon(s) not in known and not self._refused(s) and canon(s) not in fresh:
                fresh[canon(s)] = (proposer.price(s).step_time_s, s)
        ranked = [s for _, s in sorted(fresh.values(), key=lambda x: x[0])]
        if not ranked:
            return None, diagnosis, ps.considered
        close = ranked[:N_CLOSE] if ps.within_error else ranked[:1]
        if len(close) > 1:
            gains = self._information_gains(close)
            close = [s for _, s in sorted(zip(gains, close, strict=True), key=lambda gs: -gs[0])]
        return close[0], diagnosis, ps.considered

    def _information_gains(self, candidates: list[Strategy]) -> list[float]:
        """What measuring each candidate would teach the correction: its information gain over the factors'
        posterior from the trials fitted so far (``asap.agents.correction.information_gain``)."""
        x = np.log(self.correction.factors)
        measured = sensitivities(self.job, [s for s, _ in self.pairs], x)
        rows = sensitivities(self.job, candidates, x)
        return [information_gain(measured, g) for g in rows]

    def _fit(self, pairs: list[tuple[Strategy, float]]) -> Correction:
        return fit_correction(self.job, pairs)

    @staticmethod
    def _tried_strings(known: dict[str, Known]) -> set[str]:
        """The full strategy strings (the proposer's spelling) of what Memory has."""
        return {str(k.strategy) for k in known.values()}

    def _trial(self, exp: int, strategy: Strategy, diagnosis: Analysis | None, considered: list) -> TrialRecord:
        catalog = estimate(self.job, strategy)
        predicted = estimate(self.corrected(), strategy)
        diag = diagnosis.to_dict() if diagnosis else None
        tid = self.memory.begin_trial(exp, canon(strategy), predicted.step_time_s, self.executor.name, diag)
        self.memory.log(exp, "proposer", "candidates", inputs={"diagnosis": diag}, candidates=considered,
                        outputs={"chosen": str(strategy)}, trial_id=tid)
        res = self.executor.run(strategy)
        # what the run itself said: its step times, losses, log (tail and path), traces, or why it failed
        self.memory.log(exp, "executor", "result", inputs={"strategy": str(strategy)}, outputs=res.to_dict(),
                        trial_id=tid)
        measured = res.step_time_s if res.ok else None
        reason = (self._verify_numerics(strategy) if res.ok else res.reason) or ""
        status = TrialStatus.OK if res.ok and not reason else TrialStatus.FAILED
        self.memory.finish_trial(tid, status, measured_step_time_s=measured, reason=reason,
                                 diagnosis=diag, traces=list(getattr(res, "traces", []) or []))
        if status == TrialStatus.OK and measured is not None:
            self._remember_run(tid, strategy, measured)
        self.memory.log(exp, "coordinator", "trial", inputs={"strategy": str(strategy)},
                        outputs={"status": status.value, "measured_step_time_s": measured,
                                 "correction": self.correction.to_dict()}, trial_id=tid)
        record = TrialRecord(strategy, status, reason, measured, predicted.step_time_s,
                             catalog.step_time_s, diag, tid, traces=list(getattr(res, "traces", []) or []),
                             **measurement_fields(res))
        if status == TrialStatus.OK:
            record.explanation = self._explain(record, predicted)
            if record.explanation:
                self.memory.log(exp, "coordinator", "explanation", inputs={"strategy": str(strategy)},
                                outputs={"explanation": record.explanation}, trial_id=tid)
        self.trials.append(record)
        if self.on_trial:
            self.on_trial(record, self)
        return record

    def _remember_run(self, tid: int, strategy: Strategy, measured: float) -> None:
        """An ok trial is a measured run too (``asap.memory.runs``): ``asap learn``'s runs and the loop's trials feed
        the same correction (``asap.cost.learning``). The same step measured twice is kept once."""
        from asap.memory import DuplicateRun, job_document, store_run

        try:
            store_run(self.memory, self.job, job_document(self.job), strategy, measured, source_kind="trial",
                      source_ref=f"trial {tid} ({self.executor.name})", trial_id=tid)
        except DuplicateRun:
            pass

    def _explain(self, record: TrialRecord, predicted: Estimate) -> str:
        """Why ``record`` gained or lost against the fastest ok trial before it: the two runs' traces compared
        (``asap.profile.trace_diff``) when both have them, else the cost model's comparison of the two
        (``predicted``: the record's own pricing on the corrected machine, from ``_trial``)."""
        done = [t for t in self.trials if t.status == TrialStatus.OK and t.measured_step_time_s]
        if not done:
            return ""
        ref = min(done, key=lambda t: cast(float, t.measured_step_time_s))  # done: measured trials only
        # record: an ok trial (``_trial`` explains only those), measured; ref: one of done
        assert record.measured_step_time_s is not None and ref.measured_step_time_s is not None
        change = record.measured_step_time_s / ref.measured_step_time_s - 1.0
        head = f"measured {change:+.1%} against trial {self.trials.index(ref) + 1}"
        if record.traces and ref.traces:
            from asap.profile.trace_diff import compare_traces

            try:
                return f"{head}; traces: {compare_traces(ref.traces, record.traces)['verdict']}"
            except AsapError:
                pass  # unreadable traces: the cost model's view below
        from asap.compare import verdict

        a = estimate(self.corrected(), ref.strategy)
        return f"{head}; the cost model (corrected) predicted: {verdict(a, predicted, 'the reference', 'this trial')}"

    def _verify_numerics(self, strategy: Strategy) -> str | None:
        """None when numerics are not verified, when this is the first ok trial (the reference), or when the
        strategy aligns with the reference; else the reason it does not."""
        reference = next((t.strategy for t in self.trials if t.status == TrialStatus.OK), None)
        if self.verify is None or reference is None:
            return None
        return self.verify(reference, strategy)

    def _record_skip(self, strategy: Strategy, known: Known) -> None:
        trial = "?" if known.trial_id is None else known.trial_id
        record = TrialRecord(strategy, TrialStatus.SKIPPED, f"already in memory (trial {trial})",
                             known.measured_step_time_s, None, None)
        self.trials.append(record)
        if self.on_trial:
            self.on_trial(record, self)

    def _known(self, exp: int) -> dict[str, Known]:
        """What Memory has for this job, run to an end, under Memory's canonical spelling of each strategy (the
        last trial of a strategy standing for it), each strategy as Memory completed it, fitted to the job once."""
        ended = {t.strategy_string: t for t in self.memory.trials(exp) if t.status in ENDED_STATUSES}
        return {text: Known(self._job_strategy(t), t.id, t.status, t.measured_step_time_s)
                for text, t in ended.items()}

    def _job_strategy(self, t: Trial) -> Strategy:
        """A remembered trial's strategy (Memory completed it on the experiment's devices and framework, this
        job's) made this model's and checked; text only where Memory could not complete it (the error it gives)."""
        job = self.job
        if t.strategy is None:
            return parse_current(t.strategy_string, job)
        return fit_strategy(t.strategy, job.model, job.train, job.devices, framework=job.framework)

    @staticmethod
    def _known_pairs(known: dict[str, Known]) -> list[tuple[Strategy, float]]:
        """Memory's ok trials with their measured step times."""
        return [(k.strategy, k.measured_step_time_s) for k in known.values()
                if k.status == TrialStatus.OK and k.measured_step_time_s]

    def _best_known(self, known: dict[str, Known]) -> Best | None:
        ok = [(k.strategy, k.measured_step_time_s) for k in known.values()
              if k.status == TrialStatus.OK and k.measured_step_time_s]
        if not ok:
            return None
        strategy, step = min(ok, key=lambda x: x[1])
        noise = 0.0 if self.executor.name == "sim" else MIN_NOISE_REL  # Memory keeps no spread
        return strategy, step, noise

    def result(self, best: Best | None) -> dict[str, Any]:
        return {"trials": [t.to_dict() for t in self.trials],
                "best": {"strategy": best[0].to_dict(), "strategy_string": str(best[0]),
                         "measured_step_time_s": best[1]} if best else None,
                "correction": self.correction.to_dict()}


@dataclass
class AfterBest:
    """What the loop's report shows past its trials: the best strategy priced on the corrected machine, and the
    next moves from it (the Analyzer's reading of that estimate, the Proposer's proposals, none already tried)."""

    estimate: Estimate
    proposals: list[Proposal]


def after_best(coord: Coordinator, memory: Memory) -> AfterBest | None:
    """The best trial's estimate and next proposals on the corrected machine (None before any trial measured)."""
    if not coord.best:
        return None
    corrected = coord.corrected()
    est = estimate(corrected, coord.best[0])
    diagnosis = Analyzer(corrected.cluster).analyze(est)
    tried = {str(rec.strategy) for rec in coord.trials}
    return AfterBest(est, Proposer(corrected, memory).propose(coord.best[0], diagnosis, exclude=tried).proposals)
