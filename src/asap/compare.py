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


def compare(estimates: Sequence[Estimate], names: Sequence[str], job=None) -> dict[str, Any]:
    """``{estimates, deltas_s (second - first), deltas_breakdown_s, deltas_memory_gb, vs_first: [...],
    verdict, path}``; with more than two, the verdict compares the fastest fitting one with the first. With the
    ``job``, ``path`` walks from the first to that one a knob at a time (``knob_path``)."""
    if len(estimates) < 2:
        raise AsapError("strategy", f"compare needs at least two strategies (--strategy A --strategy B, or one "
                                    f"and --plan-best), got {len(estimates)}")
    a = estimates[0]
    vs_first = [deltas(a, e) for e in estimates[1:]]
    fitting = [i for i, e in enumerate(estimates) if e.fits and i > 0]
    j = min(fitting, key=lambda i: estimates[i].step_time_s) if fitting and len(estimates) > 2 else 1
    out = {"estimates": [e.to_dict() for e in estimates], "names": list(names), **vs_first[0],
           "vs_first": vs_first, "verdict": verdict(a, estimates[j], names[0], names[j])}
    if job is not None:
        out["path"] = knob_path(job, a.strategy, estimates[j].strategy, estimates[j].step_time_s)
        out["path_to"] = names[j]
    return out


# The per-knob path (``knob_path``): from A towards B one knob at a time, each step the knob whose change alone
# moves the step most in the direction B lies (greedy: the order that explains most). dp is not a knob of its own:
# it follows tp, pp and cp (dp = devices / (tp pp cp)). An intermediate the rules refuse (sp=1 with tp=1, a layer
# split of another pp) is skipped; where no single knob is legal, the fewest knobs that are move together.
PATH_MAX_COMBINED = 3  # at most this many knobs tried together before the rest move as one


def _differing(a, b) -> list[str]:
    from asap.spec.knobs import KEYS

    return [k for k in KEYS if k != "dp" and getattr(a, k) != getattr(b, k)]


def _moved(s, b, knobs, devices: int):
    """``s`` with ``knobs`` set to ``b``'s values and dp following the model-parallel degrees."""
    from dataclasses import replace

    t = replace(s, **{k: getattr(b, k) for k in knobs})
    return replace(t, dp=max(1, devices // (t.tp * t.pp * t.cp)))


def _price(job, s) -> float | None:
    """The step time of a legal intermediate; None where a rule refuses it (``asap.spec.legality`` or the job's
    stack: ``asap.spec.stack_rules``)."""
    from asap.cost.estimate import estimate
    from asap.spec.stack_rules import RuleJob, first_unrunnable

    try:
        if first_unrunnable(s, job.framework.name, RuleJob.of(job)) is not None:
            return None
        return estimate(job, s, classes=False).step_time_s
    except AsapError:
        return None


def _next_step(job, current, b, left: list[str], sign: float, now: float):
    """(knobs, step) of the move that goes furthest towards B: single knobs first; where none of them moves
    towards B (or none is legal), pairs, then triples, and the best of all tried."""
    from itertools import combinations

    devices = job.cluster.num_devices
    tried: list[tuple[list[str], float]] = []
    for size in range(1, min(PATH_MAX_COMBINED, len(left)) + 1):
        tried += [(list(ks), t) for ks in combinations(left, size)
                  if (t := _price(job, _moved(current, b, ks, devices))) is not None]
        best = min(tried, key=lambda kt: (-sign * (kt[1] - now), len(kt[0])), default=None)
        if best is not None and sign * (best[1] - now) > 0:  # it moves the step towards B
            return best
    if tried:
        return min(tried, key=lambda kt: (-sign * (kt[1] - now), len(kt[0])))
    return list(left), None  # nothing smaller is legal: the rest move together (to B)


def knob_path(job, a, b, end_step_s: float) -> list[dict[str, Any]]:
    """``[{knob, from, to, step_time_s, delta_s, combined?, note?}]``: the steps from strategy ``a`` to ``b``
    (``end_step_s``: B's step time, where the last move lands); the deltas add up to B - A."""
    from asap.spec.knobs import plain_value

    current, now = a, _price(job, a)
    if now is None:
        return []
    sign = -1.0 if end_step_s <= now else 1.0
    left, path = _differing(a, b), []
    while left:
        knobs, step = _next_step(job, current, b, left, sign, now)
        current = _moved(current, b, knobs, job.cluster.num_devices)
        step = end_step_s if step is None or len(knobs) == len(left) else step
        row: dict[str, Any] = {"knob": "+".join(knobs), "step_time_s": step, "delta_s": step - now}
        if len(knobs) == 1:
            row.update({"from": plain_value(getattr(a, knobs[0])), "to": plain_value(getattr(b, knobs[0]))})
        else:
            row.update({"from": {k: plain_value(getattr(a, k)) for k in knobs},
                        "to": {k: plain_value(getattr(b, k)) for k in knobs}, "combined": True,
                        "note": "moved together: no single one of them is a legal step towards B here"})
        path.append(row)
        left = [k for k in left if k not in knobs]
        now = step
    return path


def _value_text(v) -> str:
    if isinstance(v, (tuple, list)):  # a layer split: its chunks, or the default split
        return "/".join(map(str, v)) if v else "default"
    return str(v)


def path_lines(path: list[dict[str, Any]], name_a: str, name_b: str) -> list[str]:
    """The path as text: one line a move, its step and its delta."""
    if not path:
        return []
    out = [f"from {name_a} to {name_b}, one knob at a time (each the move that explains most of what is left):"]
    for r in path:
        if r.get("combined"):
            moves = ", ".join(f"{k} {_value_text(v)} -> {_value_text(r['to'][k])}" for k, v in r["from"].items())
            what = f"{r['knob']} together ({moves}; no single one is a legal step towards B)"
        else:
            what = f"{r['knob']} {_value_text(r['from'])} -> {_value_text(r['to'])}"
        out.append(f"  {what}: {r['step_time_s']:.4g} s ({r['delta_s']:+.3g} s)")
    return out
