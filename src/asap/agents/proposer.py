"""The Proposer: candidates from the knowledge entries retrieved for the diagnosis, from one-knob neighbours
of the current strategy and from the planner's best; every one checked by the cost model (legal, fits,
predicted step time with its error band) before it is offered; exactly three, diverse (no two moving the same
knob alone), each with its rationale, expected speedup and range, trade-offs and evidence.

When even the best candidate's error band reaches the current strategy's predicted time, the current strategy
is within the model's error of the best: the proposer says so, and the three it returns are the cheapest
experiments that would tell (the fastest-running of the diverse candidates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from asap.agents.analyzer import Diagnosis
from asap.cost.estimate import Estimate, estimate
from asap.errors import AsapError
from asap.spec.hardware import Cluster
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy, parse_strategy
from asap.spec.train import TrainSpec

N_PROPOSALS = 3
KNOWLEDGE_ENTRIES = 8  # entries retrieved per diagnosis
# one-knob neighbours of the current strategy, in the knowledge entries' move format
NEIGHBOUR_MOVES: tuple[dict[str, str], ...] = (
    {"tp": "x2"}, {"tp": "/2"}, {"pp": "x2"}, {"pp": "/2"}, {"cp": "x2"}, {"cp": "/2"}, {"ep": "x2"}, {"ep": "/2"},
    {"mbs": "x2"}, {"mbs": "/2"}, {"vpp": "x2"}, {"vpp": "/2"}, {"recompute": "=none"},
    {"recompute": "=selective"}, {"recompute": "=full"}, {"zero": "=1"}, {"zero": "=3"},
    {"dispatcher": "=dedup"}, {"a2a_overlap": "=1"}, {"schedule": "=zb"},
)
# keys derived from the others (the data-parallel degree fills the devices; the rest follow their defaults)
DERIVED = ("dp", "etp", "sp", "schedule", "layer_split")
SOURCE_ORDER = {"knowledge": 0, "planner": 1, "neighbour": 2, "llm": 3}


@dataclass
class Candidate:
    strategy: Strategy
    estimate: Estimate
    source: str  # knowledge | neighbour | planner
    why: str
    evidence: list[str] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        return self.estimate.step_time_s


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

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy.to_dict(), "strategy_string": str(self.strategy),
                "rationale": self.rationale, "expected_speedup": self.expected_speedup,
                "expected_speedup_range": list(self.expected_speedup_range),
                "predicted_step_time_s": self.predicted_step_time_s,
                "predicted_step_time_range_s": list(self.predicted_step_time_range_s), "tradeoffs": self.tradeoffs,
                "evidence": self.evidence, "fits": self.fits, "source": self.source}


@dataclass
class ProposalSet:
    proposals: list[Proposal]
    within_error: bool
    note: str
    considered: list[dict[str, Any]]  # every candidate and why it was kept or dropped (the audit trail)


MOE_KEYS = ("ep", "etp", "dispatcher", "a2a_overlap")  # knobs a dense model does not have


def moved_strategy(current: Strategy, move: dict[str, str], devices: int, moe: bool = True) -> dict[str, Any] | None:
    """The strategy ``move`` makes of ``current`` (knowledge-entry ops), with the derived keys filled again
    (dp from the devices); None where the move does not apply (an MoE knob of a dense model)."""
    from asap.agents.knowledge import apply_move

    if not moe and any(k in MOE_KEYS for k in move):
        return None
    base = {k: v for k, v in current.to_dict().items() if k not in DERIVED and v is not None}
    new = apply_move(base, move)
    if new is None or new == base:
        return None
    if "dp" in move:
        dp = apply_move({"dp": current.dp}, {"dp": move["dp"]})
        if dp is None:
            return None
        new["dp"] = dp["dp"]
    elif devices % (new.get("tp", 1) * new.get("pp", 1) * new.get("cp", 1)):
        return None
    if new.get("vpp", 1) > 1:
        new["schedule"] = current.schedule if current.schedule in ("interleaved", "zb") else "interleaved"
    if "schedule" in move:
        new["schedule"] = move["schedule"].lstrip("=")
    return new


class Proposer:
    def __init__(self, model: ModelSpec, cluster: Cluster, train: TrainSpec, memory=None, experiment_id=None,
                 llm=None):
        self.model, self.cluster, self.train = model, cluster, train
        self.memory, self.experiment_id = memory, experiment_id
        self.llm = llm  # an asap.agents.llm.LLMAdvisor: more candidates and a narrative, checked like the rest
        self.narrative = ""
        self.base: tuple[float, float] | None = None  # the current strategy's (step time, memory) while proposing

    @property
    def moe(self) -> bool:
        return self.model.moe is not None

    def workload(self) -> dict[str, Any]:
        fam = self.cluster.accelerator.family
        return {"family": fam, "model_kind": "moe" if self.model.moe is not None else "dense",
                "long_context": self.train.seq_len >= 32768, "mla": self.model.mla is not None,
                "framework": self.train.framework, "devices": self.cluster.num_devices}

    def price(self, strategy: Strategy | dict | str) -> Estimate:
        return estimate(self.model, self.cluster, self.train, strategy)

    def candidates(self, current: Strategy, diagnosis: Diagnosis, considered: list) -> list[Candidate]:
        from asap.agents.retrieval import retrieve

        out: list[Candidate] = []
        for r in retrieve(diagnosis.bottleneck, self.workload(), k=KNOWLEDGE_ENTRIES):
            for move in r.entry.moves:
                why = f"{r.entry.title} ({r.why})"
                self._add(out, considered, moved_strategy(current, move, self.cluster.num_devices, self.moe),
                          "knowledge", why, [f"knowledge:{r.entry.id}"])
        for move in NEIGHBOUR_MOVES:
            desc = ", ".join(f"{k} {op}" for k, op in move.items())
            self._add(out, considered, moved_strategy(current, move, self.cluster.num_devices, self.moe),
                      "neighbour", f"one-knob neighbour of the current strategy ({desc})", [])
        for s in self._planner_best():
            self._add(out, considered, s.to_dict(), "planner", "the planner's best for this job", ["planner:top"])
        if self.llm is not None:
            self._llm_candidates(current, diagnosis, out, considered)
        return out

    def _llm_candidates(self, current: Strategy, diagnosis: Diagnosis, out: list, considered: list) -> None:
        """The LLM's candidates, parsed against its schema and priced like any other; a failure or a refusal
        leaves the deterministic candidates as they are."""
        context = {"model": self.model.name, "cluster": f"{self.cluster.num_devices} x {self.cluster.accelerator.name}",
                   "global_batch": self.train.global_batch, "seq_len": self.train.seq_len,
                   "current": current.to_dict(), "diagnosis": diagnosis.to_dict(),
                   "best_so_far": [str(c.strategy) for c in sorted(out, key=lambda c: c.step_s)[:5]]}
        advice = self.llm.advise(context)
        for reason in advice.dropped:
            considered.append({"strategy": "", "source": "llm", "kept": False, "why": reason})
        if advice.error:
            considered.append({"strategy": "", "source": "llm", "kept": False, "why": advice.error})
        for strategy, rationale in advice.candidates:
            self._add(out, considered, strategy, "llm", f"LLM: {rationale}", ["llm"])
        self.narrative = advice.narrative

    def _planner_best(self, top: int = 60) -> list[Strategy]:
        from asap.search.planner import NoFitError, plan

        try:
            return [c.strategy for c in plan(self.model, self.cluster, self.train, {}, top=top,
                                             ilp_candidates=0, distinct=False).candidates]
        except NoFitError:
            return []

    def _add(self, out: list, considered: list, strategy: dict | None, source: str, why: str, evidence: list):
        if strategy is None:
            return
        text = ",".join(f"{k}={v}" for k, v in strategy.items() if v is not None)
        try:
            est = self.price(strategy)
        except AsapError as e:
            considered.append({"strategy": text, "source": source, "kept": False, "why": str(e)})
            return
        if self.base is not None and (est.step_time_s, est.peak_memory_gb) == self.base:
            considered.append({"strategy": str(est.strategy), "source": source, "kept": False,
                               "why": "changes nothing the cost model sees (a knob without effect here)"})
            return
        if not est.fits:
            considered.append({"strategy": str(est.strategy), "source": source, "kept": False,
                               "why": f"does not fit: {est.peak_memory_gb:.1f} GiB reserved > {self.cluster.hbm_gb:g} GiB"})
            return
        out.append(Candidate(est.strategy, est, source, why, evidence))

    def propose(self, current: Strategy, diagnosis: Diagnosis, exclude: Iterable[str] = ()) -> ProposalSet:
        """Exactly three proposals for moving on from ``current`` (``exclude``: strategy strings already tried)."""
        considered: list[dict[str, Any]] = []
        base = self.price(current)
        self.base = (base.step_time_s, base.peak_memory_gb)
        skip = set(exclude) | {str(base.strategy)}
        unique: dict[str, Candidate] = {}
        for c in self.candidates(current, diagnosis, considered):
            key = str(c.strategy)
            if key in skip:
                considered.append({"strategy": key, "source": c.source, "kept": False, "why": "already tried"})
                continue
            if key not in unique or SOURCE_ORDER[c.source] < SOURCE_ORDER[unique[key].source]:
                unique[key] = c
        ranked = sorted(unique.values(), key=lambda c: (c.step_s, SOURCE_ORDER[c.source], str(c.strategy)))
        faster = [c for c in ranked if c.step_s < base.step_time_s]
        chosen = diverse(faster, current)
        if len(chosen) < N_PROPOSALS:  # fewer than three moves help: the least slow of the others fill in
            chosen += diverse([c for c in ranked if c not in faster], current, N_PROPOSALS - len(chosen),
                              taken=chosen)
        if len(chosen) < N_PROPOSALS:  # still short (few strategies fit): the best of the rest, variants or not
            chosen += [c for c in ranked if c not in chosen][:N_PROPOSALS - len(chosen)]
        # within the model's error: the best candidate's predicted time is inside the current one's band
        within = not chosen or chosen[0].step_s >= base.step_time_range_s[0]
        if within:
            note = (f"the current strategy is within the model's error of the best found (predicted "
                    f"{base.step_time_s:.4g} s; the best candidate's range reaches it): these are the three "
                    f"cheapest experiments that would tell")
            chosen = sorted(chosen, key=lambda c: c.step_s)
        else:
            note = f"{len(unique)} candidates fit; the three best distinct moves"
        for c in unique.values():
            considered.append({"strategy": str(c.strategy), "source": c.source, "kept": c in chosen,
                               "why": "proposed" if c in chosen else "a faster candidate moves the same knob"})
        proposals = [self._proposal(c, base, diagnosis) for c in chosen]
        if self.narrative:
            note += f" | LLM: {self.narrative}"
        return ProposalSet(proposals, within, note, considered)

    def _proposal(self, c: Candidate, base: Estimate, diagnosis: Diagnosis) -> Proposal:
        lo, hi = c.estimate.step_time_range_s
        speedup = base.step_time_s / c.step_s
        moved = changed_keys(c.strategy, base.strategy)
        rationale = (f"{diagnosis.bottleneck}-bound ({diagnosis.source}): {c.why}; moves "
                     f"{', '.join(f'{k} {getattr(base.strategy, k)}->{getattr(c.strategy, k)}' for k in moved)}")
        evidence = list(c.evidence) + [f"diagnosis:{k}={v:.3g}" for k, v in list(diagnosis.figures.items())[:3]]
        evidence += self._memory_evidence(c.strategy)
        return Proposal(c.strategy, rationale, speedup, (base.step_time_s / hi, base.step_time_s / lo), c.step_s,
                        (lo, hi), tradeoffs(base, c.estimate), evidence, c.estimate.fits, c.source)

    def _memory_evidence(self, s: Strategy) -> list[str]:
        if self.memory is None:
            return []
        out = []
        for exp, score in self.memory.similar_experiments(self.workload_record(), k=3):
            for t in self.memory.trials(exp["id"]):
                if t.get("strategy_string") == str(s) and t.get("measured_step_time_s"):
                    out.append(f"memory:trial{t['id']} measured {t['measured_step_time_s']:.4g} s "
                               f"(similar job, {score:.2f})")
        return out[:3]

    def workload_record(self) -> dict[str, Any]:
        return workload_record(self.model, self.cluster, self.train)


def workload_record(model: ModelSpec, cluster: Cluster, train: TrainSpec) -> dict[str, Any]:
    """What identifies a tuning job in Memory: the model, the cluster and the batch."""
    return {"model": model.name, "model_family": model.name.split("-")[0].lower(), "params": model.num_params(),
            "accelerator": cluster.accelerator.name, "family": cluster.accelerator.family,
            "devices": cluster.num_devices, "global_batch": train.global_batch, "seq_len": train.seq_len,
            "precision": train.precision, "framework": train.framework or ""}


SMALL_MOVE = 2
MAIN_KNOBS = ("tp", "pp", "vpp", "cp", "ep", "etp", "mbs", "zero", "recompute", "schedule", "dispatcher",
              "a2a_overlap")


def changed_keys(a: Strategy, b: Strategy) -> list[str]:
    return [k for k in MAIN_KNOBS if getattr(a, k) != getattr(b, k)]


def diverse(ranked: list[Candidate], current: Strategy, n: int = N_PROPOSALS,
            taken: list[Candidate] = ()) -> list[Candidate]:
    """The best ``n`` whose moves differ from each other's and from ``taken``'s: a candidate is skipped when it
    moves the same knobs as a chosen one, or when one of the two is a small move (at most ``SMALL_MOVE`` knobs)
    that the other contains (a variant of that move), or when it is one knob's value apart from a chosen one."""
    chosen: list[Candidate] = []
    for c in ranked:
        keys = frozenset(changed_keys(c.strategy, current))
        if not keys:
            continue
        taken_keys = [frozenset(changed_keys(x.strategy, current)) for x in list(taken) + chosen]
        if any(t == keys or (min(len(t), len(keys)) <= SMALL_MOVE and (t <= keys or keys <= t)) for t in taken_keys):
            continue
        if any(len(changed_keys(c.strategy, x.strategy)) <= 1 for x in list(taken) + chosen):
            continue  # one knob's value apart from a chosen candidate
        chosen.append(c)
        if len(chosen) == n:
            break
    return chosen


def tradeoffs(base: Estimate, new: Estimate) -> list[str]:
    """What the move costs besides the step time: memory, and the terms that grow."""
    out = [f"peak memory {base.peak_memory_gb:.1f} -> {new.peak_memory_gb:.1f} GiB reserved per device"]
    for term, value in new.exposed_s.items():
        before = base.exposed_s.get(term, 0.0)
        if value > before * 1.2 and value - before > 0.02 * new.step_time_s:
            out.append(f"more exposed {term}: {before:.3g} -> {value:.3g} s")
    return out


def parse_current(text: str | dict | None, model: ModelSpec, cluster: Cluster, train: TrainSpec) -> Strategy:
    """The current strategy as the cost model completes it."""
    return estimate(model, cluster, train, parse_strategy(text) if isinstance(text, str) else (text or {})).strategy
