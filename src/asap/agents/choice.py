"""Which priced candidates become the proposals (``asap.agents.proposer``): exactly three of three kinds, the
named class attacked first, each a different entry or term and knob set, the planner's best only where it beats
the best targeted move by more than the model's error."""

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


def attacked_class(c: Candidate, base: Estimate | None, targets: list[ClassSaving]) -> ClassSaving | None:
    """The diagnosis class a candidate without an entry attacks: the target whose term it cuts most."""
    if base is None or not targets:
        return None
    term = {BottleneckClass.PIPELINE_BUBBLE: "bubble", BottleneckClass.HOST: "host"}  # the class's exposed term
    def cut(t: ClassSaving) -> float:
        key = term.get(t.cls, t.cls.value)
        return base.exposed_s.get(key, 0.0) - c.estimate.exposed_s.get(key, 0.0) if key in base.exposed_s else 0.0
    best = max(targets, key=cut)
    return best if cut(best) > 0 else targets[0]


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
    """Three of three kinds, fastest first: the best knowledge move against the named class (``verdict``), the
    best knowledge moves of other entries and knobs up to two, then the
    best remaining targeted move of any source; the planner's best replaces the slowest only when it beats the
    best targeted move by more than the model's error. Too few faster moves: the least slow others fill in."""
    ranked = sorted(cands, key=lambda c: (c.step_s, SOURCE_ORDER[c.source], str(c.strategy)))
    targeted = [c for c in ranked if c.source != "planner"]
    useful = [c for c in targeted if helps(c, base)]
    known = [c for c in targeted if c.source == "knowledge"]
    # the named class is attacked first: its best knowledge move, where one helps
    chosen = [c for c in useful if c in known and _attacks(c) == verdict][:1]
    named_first = sorted(known, key=lambda c: _attacks(c) != verdict)  # stable: then by step
    # only moves that help (``_helps``): a slower move is never offered to fill a slot
    named_first = [c for c in named_first if c in useful]
    for pool, n in (([c for c in useful if c in known], 2), (named_first, 2), (useful, 3)):
        for c in pool:
            if len(chosen) >= n:
                break
            if distinct_move(c, chosen):
                chosen.append(c)
    planner = [c for c in ranked if c.source == "planner"]
    if planner and chosen and planner[0].step_s < min(x.step_s for x in chosen) * (1 - err):
        chosen = chosen[:N_PROPOSALS - 1] + [planner[0]]
    elif planner and len(chosen) < N_PROPOSALS and distinct_move(planner[0], chosen):
        chosen.append(planner[0])
    return sorted(chosen[:N_PROPOSALS], key=lambda c: c.step_s)


def changed_keys(a: Strategy, b: Strategy) -> list[str]:
    return [k for k in MAIN_KNOBS if getattr(a, k) != getattr(b, k)]
