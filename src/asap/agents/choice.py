"""Which priced candidates become the proposals (``asap.agents.proposer``): only moves that attack a class the
diagnosis names and are priced faster beyond the band (``not_proposable``), up to three of three kinds, the
named class attacked first, each a different entry or term and knob set, the planner's best only where it beats
the best targeted move by more than the model's error. A slot no move fills honestly is the proposer's "none"."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from asap.agents.moves import MAIN_KNOBS
from asap.cost.estimate import Estimate
from asap.spec.strategy import Strategy
from asap.spec.words import BottleneckClass, ClassSaving

N_PROPOSALS = 3


SOURCE_ORDER = {"knowledge": 0, "memory": 1, "neighbour": 2, "llm": 3, "planner": 4}


@dataclass
class Candidate:
    strategy: Strategy
    estimate: Estimate
    source: str  # knowledge | memory | neighbour | llm | planner
    why: str
    evidence: list[str] = field(default_factory=list)
    entry: Any = None  # the asap.agents.knowledge.KnowledgeEntry it follows
    target: ClassSaving | None = None  # the diagnosis class it attacks
    knobs: frozenset = frozenset()

    @property
    def step_s(self) -> float:
        return self.estimate.step_time_s

    @property
    def attack(self) -> str:
        """What it attacks the diagnosis through: its entry, else its class and source."""
        if self.entry is not None:
            return f"knowledge:{self.entry.id}"
        return f"{self.source}:{self.target.cls.value if self.target else ''}:{','.join(sorted(self.knobs))}"


# the exposed terms of the step each class is measured by: a move attacks a class when it cuts them (the
# communication classes are their own terms, ``asap.cost.classes.COMM_CLASSES``)
CLASS_TERMS: dict[BottleneckClass, tuple[str, ...]] = {
    BottleneckClass.PIPELINE_BUBBLE: ("bubble",), BottleneckClass.HOST: ("host",),
    BottleneckClass.STAGE_IMBALANCE: ("bubble", "compute"), BottleneckClass.EXPERT_IMBALANCE: ("compute", "ep_comm"),
    BottleneckClass.SEQUENCE_IMBALANCE: ("compute", "cp_comm", "dp_comm"), BottleneckClass.RECOMPUTE: ("compute",),
    BottleneckClass.MEMORY_BANDWIDTH: ("compute",), BottleneckClass.COMPUTE: ("compute",)}
# a predicted gain under this is not proposed: run-to-run step-time noise of a real cluster (stragglers, jitter,
# data-loader hiccups) is 1-2% over a few hundred steps, so a smaller gain could not be confirmed by running it
MIN_SPEEDUP = 1.03


def class_terms(cls: BottleneckClass) -> tuple[str, ...]:
    return CLASS_TERMS.get(cls, (cls.value,))


def answers_term(entry: Any, term: str) -> bool:
    """Whether a knowledge entry answers a class measured by ``term`` (an exposed term, or "memory")."""
    if term == "memory":
        return BottleneckClass.MEMORY_CAPACITY.value in entry.classes
    return any(term in class_terms(BottleneckClass(c)) for c in entry.classes)


def term_cut_s(new: Estimate, base: Estimate, cls: BottleneckClass) -> float:
    """Seconds per step a strategy cuts from the class's terms (memory capacity: GiB of peak freed)."""
    if cls == BottleneckClass.MEMORY_CAPACITY:
        return base.peak_memory_gb - new.peak_memory_gb
    return sum(base.exposed_s.get(k, 0.0) - new.exposed_s.get(k, 0.0) for k in class_terms(cls))


def attacked_class(c: Candidate, base: Estimate | None, targets: list[ClassSaving]) -> ClassSaving | None:
    """The diagnosis class a candidate attacks: memory capacity where it is named and the candidate fits with
    less peak memory, else the named class whose terms it cuts most; None where it cuts none."""
    if base is None or not targets:
        return None
    mem = [t for t in targets if t.cls == BottleneckClass.MEMORY_CAPACITY]
    if mem and c.estimate.fits and c.estimate.peak_memory_gb < base.peak_memory_gb:
        return mem[0]
    cuts = [(term_cut_s(c.estimate, base, t.cls), -i, t) for i, t in enumerate(targets)
            if t.cls != BottleneckClass.MEMORY_CAPACITY]
    best = max(cuts, key=lambda x: x[:2], default=None)
    return best[2] if best is not None and best[0] > 0 else None


def not_proposable(c: Candidate, base: Estimate, targets: list[ClassSaving], hbm_gb: float) -> str | None:
    """Why a priced candidate is not proposed, or None: a move is proposed only if it attacks a class the
    diagnosis names (cuts its terms) and is priced faster beyond the band (at least ``MIN_SPEEDUP``, and not a
    tie the model cannot break: ``asap.cost.bands.beyond_band_of_changed_terms``). Where memory capacity binds (the current
    strategy does not fit, or fills more than the headroom a plan keeps), memory is the named term: a move that
    fits (and, where the current fits, leaves that headroom) attacks it, at whatever speed it is priced."""
    from asap.cost.bands import beyond_band_of_changed_terms
    from asap.cost.classes import memory_class

    if not base.fits:
        return None if c.estimate.fits else "does not fit"
    if memory_class(base.peak_memory_gb, hbm_gb, base.fits) is not None:
        if memory_class(c.estimate.peak_memory_gb, hbm_gb, c.estimate.fits) is None:
            return None
    speedup = base.step_time_s / c.step_s
    if speedup < MIN_SPEEDUP:
        return f"priced {speedup:.3f}x: under {MIN_SPEEDUP}x, no gain a run could confirm"
    if not beyond_band_of_changed_terms(base, c.estimate):
        return f"priced {speedup:.3f}x, within the band of the terms it changes: a tie the model cannot break"
    if attacked_class(c, base, targets) is None:
        return "cuts no term the diagnosis names"
    return None


def keep_rank(c: Candidate) -> tuple[int, int]:
    """Which of two candidates of one strategy to keep: knowledge first, then the entry made for the class it
    attacks (its first class) over one that lists it among others."""
    primary = c.entry is not None and c.target is not None and c.entry.classes[:1] == [c.target.cls.value]
    return SOURCE_ORDER[c.source], 0 if primary else 1


def helps(c: Candidate, base: Estimate) -> bool:
    return c.step_s < base.step_time_s or not base.fits  # what helps: faster, or fits where base does not


def distinct_move(c: Candidate, chosen: list[Candidate]) -> bool:
    """Another kind of move: its own knob set and entry (or term), and not one knob's value from a chosen one
    (tp 4->2 and tp 4->2 with pp 1->2 are one experiment and a variant of it)."""
    return bool(c.knobs) and all(c.knobs != x.knobs and c.attack != x.attack
                                 and len(changed_keys(c.strategy, x.strategy)) > 1 for x in chosen)


def _attacks(c: Candidate) -> str | None:
    """The class a candidate attacks, by name (None where it attacks none)."""
    return c.target.cls.value if c.target else None


def choose(cands: list[Candidate], base: Estimate, err: float, verdict: str = "") -> list[Candidate]:
    """Up to three of three kinds from proposable candidates (``not_proposable``), fastest first: the fastest
    move against the named class (``verdict``) that follows an entry made for it (else the fastest against it),
    then the fastest others of other knobs and entries, so no move that helps more than a proposed one is left
    out unless it is a variant of one proposed; the planner's best replaces the slowest only when it beats the
    best targeted move by more than the model's error."""
    ranked = sorted(cands, key=lambda c: (c.step_s, SOURCE_ORDER[c.source], str(c.strategy)))
    targeted = [c for c in ranked if c.source != "planner"]
    # the named class's own expert move first (an entry made for it, its precondition holding), else its fastest
    chosen = ([c for c in targeted if c.entry is not None and verdict in c.entry.classes and _attacks(c) == verdict]
              or [c for c in targeted if _attacks(c) == verdict])[:1]
    for c in targeted:
        if len(chosen) >= N_PROPOSALS:
            break
        if c not in chosen and distinct_move(c, chosen):
            chosen.append(c)
    planner = [c for c in ranked if c.source == "planner"]
    if planner and chosen and planner[0].step_s < min(x.step_s for x in chosen) * (1 - err):
        chosen = [c for c in chosen if distinct_move(c, planner[:1])][:N_PROPOSALS - 1] + [planner[0]]
    elif planner and len(chosen) < N_PROPOSALS and distinct_move(planner[0], chosen):
        chosen.append(planner[0])
    return sorted(chosen[:N_PROPOSALS], key=lambda c: c.step_s)


def changed_keys(a: Strategy, b: Strategy) -> list[str]:
    return [k for k in MAIN_KNOBS if getattr(a, k) != getattr(b, k)]
