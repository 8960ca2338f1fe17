"""Two sets of traces of one job, before and after a change, compared term by term and operator by operator
(``asap diagnose --compare BEFORE... -- AFTER...``), as HolisticTraceAnalysis's trace diff does.

Each side is diagnosed on its own (``asap.profile.diagnose``: per-step figures averaged over step windows and
ranks) on one roofline, the before side's. Within a step window the device is computing, communicating with
nothing to hide it, or idle, so

    step_time_s = compute_s + exposed_communication_s + idle_s

on each side, and the change of the step is the sum of the changes of those three terms: the largest of them
in the direction the step moved is the one that explains it. ``communication_s`` (all communication, hidden or
not) changes too, and is reported alongside. Operators are matched by name; an operator's change is its
per-step, per-rank time after less before, the operators that moved most first (one that exists on one side
only is ``added`` or ``removed``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from asap.errors import AsapError
from asap.profile.devices import Roofline
from asap.profile.diagnose import AcceleratorHint, Diagnosis, check_one_job, choose_roofline, diagnose_timelines
from asap.profile.load import load_timelines
from asap.profile.trace import Timeline, expand_paths

TERMS = ("step_time_s", "compute_s", "communication_s", "exposed_communication_s", "idle_s")
PARTS = ("compute_s", "exposed_communication_s", "idle_s")  # they add up to the step
_WORDS = {"compute_s": "compute", "communication_s": "communication",
          "exposed_communication_s": "exposed communication", "idle_s": "idle"}
ALL_OPS = 10 ** 9  # diagnose every operator, not only the top ones


def _timelines(paths: Sequence[str | Path], side: str) -> list[Timeline]:
    if not paths:
        raise AsapError(side, "no traces given (asap diagnose --compare BEFORE... -- AFTER...)")
    timelines = [tl for p in expand_paths(list(paths)) for tl in load_timelines(p)]
    try:
        check_one_job(timelines)
    except AsapError as e:
        raise AsapError(side, f"traces {e.problem}") from None
    return timelines


def summary(d: Diagnosis) -> dict:
    """One side's per-step figures, its bottleneck, how many step windows and ranks, and its traces."""
    out = {k: getattr(d, k) for k in TERMS}
    out.update(busy_fraction=d.busy_fraction, bottleneck=d.bottleneck, n_steps=d.n_steps, ranks=len(d.ranks),
               traces=d.traces)
    return out


def ops_moved(before: Diagnosis, after: Diagnosis, top: int) -> list[dict]:
    """Operators by name, per step and rank, ordered by how far their time moved (largest first)."""
    a = {r.name: r for r in before.top_ops}
    b = {r.name: r for r in after.top_ops}
    rows: list[dict] = []
    for name in dict.fromkeys([*a, *b]):
        ra, rb = a.get(name), b.get(name)
        either = rb or ra
        assert either is not None  # the name is in one table or the other
        t_a, t_b = (ra.time_s if ra else 0.0), (rb.time_s if rb else 0.0)
        status = "removed" if rb is None else "added" if ra is None else "changed"
        rows.append({"name": name, "before_s": t_a, "after_s": t_b, "delta_s": t_b - t_a,
                     "calls_before": ra.calls if ra else 0.0, "calls_after": rb.calls if rb else 0.0,
                     "bound": either.bound, "status": status})
    rows.sort(key=lambda r: (-abs(r["delta_s"]), r["name"]))
    return rows[:top]


def verdict(before: dict, after: dict, deltas: dict, moved: list[dict]) -> str:
    """One sentence: faster or slower by how much, the term that explains it, and the operator that moved most."""
    step_a, step_b = before["step_time_s"], after["step_time_s"]
    change = deltas["step_time_s"]
    rel = change / step_a if step_a > 0 else 0.0
    direction = "faster" if change < 0 else "slower" if change > 0 else "unchanged"
    sign = -1.0 if change < 0 else 1.0
    term = max(PARTS, key=lambda k: sign * deltas[k])
    text = (f"after is {direction}: step {step_a:.4g} s -> {step_b:.4g} s ({rel:+.1%}), mostly "
            f"{_WORDS[term]} ({deltas[term]:+.4g} s)")
    if moved:
        m = moved[0]
        text += f"; the operator that moved most is {m['name'][:80]} ({m['delta_s']:+.4g} s per step, {m['status']})"
    return text + "."


def compare_timelines(before: list[Timeline], after: list[Timeline], roofline: Roofline | None = None,
                      top: int = 10) -> dict:
    """``{before, after, deltas_s: {term: after - before}, ops_moved, verdict, roofline}``."""
    if roofline is None:
        roofline, _ = choose_roofline(before, None)
    d_a = diagnose_timelines(before, roofline, top=ALL_OPS)
    d_b = diagnose_timelines(after, roofline, top=ALL_OPS)
    s_a, s_b = summary(d_a), summary(d_b)
    deltas = {k: s_b[k] - s_a[k] for k in TERMS}
    moved = ops_moved(d_a, d_b, top)
    notes = [f"before: {n}" for n in d_a.notes] + [f"after: {n}" for n in d_b.notes]
    return {"before": s_a, "after": s_b, "deltas_s": deltas, "ops_moved": moved,
            "verdict": verdict(s_a, s_b, deltas, moved), "roofline": roofline.to_dict(), "notes": notes}


def compare_traces(before_paths: Sequence[str | Path], after_paths: Sequence[str | Path],
                   accelerator: AcceleratorHint = None, top: int = 10) -> dict:
    """Compare two sets of traces (files or folders, one per rank) of one job: what changed, term by term."""
    before = _timelines(before_paths, "before")
    after = _timelines(after_paths, "after")
    roofline, _ = choose_roofline(before, accelerator)
    return compare_timelines(before, after, roofline, top)
