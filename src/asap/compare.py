"""Strategies side by side, term by term: ``asap compare``.

Every estimate's exposed terms add up to its step time (``asap.cost.estimate.compose``), so the difference of
two step times is exactly the sum of the differences of their exposed terms: the term whose difference is
largest in the direction of the result is the one that decides it.
"""

from __future__ import annotations

from typing import Any, Sequence

from asap.cost.bands import indistinguishable
from asap.cost.estimate import Estimate
from asap.errors import AsapError


def deltas(a: Estimate, b: Estimate) -> dict[str, dict[str, float]]:
    """b - a: ``{deltas_s: step and exposed terms, deltas_breakdown_s: busy totals, deltas_memory_gb}``."""
    exposed = {"step_time_s": b.step_time_s - a.step_time_s}
    exposed.update({k: b.exposed_s.get(k, 0.0) - a.exposed_s.get(k, 0.0) for k in _keys(a.exposed_s, b.exposed_s)})
    total = {k: b.breakdown_s.get(k, 0.0) - a.breakdown_s.get(k, 0.0) for k in _keys(a.breakdown_s, b.breakdown_s)}
    memory = {"peak_memory_gb": b.peak_memory_gb - a.peak_memory_gb}
    memory.update({k: b.memory_gb.get(k, 0.0) - a.memory_gb.get(k, 0.0) for k in _keys(a.memory_gb, b.memory_gb)})
    return {"deltas_s": exposed, "deltas_breakdown_s": total, "deltas_memory_gb": memory}


def _keys(x: dict, y: dict) -> list[str]:
    return list(dict.fromkeys([*x, *y]))


def deciding_term(a: Estimate, b: Estimate) -> tuple[str, float]:
    """The exposed term whose change moves the step most in the direction it moved (ties: the first)."""
    d = {k: v for k, v in deltas(a, b)["deltas_s"].items() if k != "step_time_s"}
    sign = -1.0 if b.step_time_s <= a.step_time_s else 1.0
    term = max(d, key=lambda k: sign * d[k])
    return term, d[term]


def verdict(a: Estimate, b: Estimate, name_a: str, name_b: str) -> str:
    """One sentence: which is faster, by how much, the term that decides it, and memory."""
    if not (a.fits and b.fits):
        failing = [n for n, e in ((name_a, a), (name_b, b)) if not e.fits]
        fits = [n for n, e in ((name_a, a), (name_b, b)) if e.fits]
        tail = f"; {fits[0]} does ({_gb(a if fits[0] == name_a else b)})" if fits else ""
        return f"{' and '.join(failing)} {'does' if len(failing) == 1 else 'do'} not fit in device memory{tail}."
    fast, slow, nf, ns = (b, a, name_b, name_a) if b.step_time_s < a.step_time_s else (a, b, name_a, name_b)
    gain = 1.0 - fast.step_time_s / slow.step_time_s
    if gain < 1e-9:
        return f"{name_a} and {name_b} price the same ({a.step_time_s:.4g} s per step)."
    term, delta = deciding_term(slow, fast)
    tie = (" (within the model's error band: their 80% intervals overlap by more than half, a tie the model "
           "cannot break: measure to decide)" if indistinguishable(fast, slow) else "")
    mem = fast.peak_memory_gb - slow.peak_memory_gb
    return (f"{nf} is {gain:.1%} faster than {ns} ({fast.step_time_s:.4g} s vs {slow.step_time_s:.4g} s per "
            f"step){tie}, mostly because exposed {term} {'drops' if delta < 0 else 'grows'} by "
            f"{abs(delta):.3g} s; it uses {abs(mem):.1f} GiB {'less' if mem < 0 else 'more'} memory per device.")


def _gb(e: Estimate) -> str:
    return f"{e.peak_memory_gb:.1f} GiB"


def compare(estimates: Sequence[Estimate], names: Sequence[str]) -> dict[str, Any]:
    """``{estimates, deltas_s (second - first), deltas_breakdown_s, deltas_memory_gb, vs_first: [...],
    verdict}``; with more than two, the verdict compares the fastest fitting one with the first."""
    if len(estimates) < 2:
        raise AsapError("strategy", f"compare needs at least two strategies (--strategy A --strategy B, or one "
                                    f"and --plan-best), got {len(estimates)}")
    a = estimates[0]
    vs_first = [deltas(a, e) for e in estimates[1:]]
    fitting = [i for i, e in enumerate(estimates) if e.fits and i > 0]
    j = min(fitting, key=lambda i: estimates[i].step_time_s) if fitting and len(estimates) > 2 else 1
    return {"estimates": [e.to_dict() for e in estimates], "names": list(names), **vs_first[0],
            "vs_first": vs_first, "verdict": verdict(a, estimates[j], names[0], names[j])}
