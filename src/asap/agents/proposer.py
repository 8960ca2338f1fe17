"""The Proposer: targeted moves from the diagnosis. For each class worth attacking (``Analysis.targets``: the
seconds each would save, memory capacity first where it binds) it retrieves the knowledge entries that answer
that class and apply to the job (family, model kind, framework), applies their ``moves`` to the current strategy
with only the dependent changes (``asap.agents.moves``), and adds one-knob neighbours, the strategies that worked
on Memory's similar jobs, the LLM's candidates (``--llm``) and the planner's best. Every one is priced by the cost
model; one that does not fit, moves more than ``MAX_KNOBS`` knobs besides dp, or changes nothing is dropped into
the audit trail with the reason.

Exactly three proposals of three kinds: each attacks the diagnosis through a different entry or term and moves
a different set of knobs; at least two follow a knowledge entry where two apply and help. The planner's best is
offered as a "re-plan", at most one of the three, only when it beats the best targeted move by more than the
model's error (``model_error``: the family's held-out MAPE). When the current strategy fits and no
proposal is faster by more than the model's error, the proposer says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from asap.agents.analyzer import Analysis
from asap.agents.choice import (MIN_SPEEDUP, N_PROPOSALS, Candidate, attacked_class, choose, distinct_move,
                                keep_rank, not_proposable, term_cut_s)
from asap.agents.moves import (MAX_KNOBS, justifying_lines, moved_knobs,
                               moved_strategy, moves_text, tradeoffs)
from asap.agents.neighbourhood import Neighbourhood
from asap.agents.precondition import variables
from asap.agents.workload import job_arguments, workload_record
from asap.compare import deltas
from asap.cost.bands import speedup_interval
from asap.cost.estimate import Estimate, estimate
from asap.errors import AsapError
from asap.spec.job import Job
from asap.spec.strategy import Strategy, resolve_strategy
from asap.spec.stack_rules import RuleJob, first_unrunnable
from asap.spec.words import BottleneckClass, ClassSaving

if TYPE_CHECKING:
    from asap.agents.knowledge import KnowledgeEntry
    from asap.memory import Memory


def model_error(family: str) -> float:
    """The model's error for comparing two strategies of one job: the family's held-out MAPE on the calibration
    runs (asap/data/error_bands.json), or the MAPE pooled over all families where the family has fewer than 5."""
    from asap.cost.estimate import error_bands

    fams = error_bands()["families"]
    own = fams.get(family)
    if own and own.get("n", 0) >= 5:
        return float(own["held_out_mape"])
    n = sum(f.get("n", 0) for f in fams.values())
    return sum(f.get("n", 0) * f["held_out_mape"] for f in fams.values()) / max(n, 1)


ENTRIES_PER_CLASS = 6  # entries retrieved per class attacked
CLASSES_ATTACKED = 4  # the largest classes of the diagnosis
FIT_MOVES = 4  # memory moves joined with a time move where the current strategy does not fit
STAGE_BALANCE_ENTRY = "pipeline-stage-balancing"  # the knowledge entry a layer-split move follows


@dataclass
class Proposal:
    strategy: Strategy
    rationale: str
    expected_speedup: float
    expected_speedup_range: tuple[float, float]
    predicted_step_time_s: float
    predicted_step_time_range_s: tuple[float, float]
    tradeoffs: list[str]
    evidence: list[str]
    fits: bool
    source: str
    kind: str = "targeted"  # targeted | re-plan | none (no further move predicted faster: the current strategy)
    attacks: str = ""  # the figure it attacks: "tp_comm exposed 4.1 s of 36.8 s"
    attacks_class: str = ""
    knobs: list[str] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)  # {id, title, lines, sources}
    term_changes_s: dict[str, float] = field(default_factory=dict)  # as compare's deltas_s: new - current
    similar_trials: list[dict[str, Any]] = field(default_factory=list)
    estimate_command: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy.to_dict(), "strategy_string": str(self.strategy),
                "rationale": self.rationale, "expected_speedup": self.expected_speedup,
                "expected_speedup_range": list(self.expected_speedup_range),
                "predicted_step_time_s": self.predicted_step_time_s,
                "predicted_step_time_range_s": list(self.predicted_step_time_range_s), "tradeoffs": self.tradeoffs,
                "evidence": self.evidence, "fits": self.fits, "source": self.source, "kind": self.kind,
                "attacks": self.attacks, "attacks_class": self.attacks_class, "knobs": self.knobs,
                "entries": self.entries, "term_changes_s": self.term_changes_s,
                "similar_trials": self.similar_trials, "estimate_command": self.estimate_command}


@dataclass
class ProposalSet:
    proposals: list[Proposal]
    within_error: bool
    note: str
    considered: list[dict[str, Any]]  # every candidate and why it was kept or dropped (the audit trail)


class Proposer(Neighbourhood):
    def __init__(self, job: Job, memory: Memory | None = None, experiment_id=None, llm=None, job_args: str | None = None):
        self.job = job
        self.model, self.cluster, self.train = job.model, job.cluster, job.train
        self.memory, self.experiment_id = memory, experiment_id
        self.llm = llm  # an asap.agents.llm.LLMAdvisor: more candidates and a narrative, checked like the rest
        self.job_args = job_args or job_arguments(job)
        self.narrative = ""
        self._knowledge: list[KnowledgeEntry] | None = None  # the knowledge base, loaded once, for citations
        self.llm_fallback: str | None = None  # why the LLM added nothing, when it was asked and answered badly
        self.rationales: dict[str, str] = {}  # the LLM's rewritten rationales, by strategy string
        self.base: Estimate | None = None  # the current strategy's estimate while proposing
        self.state: dict[str, Any] = {}  # the current strategy and job as preconditions read them
        self._planned: list[Strategy] | None = None
        # resolved and priced once per proposer: the moves, similar jobs and the planner often name one strategy
        self._resolved: dict[str, Strategy | AsapError] = {}
        self._estimates: dict[Strategy, Estimate] = {}
        self._rule_job = RuleJob.of(job)  # what the stack's rules read besides the strategy

    @property
    def moe(self) -> bool:
        return self.model.moe is not None

    @property
    def knowledge(self) -> list[KnowledgeEntry]:
        """The knowledge base, loaded once (for citations)."""
        from asap.agents.knowledge import load_knowledge

        if self._knowledge is None:
            self._knowledge = load_knowledge()
        return self._knowledge

    @property
    def usable_gb(self) -> float:
        """The peak a strategy may reach and fit (``asap.cost.device_memory.usable_hbm_gb``: the device's less the margin)."""
        from asap.cost.device_memory import usable_hbm_gb

        return usable_hbm_gb(self.cluster.accelerator, self.train)

    def workload(self) -> dict[str, Any]:
        fam = self.cluster.accelerator.family
        return {"family": fam, "model_kind": "moe" if self.model.moe is not None else "dense",
                "long_context": self.train.seq_len >= 32768, "mla": self.model.mla is not None,
                "framework": self.job.framework.name, "devices": self.cluster.num_devices}

    @property
    def priced_base(self) -> Estimate:
        """The current strategy's estimate: ``propose`` prices it before any candidate is made or priced."""
        assert self.base is not None, "priced_base read outside propose"
        return self.base

    def price(self, strategy: Strategy) -> Estimate:
        """The strategy's estimate (without the bottleneck classes), priced once per proposer."""
        if strategy not in self._estimates:
            self._estimates[strategy] = estimate(self.job, strategy, classes=False)
        return self._estimates[strategy]

    def resolve(self, spelled: str | dict) -> Strategy:
        """A candidate as written (a move's keys, the LLM's text, a similar job's trial): the edge where it is
        parsed, completed with this job's defaults and checked, the stack's rules included (what ``estimate``
        and ``emit`` refuse is never proposed; once per spelling; a broken one raises its AsapError each time)."""
        key = spelled if isinstance(spelled, str) else repr(sorted(spelled.items()))
        if key not in self._resolved:
            try:
                s = resolve_strategy(spelled, self.model, self.train, self.job.devices, framework=self.job.framework)
                self._resolved[key] = first_unrunnable(s, self.job.framework.name, self._rule_job) or s
            except AsapError as e:
                self._resolved[key] = e
        found = self._resolved[key]
        if isinstance(found, AsapError):
            raise found
        return found

    def candidates(self, current: Strategy, diagnosis: Analysis, considered: list) -> list[Candidate]:
        from asap.agents.retrieval import retrieve

        out: list[Candidate] = []
        devices = self.cluster.num_devices
        targets = diagnosis.targets()[:CLASSES_ATTACKED]
        minor = [c for c in diagnosis.classes if c not in targets and c.saving_s > 0]
        for target in targets + minor:
            for r in retrieve(target.cls.value, self.workload(), k=ENTRIES_PER_CLASS, strict=True,
                              state=self.state):
                for move in r.entry.moves:
                    self._add(out, considered, moved_strategy(current, move, devices, self.moe), "knowledge",
                              r.entry.title, [f"knowledge:{r.entry.id}"], entry=r.entry, target=target)
        self._layer_split(current, targets, out, considered)
        if not self.priced_base.fits:
            self._memory_combinations(current, targets, out, considered)
        self._neighbourhood(current, targets, out, considered)
        for strategy, why, ev in self._memory_candidates(current):
            self._add(out, considered, strategy, "memory", why, ev, target=None)
        for s in self._planner_best():
            self._add(out, considered, s.to_dict(), "planner", "re-plan: the planner's best for this job",
                      ["planner:top"], target=None)
        if self.llm is not None:
            self._llm_candidates(current, diagnosis, out, considered)
        for c in out:
            if c.target is None:
                c.target = attacked_class(c, self.priced_base, targets)
        return out

    def _layer_split(self, current: Strategy, targets: list[ClassSaving], out: list, considered: list) -> None:
        """Stage imbalance's own move, always considered where it is named: the layer split the planner's stage
        split finds for the current strategy (``asap.search.planner.stage_split``), priced like every candidate,
        following the stage-balancing entry when the knowledge base has it."""
        target = next((t for t in targets if t.cls == BottleneckClass.STAGE_IMBALANCE), None)
        if target is None or current.pp < 2:
            return
        from asap.agents.knowledge import load_knowledge
        from asap.search.planner import stage_split

        try:
            split = stage_split(self.job, current)
            layers = tuple(split["layers_per_stage"]) if split.get("adopted") else ()
        except AsapError as e:
            considered.append({"strategy": "", "source": "knowledge", "kept": False, "why": f"stage split: {e}"})
            return
        if not layers or layers == tuple(current.layer_split or ()):
            return
        entry = next((e for e in load_knowledge() if e.id == STAGE_BALANCE_ENTRY), None)
        split_text = "/".join(map(str, layers))
        self._add(out, considered, {**current.to_dict(), "layer_split": split_text}, "knowledge",
                  f"the planner's layer split {split_text} (asap plan's stage split on this strategy)",
                  [f"knowledge:{entry.id}"] if entry else ["planner:stage-ilp"], entry=entry, target=target)

    def _memory_combinations(self, current: Strategy, targets: list[ClassSaving], out: list,
                             considered: list) -> None:
        """A strategy that does not fit by far: the memory entries' moves, scaled (x2 -> x4, x8) and two of
        different entries together, at most ``MAX_KNOBS`` knobs; each follows the first entry's move."""
        from asap.agents.retrieval import retrieve

        target = next((t for t in targets if t.cls == BottleneckClass.MEMORY_CAPACITY), None)
        if target is None:
            return
        moves = [(r.entry, m) for r in retrieve(BottleneckClass.MEMORY_CAPACITY, self.workload(), k=ENTRIES_PER_CLASS,
                                                strict=True, state=self.state) for m in r.entry.moves]
        scaled = [(e, {k: op.replace("x2", f"x{f}") for k, op in m.items()}) for e, m in moves
                  if any(op == "x2" for op in m.values()) for f in (4, 8)]
        pool = moves + scaled
        for i, (e1, m1) in enumerate(pool):
            for e2, m2 in pool[i + 1:] + [(None, {})]:
                if e2 is e1 or set(m1) & set(m2) or len(set(m1) | set(m2) - {"dp"}) > MAX_KNOBS:
                    continue
                ev = [f"knowledge:{e1.id}"] + ([f"knowledge:{e2.id}"] if e2 is not None else [])
                title = e1.title + (f" + {e2.title}" if e2 is not None else "")
                self._add(out, considered, moved_strategy(current, {**m1, **m2}, self.cluster.num_devices, self.moe),
                          "knowledge", title, ev, entry=e1, target=target)
        self._time_moves_that_fit(current, targets, pool, out, considered)

    def _time_moves_that_fit(self, current: Strategy, targets: list[ClassSaving], pool: list, out: list,
                             considered: list) -> None:
        """Where the strategy does not fit: each move against a time class (a dispatcher, an overlap, a schedule)
        joined with one of the ``FIT_MOVES`` memory moves that free the most memory alone, so the move an expert
        would make for the time is offered in a strategy that fits."""
        from asap.agents.retrieval import retrieve

        devices = self.cluster.num_devices
        freed = []
        for e, m in pool:
            s = moved_strategy(current, m, devices, self.moe)
            try:
                freed.append((self.price(self.resolve(s)).peak_memory_gb, e.id, e, m)) if s is not None else None
            except AsapError:
                continue
        fixes = [(e, m) for _, _, e, m in sorted(freed, key=lambda x: x[:2])[:FIT_MOVES]]
        for target in [t for t in targets if t.cls != BottleneckClass.MEMORY_CAPACITY][:2]:
            for r in retrieve(target.cls.value, self.workload(), k=3, strict=True, state=self.state):
                for move in r.entry.moves:
                    for e2, fix in fixes:
                        joined = {**fix, **move}
                        if set(move) & set(fix) or len(set(joined) - {"dp"}) > MAX_KNOBS:
                            continue
                        self._add(out, considered, moved_strategy(current, joined, devices, self.moe), "knowledge",
                                  f"{r.entry.title}, with {e2.title.split(' - ')[0].lower()} to fit",
                                  [f"knowledge:{r.entry.id}", f"knowledge:{e2.id}"], entry=r.entry, target=target)

    def _memory_candidates(self, current: Strategy) -> list[tuple[dict, str, list[str]]]:
        """What worked on Memory's similar jobs: each similar experiment's fastest measured trial."""
        if self.memory is None:
            return []
        out = []
        for exp, score in self.memory.similar_experiments(self.workload_record(), k=3):
            ok = [t for t in self.memory.trials(exp.id) if t.measured_step_time_s and t.keys]
            if ok:
                best = min(ok, key=lambda t: t.measured_step_time_s or 0.0)  # ok: measured ones
                layout = {k: v for k, v in best.keys.items() if k not in ("dp", "layer_split")}
                out.append((layout, f"what worked on a similar job (experiment {exp.id}, "
                                              f"similarity {score:.2f})", [f"memory:trial{best.id}"]))
        return out

    def _llm_candidates(self, current: Strategy, diagnosis: Analysis, out: list, considered: list) -> None:
        """The LLM sees the diagnosis, the retrieved entries and the priced candidates; its candidates are parsed
        against its schema and priced like any other, its rationales may replace ours; a failure or a refusal
        leaves the deterministic candidates as they are."""
        priced = sorted(out, key=lambda c: c.step_s)[:8]
        context = {"model": self.model.name, "cluster": f"{self.cluster.num_devices} x {self.cluster.accelerator.name}",
                   "global_batch": self.train.global_batch, "seq_len": self.train.seq_len,
                   "current": current.to_dict(), "diagnosis": diagnosis.to_dict(),
                   "retrieved": sorted({c.entry.id for c in out if c.entry is not None}),
                   "candidates": [{"strategy": str(c.strategy), "predicted_step_time_s": c.step_s,
                                   "source": c.source, "why": c.why} for c in priced],
                   "best_so_far": [str(c.strategy) for c in priced[:5]]}
        advice = self.llm.advise(context)
        self.llm_fallback = advice.fallback()
        for reason in advice.dropped:
            considered.append({"strategy": "", "source": "llm", "kept": False, "why": reason})
        if advice.error:
            considered.append({"strategy": "", "source": "llm", "kept": False, "why": advice.error})
        known = {str(c.strategy) for c in out}
        for strategy, rationale in advice.candidates:
            try:
                text = str(self.price(self.resolve(strategy)).strategy)
            except AsapError:
                text = None
            if text in known:  # a candidate we have: the LLM rewrites its rationale
                self.rationales[text] = rationale
                considered.append({"strategy": text, "source": "llm", "kept": True,
                                   "why": "the LLM's rationale for a candidate already priced"})
                continue
            self._add(out, considered, strategy, "llm", f"LLM: {rationale}", ["llm"], target=None)
        self.narrative = advice.narrative

    def _fill(self, chosen: list[Candidate], skip: set[str], targets: list[ClassSaving], considered: list) -> list:
        """Fewer than three moves are proposable: the planner's next best (other knobs) that are, one re-plan
        at most (design.md's three); a slot still empty is a "none" proposal (``propose``)."""
        replans: list[Candidate] = []
        for s in self._planner_best(top=30)[1:]:
            self._add(replans, considered, s.to_dict(), "planner", "re-plan: one of the planner's best (too few "
                                                                    "targeted moves are priced faster)", ["planner:top"])
        base = self.priced_base
        for r in sorted(replans, key=lambda c: c.step_s):
            if (len(chosen) < N_PROPOSALS and all(c.source != "planner" for c in chosen)
                    and str(r.strategy) not in skip and not_proposable(r, base, targets, self.cluster.hbm_gb) is None
                    and distinct_move(r, chosen)):
                r.target = attacked_class(r, base, targets)
                chosen.append(r)
        return sorted(chosen, key=lambda c: c.step_s)

    def _planner_best(self, top: int = 1) -> list[Strategy]:
        """The planner's ``top`` best (its 30 best computed once per proposer: the re-plan and the fill)."""
        from asap.search import nofit, planner

        if self._planned is None:
            try:
                # with the planner's layer split search, as ``asap plan`` ranks: its best often needs a split
                self._planned = [c.strategy for c in planner.plan(self.job, top=30).candidates]
            except nofit.NoFitError:
                self._planned = []
        return self._planned[:top]

    def _add(self, out: list, considered: list, strategy: dict | str | None, source: str, why: str, evidence: list,
             entry=None, target=None):
        if strategy is None:
            return
        text = strategy if isinstance(strategy, str) else ",".join(f"{k}={v}" for k, v in strategy.items() if v is not None)
        try:
            est = self.price(self.resolve(strategy))
        except AsapError as e:
            considered.append({"strategy": text, "source": source, "kept": False, "why": str(e)})
            return
        reason = self._drop_reason(est, source)
        if reason:
            considered.append({"strategy": str(est.strategy), "source": source, "kept": False, "why": reason})
            return
        knobs = frozenset(moved_knobs(est.strategy, self.priced_base.strategy))
        out.append(Candidate(est.strategy, est, source, why, evidence, entry, target, knobs))

    def _drop_reason(self, est: Estimate, source: str) -> str | None:
        base = self.priced_base
        if (est.step_time_s, est.peak_memory_gb) == (base.step_time_s, base.peak_memory_gb):
            return "changes nothing the cost model sees (a knob without effect here)"
        if not est.fits:
            return f"does not fit: {est.peak_memory_gb:.1f} GiB reserved > {self.usable_gb:.4g} GiB usable"
        knobs = moved_knobs(est.strategy, base.strategy)
        if source != "planner" and len(knobs) > MAX_KNOBS:
            return f"moves {len(knobs)} knobs besides dp ({', '.join(knobs)}): more than {MAX_KNOBS}"
        return None

    def workload_record(self) -> dict[str, Any]:
        return workload_record(self.job)

    def propose(self, current: Strategy, diagnosis: Analysis, exclude: Iterable[str] = ()) -> ProposalSet:
        """Exactly three proposals for moving on from ``current`` (``exclude``: strategy strings already tried):
        the moves that attack a named class and are priced faster beyond the band, and for each slot no move
        fills honestly a proposal of kind "none" (the current strategy: no further move predicted faster)."""
        considered: list[dict[str, Any]] = []
        self.base = base = self.price(current)
        self.state = variables(self.job, current)
        skip = set(exclude) | {str(base.strategy)}
        unique = self._unique(self.candidates(current, diagnosis, considered), skip, considered)
        targets = diagnosis.targets()
        proposable: list[Candidate] = []
        for c in unique.values():
            reason = not_proposable(c, base, targets, self.cluster.hbm_gb)
            if reason is None:
                keep = c.target is not None and (term_cut_s(c.estimate, base, c.target.cls) > 0
                                                 or c.target.cls == BottleneckClass.MEMORY_CAPACITY)
                c.target = c.target if keep else attacked_class(c, base, targets)
                proposable.append(c)
            else:
                considered.append({"strategy": str(c.strategy), "source": c.source, "kept": False, "why": reason})
        err = model_error(self.cluster.accelerator.family)
        chosen = choose(proposable, base, err, diagnosis.bottleneck_class)
        if len(chosen) < N_PROPOSALS:  # too few moves: one of the planner's next best (a re-plan) where it is one
            chosen = self._fill(chosen, skip, targets, considered)
        for c in proposable:
            considered.append({"strategy": str(c.strategy), "source": c.source, "kept": c in chosen,
                               "why": "proposed" if c in chosen else "a faster candidate moves the same knobs "
                                                                     "or follows the same entry"})
        proposals = [self._proposal(c, base, diagnosis) for c in chosen]
        proposals += [self._no_move(base, diagnosis) for _ in range(N_PROPOSALS - len(proposals))]
        within, note = self._note(base, chosen, len(proposable), err)
        return ProposalSet(proposals, within, note, considered)

    def _unique(self, cands: list[Candidate], skip: set[str], considered: list) -> dict[str, Candidate]:
        """One candidate per strategy (knowledge first, ``keep_rank``), none already tried."""
        unique: dict[str, Candidate] = {}
        for c in cands:
            key = str(c.strategy)
            if key in skip:
                considered.append({"strategy": key, "source": c.source, "kept": False, "why": "already tried"})
            elif key not in unique or keep_rank(c) < keep_rank(unique[key]):
                if key in unique:
                    considered.append({"strategy": key, "source": unique[key].source, "kept": False,
                                       "why": f"the same strategy as a {c.source} candidate"})
                unique[key] = c
            else:
                considered.append({"strategy": key, "source": c.source, "kept": False,
                                   "why": f"the same strategy as a {unique[key].source} candidate"})
        return unique

    def _note(self, base: Estimate, chosen: list[Candidate], n_proposable: int, err: float) -> tuple[bool, str]:
        best = min((c.step_s for c in chosen), default=base.step_time_s)
        within = base.fits and best >= base.step_time_s * (1 - err)
        if within:
            note = (f"the current strategy is within the model's error ({err:.0%}) of the best found (predicted "
                    f"{base.step_time_s:.4g} s, the best proposal {best:.4g} s): these are the experiments that "
                    f"would tell")
        else:
            note = f"{n_proposable} moves attack a named class and are priced faster beyond the band; fastest first"
        if len(chosen) < N_PROPOSALS:
            note += (f" | {N_PROPOSALS - len(chosen)} of the three: no further move predicted faster "
                     f"(kind none: the current strategy)")
        if self.narrative:
            note += f" | LLM: {self.narrative}"
        if self.llm_fallback:
            note += f" | {self.llm_fallback}"
        return within, note

    def _no_move(self, base: Estimate, diagnosis: Analysis) -> Proposal:
        """A slot no move fills honestly: the current strategy, kind "none", speedup 1."""
        target = diagnosis.classes[0] if diagnosis.classes else None
        named, figure = (target.cls.value, target.figure) if target else (str(diagnosis.bottleneck), "")
        lo, hi = base.step_time_range_s
        return Proposal(base.strategy, f"{named} ({figure}): no further move predicted faster: no other move of "
                        f"one or two knobs, entry or re-plan attacks it and is priced at least {MIN_SPEEDUP}x "
                        f"faster beyond the band", 1.0, (1.0, 1.0), base.step_time_s, (lo, hi),
                        tradeoffs(base, base, self.usable_gb, self.train.global_batch),
                        [f"diagnosis:{named}={target.saving_s if target else 0.0:.3g}s"], base.fits, "none",
                        kind="none", attacks=figure, attacks_class=named, term_changes_s=deltas(base, base)["deltas_s"],
                        estimate_command=f"asap estimate {self.job_args} -S {base.strategy}")

    def _proposal(self, c: Candidate, base: Estimate, diagnosis: Analysis) -> Proposal:
        lo, hi = c.estimate.step_time_range_s
        speedup = base.step_time_s / c.step_s
        target = c.target or (diagnosis.classes[0] if diagnosis.classes else None)
        named, figure, saving = ((target.cls.value, target.figure, target.saving_s) if target
                                 else (str(diagnosis.bottleneck), "", 0.0))  # no classes: the coarse word
        kind = "re-plan" if c.source == "planner" else "targeted"
        why = self.rationales.get(str(c.strategy), c.why)
        rationale = f"{named} ({figure}): {why}; moves {moves_text(c.strategy, base.strategy)}"
        entries = [self._entry_dict(c)] if c.entry is not None else []
        if c.source in ("planner", "neighbour"):  # knob by knob, the term it moves and the entry that holds there
            cited = self._replan_entries(c)
            entries = [{k: v for k, v in d.items() if k != "cited_once"} for _, _, d in cited
                       if d is not None and d["cited_once"]]
            rationale += "; " + ", ".join(f"{k}: {moved}" + (f" per knowledge:{d['id']}" if d else " (no entry applies)")
                                          for k, moved, d in cited)
        evidence = list(c.evidence) + [f"knowledge:{d['id']}" for d in entries if f"knowledge:{d['id']}" not in
                                       c.evidence] + [f"diagnosis:{named}={saving:.3g}s"]
        trials = self._similar_trials(c.strategy)
        evidence += [f"memory:trial{t['id']}" for t in trials]
        return Proposal(c.strategy, rationale, speedup, speedup_interval(base, c.estimate), c.step_s,
                        (lo, hi), tradeoffs(base, c.estimate, self.usable_gb, self.train.global_batch),
                        evidence, c.estimate.fits, c.source, kind=kind, attacks=figure,
                        attacks_class=named, knobs=sorted(c.knobs), entries=entries,
                        term_changes_s=deltas(base, c.estimate)["deltas_s"], similar_trials=trials,
                        estimate_command=f"asap estimate {self.job_args} -S {c.strategy}")

    def _replan_entries(self, c: Candidate) -> list[tuple[str, str, dict | None]]:
        """For each knob a re-plan changes: (knob, what it moves, the entry dict it follows or None): only
        entries whose precondition holds and that answer the term the knob moves (``cite``)."""
        out, seen = [], set()
        for knob, e, term, change in self.cite(c.strategy):
            unit = "GiB" if term == "memory" else "s"
            moved = f"{term} {change:+.3g} {unit}" if term else "no term priced alone"
            d = None
            if e is not None:
                words = [knob, *KNOB_WORDS.get(knob, ())]
                d = {"id": e.id, "title": e.title, "lines": justifying_lines(e.body, words),
                     "sources": list(e.sources), "cited_once": e.id not in seen}
                seen.add(e.id)
            out.append((knob, moved, d))
        return out

    def _applies(self, e) -> bool:
        """An entry written for this job's accelerator family, model kind and framework (or for any)."""
        from asap.agents.retrieval import applies

        return applies(e, self.workload())

    def _entry_dict(self, c: Candidate) -> dict[str, Any]:
        e = c.entry
        words = list(c.knobs) + [w for k in c.knobs for w in KNOB_WORDS.get(k, ())]
        words += (c.target.cls.value if c.target else "").split("_")
        return {"id": e.id, "title": e.title, "lines": justifying_lines(e.body, words), "sources": list(e.sources)}

    def _similar_trials(self, s: Strategy) -> list[dict[str, Any]]:
        """Measured trials of similar jobs (Memory) that ran this strategy's parallel layout."""
        if self.memory is None:
            return []
        out = []
        for exp, score in self.memory.similar_experiments(self.workload_record(), k=3):
            for t in self.memory.trials(exp.id):
                ts = t.keys or {}
                if t.measured_step_time_s and all(ts.get(k) == getattr(s, k) for k in ("tp", "pp", "cp", "ep")):
                    out.append({"id": t.id, "experiment": exp.id, "similarity": round(score, 3),
                                "strategy_string": t.strategy_string,
                                "measured_step_time_s": t.measured_step_time_s})
        return out[:3]


KNOB_WORDS = {"tp": ("tensor",), "pp": ("pipeline", "stages"), "vpp": ("interleaved", "virtual", "chunks"),
              "cp": ("context", "sequence"), "ep": ("expert", "experts"), "mbs": ("micro-batch", "batch"),
              "zero": ("zero", "sharding", "optimizer"), "recompute": ("recompute", "recomputation", "activations"),
              "dispatcher": ("dispatcher", "all-to-all", "dedup"), "a2a_overlap": ("overlap", "all-to-all"),
              "schedule": ("schedule", "bubble")}


def parse_current(text: str | dict | None, job: Job) -> Strategy:
    """The current strategy (text or a mapping: an edge), completed with the documented and the job's framework's
    defaults and checked, in spec (``resolve_strategy``): no cost model. The strategy the cost model prices is
    the one it is given (``estimate_from_batch`` rebuilds the same row, its dispatcher the one named: only a
    planner row may leave the dispatcher to the fastest), so pricing it to complete it added nothing."""
    return resolve_strategy(text, job.model, job.train, job.devices, framework=job.framework)
