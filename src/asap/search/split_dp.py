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


def _keys(dev_t: np.ndarray, dev_m: np.ndarray, hbm: float) -> np.ndarray:
    """Per candidate ([..., pp] device figures): memory over the limit, T_max, the sum of squared device
    times, the fullest device's memory: the descent's lexicographic order."""
    return np.stack([np.maximum(dev_m - hbm, 0.0).sum(axis=-1), dev_t.max(axis=-1), (dev_t ** 2).sum(axis=-1),
                     dev_m.max(axis=-1)], axis=-1)


def _lex_best(keys: np.ndarray) -> int:
    """The index of the lexicographically least row of ``keys``, equal to ``TIE_REL`` falling through."""
    alive = np.arange(len(keys))
    for c in range(keys.shape[1]):
        col = keys[alive, c]
        low = col.min()
        alive = alive[col <= low + TIE_REL * max(abs(low), 1e-30)]
    return int(alive[0])


def _moves(counts: list[int], lo, hi, tail: int):
    """Every legal single-unit move: (boundary, +1 or -1, chunk giving, chunk taking, unit index)."""
    S = len(counts)
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = []
    for b in range(S - 1):
        for step in (1, -1):
            give, take = (b + 1, b) if step == 1 else (b, b + 1)
            if counts[give] - 1 < max(lo[give], 1) or counts[take] + 1 > hi[take]:
                continue
            if give == S - 1 and counts[give] - 1 < tail:  # the head and MTP stay on the last chunk
                continue
            out.append((b, step, give, take, int(starts[b + 1] if step == 1 else starts[b + 1] - 1)))
    return out


def _deltas(moves, t: np.ndarray, mem: np.ndarray, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """Each move's change to the device times and memories ([moves, pp])."""
    k = np.arange(len(moves))
    give, take, u = (np.array([mv[i] for mv in moves], dtype=np.int64) for i in (2, 3, 4))
    give, take = give % pp, take % pp
    dt, dm = np.zeros((len(moves), pp)), np.zeros((len(moves), pp))
    # the same operations as one move at a time: 0 - x on the giving device, then + x on the taking one
    dt[k, give] = 0.0 - t[u]
    dt[k, take] += t[u]
    dm[k, give] = 0.0 - mem[give, u]
    dm[k, take] += mem[take, u]
    return dt, dm


def descent_interleaved_split(prob: StageProblem, pairs: bool = True) -> StageSplit | None:
    """Steepest descent from the default split (module docstring): each round takes the best of every single
    unit move across one chunk boundary and (``pairs``) every pair of such moves on boundaries two or more
    apart (a pair passes the plateaus where two devices tie at T_max), until none improves."""
    counts = list(prob.default_layers)
    tail = len(_tail_units(prob))
    if not counts:
        return None
    counts[0] += 1
    counts[-1] += tail
    S, pp = prob.stages, prob.pp
    if min(counts) < 1 or sum(counts) != len(prob.units):
        return None
    lo, hi = _units_per_stage_bounds(prob)
    t, mem = _unit_figures(prob)
    starts = np.concatenate([[0], np.cumsum(counts)])
    dev_t, dev_m = np.zeros(pp), np.zeros(pp)
    for j in range(S):
        dev_t[j % pp] += t[starts[j]:starts[j + 1]].sum()
        dev_m[j % pp] += mem[j % pp, starts[j]:starts[j + 1]].sum()
    for _ in range(DESCENT_MAX_MOVES):
        moves = _moves(counts, lo, hi, tail)
        if not moves:
            break
        dt, dm = _deltas(moves, t, mem, pp)
        b = np.array([mv[0] for mv in moves])
        apart = np.abs(b[:, None] - b[None, :]) >= 2
        i1, i2 = np.nonzero(np.triu(apart, 1)) if pairs else (np.zeros(0, int), np.zeros(0, int))
        cand_t = np.concatenate([dev_t[None, :], dev_t + dt, dev_t + dt[i1] + dt[i2]])
        cand_m = np.concatenate([dev_m[None, :], dev_m + dm, dev_m + dm[i1] + dm[i2]])
        best = _lex_best(_keys(cand_t, cand_m, prob.hbm_bytes))
        if best == 0:
            break
        chosen = [best - 1] if best <= len(moves) else [i1[best - 1 - len(moves)], i2[best - 1 - len(moves)]]
        for k in chosen:
            bb, step = moves[k][0], moves[k][1]
            counts[bb] += step
            counts[bb + 1] -= step
        dev_t, dev_m = cand_t[best], cand_m[best]
    how = "single and paired moves" if pairs else "single moves"
    return _as_split(prob, counts, f"steepest descent over chunk boundaries ({how})")


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
        found = [descent_interleaved_split(prob, pairs=False), descent_interleaved_split(prob, pairs=True),
                 heuristic_split(prob, allow_recompute_choice=False)]
        if found[-1] is not None and not found[-1].solver:
            found[-1].solver = "balanced greedy fill (the stage time capped by bisection)"
    out, seen = [], set()
    for split in found:
        if split is not None and split.fits and tuple(split.layers_per_stage) not in seen:
            seen.add(tuple(split.layers_per_stage))
            out.append(split)
    return out
