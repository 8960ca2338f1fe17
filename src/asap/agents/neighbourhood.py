"""The neighbourhood of the current strategy and the citation of each knob a move turns (``asap.agents.proposer``
mixes it in): the single- and two-knob moves that cut the named classes' terms most, and, per knob, the term it
moves and the knowledge entry whose precondition holds where it is turned."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from asap.agents.choice import answers_term, term_cut_s
from asap.agents.moves import NEIGHBOUR_MOVES, PAIR_LEADERS, moved_knobs, moved_strategy, moves_that_way
from asap.agents.precondition import variables
from asap.cost.estimate import Estimate
from asap.errors import AsapError
from asap.spec.knobs import plain_value
from asap.spec.strategy import Strategy
from asap.spec.words import BottleneckClass, ClassSaving

if TYPE_CHECKING:
    from asap.agents.knowledge import KnowledgeEntry
    from asap.spec.hardware import Cluster
    from asap.spec.job import Job


class ProposerHost(Protocol):
    """What the class these methods are mixed into must have (``asap.agents.proposer.Proposer`` implements each;
    mypy checks that it does)."""

    job: Job
    cluster: Cluster
    state: dict[str, Any]

    @property
    def moe(self) -> bool: ...

    @property
    def knowledge(self) -> list[KnowledgeEntry]: ...

    @property
    def priced_base(self) -> Estimate: ...

    def price(self, strategy: Strategy) -> Estimate: ...

    def resolve(self, spelled: str | dict) -> Strategy: ...

    def _add(self, out: list, considered: list, strategy: dict | str | None, source: str, why: str, evidence: list,
             entry=None, target=None): ...

    def _applies(self, e) -> bool: ...


class Neighbourhood(ProposerHost):
    """The neighbourhood search and the per-knob citations, mixed into the Proposer."""

    def _neighbourhood(self, current: Strategy, targets: list[ClassSaving], out: list, considered: list) -> None:
        """The single-knob neighbours of the current strategy (``NEIGHBOUR_MOVES``), then the two-knob ones: each
        of the ``PAIR_LEADERS`` single moves that cut the named classes' terms most (faster or not: ep x2 may
        cut the data-parallel traffic and expose the dispatch that a dedup dispatcher then removes), joined with
        every other single move of another knob. Each cites, knob by knob, the entry whose precondition holds."""
        devices, base = self.cluster.num_devices, self.priced_base
        singles: list[tuple[float, int, dict[str, str]]] = []
        for i, move in enumerate(NEIGHBOUR_MOVES):
            new = self._add_neighbour(out, considered, moved_strategy(current, move, devices, self.moe), move,
                                      "one-knob neighbour")
            if new is not None:
                cut = max((term_cut_s(new, base, t.cls) for t in targets
                           if t.cls != BottleneckClass.MEMORY_CAPACITY), default=0.0)
                singles.append((cut, -i, move)) if cut > 0 else None
        leaders = [m for _, _, m in sorted(singles, key=lambda x: x[:2], reverse=True)[:PAIR_LEADERS]]
        for lead in leaders:
            for move in NEIGHBOUR_MOVES:
                if set(move) & set(lead):
                    continue
                joined = {**lead, **move}
                self._add_neighbour(out, considered, moved_strategy(current, joined, devices, self.moe), joined,
                                    "two-knob neighbour")

    def _add_neighbour(self, out: list, considered: list, strategy: dict | None, move: dict[str, str],
                       what: str) -> Estimate | None:
        """A neighbour priced and added, citing the entry of its first knob that has one (``cite``)."""
        if strategy is None:
            return None
        try:
            est = self.price(self.resolve(strategy))
        except AsapError as e:
            considered.append({"strategy": ",".join(f"{k}={v}" for k, v in strategy.items() if v is not None),
                               "source": "neighbour", "kept": False, "why": str(e)})
            return None
        desc = ", ".join(f"{k} {op}" for k, op in move.items())
        cited = [c for c in self.cite(est.strategy) if c[1] is not None]
        entry = cited[0][1] if cited else None
        self._add(out, considered, strategy, "neighbour", f"{what} ({desc})",
                  [f"knowledge:{entry.id}"] if entry else [], entry=entry, target=None)
        return est

    def cite(self, new: Strategy) -> list[tuple[str, KnowledgeEntry | None, str, float]]:
        """For each knob ``new`` turns from the current strategy, (knob, entry, term, change): the term the knob
        moves (``_knob_term``) and the entry that moves that knob that way, answers that term's class, applies to
        the job, and whose precondition holds where the knob is turned (the others already turned); the entry is
        None where the knob only grows its term (a cost paid for another knob) or no entry answers."""

        cur = self.priced_base.strategy
        out: list[tuple[str, KnowledgeEntry | None, str, float]] = []
        for knob in moved_knobs(new, cur):
            old, value = getattr(cur, knob), getattr(new, knob)
            term, change, before = self._knob_term(new, knob)
            env = variables(self.job, before) if before is not None else {**variables(self.job, new), knob: self.state[knob]}
            ways = {e.id: [len(m) for m in e.moves if moves_that_way(m.get(knob), old, value)] for e in self.knowledge}
            fits = [e for e in self.knowledge if change < 0 and ways[e.id] and self._applies(e)
                    and answers_term(e, term) and e.holds(env)]
            best = min(fits, key=lambda e: (min(ways[e.id]), e.id), default=None)
            out.append((knob, best, term, change))
        return out

    def _knob_term(self, new: Strategy, knob: str) -> tuple[str, float, Strategy | None]:
        """The term one knob of ``new`` moves: ``new`` priced against itself with that knob back at its current
        value (else the current strategy with that knob alone turned); the exposed term it cuts most (seconds),
        else "memory" where it frees peak memory (GiB), else the term it grows most; and the strategy the knob is
        turned in (where the entry's precondition is read)."""
        cur = self.priced_base.strategy
        follow = ("schedule",) if knob == "vpp" else ()
        def spelled(s: Strategy, src: Strategy) -> dict[str, Any]:
            d = {k: v for k, v in s.to_dict().items() if k not in ("dp", "layer_split") and v is not None}
            return {**d, **{k: plain_value(getattr(src, k)) for k in (knob, *follow)}}
        for a_s, b_s in ((spelled(new, cur), new), (cur, spelled(cur, new))):
            try:
                a, b = (self.price(x if isinstance(x, Strategy) else self.resolve(x)) for x in (a_s, b_s))
            except AsapError:
                continue
            deltas = {k: b.exposed_s.get(k, 0.0) - a.exposed_s.get(k, 0.0) for k in set(a.exposed_s) | set(b.exposed_s)}
            term = min(sorted(deltas), key=lambda k: deltas[k])
            if deltas[term] < -1e-9:
                return term, deltas[term], a.strategy
            if b.peak_memory_gb < a.peak_memory_gb - 1e-6:
                return "memory", b.peak_memory_gb - a.peak_memory_gb, a.strategy
            term = max(sorted(deltas), key=lambda k: deltas[k])
            return term, deltas[term], a.strategy
        return "", 0.0, None

