"""The planner's layer split: exact where the problem is a chain partition, a deterministic descent where not.

A split's time under the closed form (``asap.cost.pipeline``, ``search.stages.price_split``) is
``(m - 1) T_max + T_avg (1 + (pp - 1) / vpp)``; with the strategy's recompute on every stage (what a layer
split can express) the units' total time is fixed, so T_avg is a constant and the best split minimises the
slowest device's time T_max, subject to every device's memory fitting.

* One stage per device (vpp = 1): the classic linear partition of a chain into pp contiguous parts minimising
  the largest part ("bottleneck" partition, solvable exactly by dynamic programming: Bokhari 1988; Olstad and
  Manne 1995), with a memory bound per part (stage d keeps ``in_flight(d)`` micro-batches). ``exact_chain_split``
  is that DP over prefix sums, O(pp U^2) vectorised: exact, deterministic and a few milliseconds. Among splits
  of equal T_max it takes the one whose fullest device needs least memory.
* Interleaved stages (vpp > 1): device d sums the non-adjacent chunks d, d + pp, ...; that is no chain partition.
  ``descent_interleaved_split`` moves one unit across one chunk boundary at a time, steepest first, within
  ``search.stages``' bounds of the default split, lexicographically on (T_max, the sum of squared device times,
  the fullest device's memory), until no move improves: deterministic (a count of moves, not seconds).

Either way the planner prices the result with ``estimate`` itself and adopts it only where the estimate is
faster (``search.planner``), so the split a plan row shows is the one ``estimate`` reprices.
"""

from __future__ import annotations

import numpy as np

from asap.search.stages import (StageProblem, StageSplit, _tail_units, _units_per_stage_bounds, heuristic_split,
                               price_split)
from asap.spec.knobs import Recompute

TIE_REL = 1e-9  # step times this close are equal: the split needing less memory wins
DESCENT_MAX_MOVES = 2000


def _unit_figures(prob: StageProblem) -> tuple[np.ndarray, np.ndarray]:
    """Per unit: its time with the strategy's recompute, and its memory on each device ([pp, U])."""
    full = prob.base_recompute.kind == Recompute.FULL
    t = np.array([u.time_s + (u.recompute_extra_s if full else 0.0) for u in prob.units])
    act = np.array([u.act_bytes - (u.act_saved_bytes if full else 0.0) for u in prob.units])
    state = np.array([u.state_bytes for u in prob.units])
    once = np.array([u.once for u in prob.units])
    flight = np.array([prob.in_flight(d) for d in range(prob.pp)])
    held = np.where(once[None, :], 1.0, flight[:, None])
    return t, state[None, :] + held * act[None, :]


def _as_split(prob: StageProblem, counts: list[int], solver: str) -> StageSplit:
    split = price_split(prob, counts, [prob.base_recompute.kind == Recompute.FULL] * prob.stages)
    split.solver = solver
    return split


def exact_chain_split(prob: StageProblem) -> StageSplit | None:
    """The exact bottleneck partition for vpp = 1 (None where no split fits). The head and MTP modules form
    one block on the last stage; every stage holds at least one block."""
    assert prob.vpp == 1
    t, mem = _unit_figures(prob)
    tail = len(_tail_units(prob))
    n_units = len(t)
    # blocks: the units before the tail, then the tail as one
    bt = np.concatenate([t[:n_units - tail], [t[n_units - tail:].sum()]])
    bm = np.concatenate([mem[:, :n_units - tail], mem[:, n_units - tail:].sum(axis=1, keepdims=True)], axis=1)
    n, S = len(bt), prob.stages
    if S > n:
        return None
    P = np.concatenate([[0.0], np.cumsum(bt)])
    Q = np.concatenate([np.zeros((S, 1)), np.cumsum(bm, axis=1)], axis=1)
    seg_t = P[None, :] - P[:, None]  # [k, i]: blocks k .. i-1
    best_t = np.full((S, n + 1), np.inf)
    best_m = np.full((S, n + 1), np.inf)
    cut = np.zeros((S, n + 1), dtype=int)
    k_idx, i_idx = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    valid = i_idx > k_idx
    for j in range(S):
        seg_m = Q[j][None, :] - Q[j][:, None]
        ok = valid & (seg_m <= prob.hbm_bytes)
        if j == 0:
            cand_t = np.where(ok & (k_idx == 0), seg_t, np.inf)
            cand_m = np.where(ok & (k_idx == 0), seg_m, np.inf)
        else:
            cand_t = np.where(ok, np.maximum(best_t[j - 1][:, None], seg_t), np.inf)
            cand_m = np.where(ok, np.maximum(best_m[j - 1][:, None], seg_m), np.inf)
        low_t = cand_t.min(axis=0)
        tied = cand_t <= low_t[None, :] * (1 + TIE_REL)
        pick = np.argmin(np.where(tied, cand_m, np.inf), axis=0)
        best_t[j], cut[j] = cand_t[pick, np.arange(n + 1)], pick
        best_m[j] = cand_m[pick, np.arange(n + 1)]
    if not np.isfinite(best_t[S - 1, n]):
        return None
    counts, i = [], n
    for j in range(S - 1, -1, -1):
        k = int(cut[j, i])
        counts.append(i - k)
        i = k
    counts = counts[::-1]
    counts[-1] += tail - 1
    return _as_split(prob, counts, "exact bottleneck partition (dynamic programming)")


def _lex_best(cand_t: np.ndarray, cand_m: np.ndarray, hbm: float) -> int:
    """The index of the lexicographically least candidate ([..., pp] device figures) on: memory over the
    limit, T_max, the sum of squared device times, the fullest device's memory (the descent's order), equal to
    ``TIE_REL`` falling through; a key is computed only while more than one candidate is left."""
    keys = (lambda: np.maximum(cand_m - hbm, 0.0).sum(axis=-1), lambda: cand_t.max(axis=-1),
            lambda: (cand_t ** 2).sum(axis=-1), lambda: cand_m.max(axis=-1))
    alive = np.arange(len(cand_t))
    for key in keys[1:] if cand_m.max() <= hbm else keys:  # all within the limit: the first key is 0 for all
        if len(alive) == 1:
            break
        col = key()[alive]
        low = col.min()
        alive = alive[col <= low + TIE_REL * max(abs(low), 1e-30)]
    return int(alive[0])


def _move_table(S: int) -> tuple[np.ndarray, ...]:
    """Every single-unit move across a chunk boundary, by boundary then step (+1: the chunk after gives its
    first unit; -1: the chunk before gives its last): (boundary, step, chunk giving, chunk taking)."""
    b = np.repeat(np.arange(S - 1), 2)
    step = np.tile([1, -1], S - 1)
    return b, step, np.where(step == 1, b + 1, b), np.where(step == 1, b, b + 1)


def _moves(counts: np.ndarray, table: tuple[np.ndarray, ...], lo: np.ndarray, hi: np.ndarray, tail: int):
    """The legal moves of ``table`` (within the bounds; the head and MTP stay on the last chunk), each with the
    unit it moves: (boundary, step, chunk giving, chunk taking, unit index) as arrays."""
    b, step, give, take = table
    ok = (counts[give] - 1 >= np.maximum(lo[give], 1)) & (counts[take] + 1 <= hi[take])
    ok &= ~((give == len(counts) - 1) & (counts[give] - 1 < tail))
    ends = np.cumsum(counts)  # the start of chunk b + 1
    u = np.where(step == 1, ends[b], ends[b] - 1)
    return tuple(x[ok] for x in (b, step, give, take, u))


def _deltas(moves, t: np.ndarray, mem: np.ndarray, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """Each move's change to the device times and memories ([moves, pp])."""
    k = np.arange(len(moves[0]))
    give, take, u = moves[2] % pp, moves[3] % pp, moves[4]
    dt, dm = np.zeros((len(k), pp)), np.zeros((len(k), pp))
    # the same operations as one move at a time: 0 - x on the giving device, then + x on the taking one
    dt[k, give] = 0.0 - t[u]
    dt[k, take] += t[u]
    dm[k, give] = 0.0 - mem[give, u]
    dm[k, take] += mem[take, u]
    return dt, dm


def descent_interleaved_split(prob: StageProblem, pairs: bool = True, figures=None) -> StageSplit | None:
    """Steepest descent from the default split (module docstring): each round takes the best of every single
    unit move across one chunk boundary and (``pairs``) every pair of such moves on boundaries two or more
    apart (a pair passes the plateaus where two devices tie at T_max), until none improves. ``figures``:
    ``_unit_figures(prob)`` where the caller has them."""
    counts = list(prob.default_layers)
    tail = len(_tail_units(prob))
    if not counts:
        return None
    counts[0] += 1
    counts[-1] += tail
    S, pp = prob.stages, prob.pp
    if min(counts) < 1 or sum(counts) != len(prob.units):
        return None
    lo, hi = (np.array(x, dtype=float) for x in _units_per_stage_bounds(prob))
    t, mem = _unit_figures(prob) if figures is None else figures
    starts = np.concatenate([[0], np.cumsum(counts)])
    dev_t, dev_m = np.zeros(pp), np.zeros(pp)
    for j in range(S):
        dev_t[j % pp] += t[starts[j]:starts[j + 1]].sum()
        dev_m[j % pp] += mem[j % pp, starts[j]:starts[j + 1]].sum()
    at, table = np.array(counts), _move_table(S)
    for _ in range(DESCENT_MAX_MOVES):
        moves = _moves(at, table, lo, hi, tail)
        n = len(moves[0])
        if not n:
            break
        dt, dm = _deltas(moves, t, mem, pp)
        b = moves[0]
        apart = np.abs(b[:, None] - b[None, :]) >= 2
        i1, i2 = np.nonzero(np.triu(apart, 1)) if pairs else (np.zeros(0, int), np.zeros(0, int))
        cand_t = np.concatenate([dev_t[None, :], dev_t + dt, dev_t + dt[i1] + dt[i2]])
        cand_m = np.concatenate([dev_m[None, :], dev_m + dm, dev_m + dm[i1] + dm[i2]])
        best = _lex_best(cand_t, cand_m, prob.hbm_bytes)
        if best == 0:
            break
        for k in [best - 1] if best <= n else [i1[best - 1 - n], i2[best - 1 - n]]:
            at[b[k]] += moves[1][k]
            at[b[k] + 1] -= moves[1][k]
        dev_t, dev_m = cand_t[best], cand_m[best]
    how = "single and paired moves" if pairs else "single moves"
    return _as_split(prob, at.tolist(), f"steepest descent over chunk boundaries ({how})")


def planner_splits(prob: StageProblem) -> list[StageSplit]:
    """The splits the planner prices for one strategy (``estimate`` picks among them): the exact partition for
    vpp = 1; for interleaved stages the descents with single and with paired moves and the balanced greedy
    fill (``search.stages.heuristic_split``), since the closed form they optimise does not see what unequal
    chunks stall (the estimate's event simulation does)."""
    if prob.stages > len(prob.units):
        return []
    if prob.vpp == 1:
        found = [exact_chain_split(prob)]
    else:
        figures = _unit_figures(prob)
        found = [descent_interleaved_split(prob, pairs=False, figures=figures),
                 descent_interleaved_split(prob, pairs=True, figures=figures),
                 heuristic_split(prob, allow_recompute_choice=False)]
        if found[-1] is not None and not found[-1].solver:
            found[-1].solver = "balanced greedy fill (the stage time capped by bisection)"
    out, seen = [], set()
    for split in found:
        if split is not None and split.fits and tuple(split.layers_per_stage) not in seen:
            seen.add(tuple(split.layers_per_stage))
            out.append(split)
    return out
