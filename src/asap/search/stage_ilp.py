"""The pipeline-stage ILP over ``search.stages``' problem.

Variables (all binary): b[l, j] = 1 if unit l sits in a virtual stage <= j (a monotone prefix, which makes
every stage a contiguous run), x[l, j] = b[l, j] - b[l, j-1] (unit l in stage j), r[j] = 1 if stage j runs full
recompute, z[l, j] = x[l, j] r[j] (linearised). T_max is continuous.

    minimise   (m - 1) T_max + (1 + (pp - 1) / vpp) / pp * sum_d T_d   (cost/pipeline.py's closed form)
    subject to T_d = sum_{j on d} sum_l (t_l x[l, j] + dt_l z[l, j]) <= T_max         for each device d
               sum_{j on d} sum_l (w_l x[l, j] + f_d (a_l x[l, j] - da_l z[l, j])) <= HBM   for each device d
               every stage holds at least one unit; the embedding is in stage 0, the head in the last
where t_l is the unit's time, dt_l the extra time of full recompute, a_l its stored activations, da_l what full
recompute saves, w_l its model states, and f_d the micro-batches device d keeps in flight (1F1B: min(m, pp-d);
interleaved: ((pp-d-1)*2 + (vpp-1)*pp + 1)/vpp chunks' worth). Solved by HiGHS (highspy) to a 0.1% gap
under a deterministic work limit (branch-and-bound nodes, not seconds: the same input gives the same split on
any machine load), started from the better of the uniform split (Megatron's default: equal layer counts) and
a balanced greedy split, so it never returns worse than either.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix

from asap.cost.device_memory import GB
from asap.errors import AsapError
from asap.search.stages import (StageProblem, StageSplit, _tail_units, _units_per_stage_bounds, heuristic_split,
                                price_split)
from asap.spec.knobs import Recompute


# ------------------------------------------------------------------------------------------------------------
# The ILP
# ------------------------------------------------------------------------------------------------------------


class _Rows:
    """Constraint rows accumulated as COO triplets (vectorized blocks, no per-entry Python loop)."""

    r: list[np.ndarray]  # the triplets' row, column and value blocks
    c: list[np.ndarray]
    v: list[np.ndarray]
    lo: list[np.ndarray]  # each block's row bounds
    hi: list[np.ndarray]

    def __init__(self, n: int):
        self.n, self.count = n, 0
        self.r, self.c, self.v, self.lo, self.hi = [], [], [], [], []

    def block(self, cols: list[np.ndarray], vals: list, lo, hi) -> None:
        """One row per element of the broadcast index arrays in ``cols`` (terms of each row side by side)."""
        shape = np.broadcast_shapes(*[np.shape(c) for c in cols], *[np.shape(v) for v in vals])
        k = int(np.prod(shape))
        rows = self.count + np.arange(k)
        for col, val in zip(cols, vals, strict=True):
            self.r.append(rows)
            self.c.append(np.broadcast_to(np.asarray(col), shape).ravel())
            self.v.append(np.broadcast_to(np.asarray(val, dtype=float), shape).ravel())
        self.lo.append(np.full(k, lo, dtype=float))
        self.hi.append(np.full(k, hi, dtype=float))
        self.count += k

    def row(self, cols: np.ndarray, vals: np.ndarray, lo, hi) -> None:
        """One row with many terms."""
        self.r.append(np.full(len(cols), self.count))
        self.c.append(np.asarray(cols))
        self.v.append(np.asarray(vals, dtype=float))
        self.lo.append(np.array([lo], dtype=float))
        self.hi.append(np.array([hi], dtype=float))
        self.count += 1

    def matrix(self):
        A = coo_matrix((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                       shape=(self.count, self.n))  # duplicates are summed
        return A.tocsc(), np.concatenate(self.lo), np.concatenate(self.hi)


@dataclass
class _Columns:
    """Column indices of the ILP's variables: b[l, j], z[l, j], r[j], then T_max."""

    U: int
    S: int

    def __post_init__(self):
        L, J = np.meshgrid(np.arange(self.U), np.arange(self.S), indexing="ij")  # unit l, stage j
        self.J = J
        self.B = L * self.S + J
        self.Z = self.U * self.S + self.B
        self.R = 2 * self.U * self.S + np.arange(self.S)
        self.n = 2 * self.U * self.S + self.S + 1
        self.it = self.n - 1


def _unit_arrays(prob: StageProblem):
    return tuple(np.array([getattr(u, f) for u in prob.units], dtype=float)
                 for f in ("time_s", "recompute_extra_s", "act_bytes", "act_saved_bytes", "state_bytes", "once"))


def _constraints(prob: StageProblem, v: _Columns, scale_t: float, scale_m: float):
    """Contiguity, z = x r, and per device: time <= T_max, memory <= HBM (as COO blocks)."""
    t, dt, a, da, w, once = _unit_arrays(prob)
    B, Z, R, S, U, pp = v.B, v.Z, v.R, v.S, v.U, prob.pp
    rows = _Rows(v.n)
    rows.block([B[:, :-1], B[:, 1:]], [1.0, -1.0], -np.inf, 0.0)  # b[l, j] <= b[l, j+1]
    rows.block([B[1:, :], B[:-1, :]], [1.0, -1.0], -np.inf, 0.0)  # prefix: b[l+1, j] <= b[l, j]
    lo, hi = _units_per_stage_bounds(prob)
    for j in range(S):  # x[l, j] = b[l, j] - b[l, j-1]; stage j holds at least one unit
        cols = B[:, j] if j == 0 else np.concatenate([B[:, j], B[:, j - 1]])
        vals = np.ones(U) if j == 0 else np.concatenate([np.ones(U), -np.ones(U)])
        rows.row(cols, vals, lo[j], hi[j])
    # z = x r, linearised: z <= x, z <= r, z >= x + r - 1 (first stage: x = b)
    prev = np.where(v.J > 0, B - 1, 0)
    has_prev = (v.J > 0).astype(float)
    r_col = R[None, :] + 0 * B
    rows.block([Z, B, prev], [1.0, -1.0, has_prev], -np.inf, 0.0)
    rows.block([Z, r_col], [1.0, -1.0], -np.inf, 0.0)
    rows.block([Z, r_col, B, prev], [1.0, -1.0, -1.0, has_prev], -1.0, np.inf)
    # b[l, j] carries +coef of stage j and -coef of stage j+1
    on_dev = (np.arange(S)[None, :] % pp) == np.arange(pp)[:, None]  # [d, j]
    next_on_dev = np.zeros_like(on_dev)
    next_on_dev[:, :-1] = on_dev[:, 1:]
    for d in range(pp):
        held = np.where(once > 0, 1.0, prob.in_flight(d))
        sign = on_dev[d][None, :].astype(float) - next_on_dev[d][None, :]
        coef_t, coef_zt = t[:, None] * sign / scale_t, dt[:, None] * on_dev[d][None, :] / scale_t
        rows.row(np.concatenate([B.ravel(), Z.ravel(), [v.it]]),
                 np.concatenate([coef_t.ravel(), coef_zt.ravel(), [-1.0]]), -np.inf, 0.0)
        coef_m = (w + held * a)[:, None] * sign / scale_m
        coef_zm = -(held * da)[:, None] * on_dev[d][None, :] / scale_m
        rows.row(np.concatenate([B.ravel(), Z.ravel()]), np.concatenate([coef_m.ravel(), coef_zm.ravel()]),
                 -np.inf, 1.0)
    return rows.matrix()


def _objective_and_bounds(prob: StageProblem, v: _Columns, scale_t: float, allow_recompute_choice: bool):
    """(m-1) T_max + (1 + (pp-1)/vpp)/pp * total time (the layers' own time telescopes to a constant, so only
    recompute's extra time varies); every unit placed, the embedding in stage 0, MTP and the head in the last."""
    dt = np.array([u.recompute_extra_s for u in prob.units])
    pp, S = prob.pp, v.S
    c = np.zeros(v.n)
    c[v.it] = prob.micro_batches - 1
    c[v.Z.ravel()] = ((1 + (pp - 1) / prob.vpp) / pp * dt[:, None] / scale_t * np.ones((1, S))).ravel()
    lb, ub = np.zeros(v.n), np.ones(v.n)
    ub[v.it] = np.inf
    lb[v.B[:, S - 1]] = 1.0
    lb[v.B[0, 0]] = 1.0
    if S > 1:  # the head and the MTP modules in the last stage, so a layer split describes the placement
        ub[v.B[_tail_units(prob), S - 2]] = 0.0
    if not allow_recompute_choice or prob.base_recompute.kind == Recompute.FULL:  # recompute fixed to the strategy's
        lb[v.R] = ub[v.R] = 1.0 if prob.base_recompute.kind == Recompute.FULL else 0.0
    return c, lb, ub


OPTIMALITY_GAP = 0.001  # a split whose slowest device is this close to the lower bound is taken as optimal
MIP_REL_GAP = 0.001  # HiGHS stops once its incumbent is proven within 0.1% of the optimum
# The deterministic work limit: HiGHS stops after this many branch-and-bound nodes (a count, so the result does
# not depend on machine load the way a time limit does). DeepSeek-V3's splits on 2048 H800 close at the root
# node or within 3 nodes; the limit bounds pathological cases. Presolve is off: on these chains it spent 85% of
# the solve (3.8 of 4.4 s, probing the prefix variables) for no smaller tree, and HiGHS's heuristics and
# symmetry detection find nothing the MIP start does not already give.
ILP_WORK_LIMIT_NODES = 500
# The root LP grows with units x stages: DeepSeek-V3's 64 units over 16 stages (1024 cells) solve in about a
# second; Llama 3.1 405B's 128 units over 64 interleaved chunks (8192 cells) took 21,629 simplex iterations and
# minutes at the root. Above this size the balanced heuristic split (within a few tenths of a percent of the
# lower bound on even chains) is returned, also deterministically.
ILP_MAX_CELLS = 2048


def _near_lower_bound(prob: StageProblem, split: StageSplit) -> bool:
    """No device can be faster than the mean device or than its largest unit (recompute only adds time), so a
    split at that bound, without extra recompute, cannot be improved by more than ``OPTIMALITY_GAP``."""
    times = [u.time_s for u in prob.units]
    bound = max(sum(times) / prob.pp, max(times))
    no_extra = not any(split.recompute) or prob.base_recompute.kind == Recompute.FULL
    return no_extra and max(split.device_time_s) <= bound * (1 + OPTIMALITY_GAP)


def solve_split(prob: StageProblem, time_limit_s: float | None = None, allow_recompute_choice: bool = True,
                work_limit_nodes: int = ILP_WORK_LIMIT_NODES) -> StageSplit:
    """Optimal contiguous split with per-stage full recompute, by HiGHS; raises AsapError if infeasible.
    ``work_limit_nodes`` bounds the search deterministically; ``time_limit_s`` (None: none) adds a wall-clock
    limit, which makes the answer depend on machine load."""
    U, S = len(prob.units), prob.stages
    if S > U:
        raise AsapError("strategy.pp", f"pp*vpp = {S} stages exceed the {U} units of the model")
    tail = len(_tail_units(prob))
    if U - tail + 1 == S:  # one block per stage (MTP and the head together): the only split there is
        split = price_split(prob, [1] * (S - 1) + [tail], [prob.base_recompute.kind == Recompute.FULL] * S)
        split.solver = "the only split (one unit per stage)"
        return split
    v = _Columns(U, S)
    scale_t = max(sum(u.time_s for u in prob.units), 1e-12)
    A, lo, hi = _constraints(prob, v, scale_t, max(prob.hbm_bytes, 1.0))
    c, lb, ub = _objective_and_bounds(prob, v, scale_t, allow_recompute_choice)
    start = heuristic_split(prob, allow_recompute_choice)
    if start is not None and start.fits and _near_lower_bound(prob, start):
        start.solver = f"heuristic (within {OPTIMALITY_GAP:.1%} of the lower bound; HiGHS not needed)"
        return start
    if start is not None and start.fits and U * S > ILP_MAX_CELLS:
        start.solver = f"heuristic ({U} units x {S} stages is over the ILP's {ILP_MAX_CELLS}-cell work limit)"
        return start
    x0 = None
    if start is not None and start.fits:
        ub[v.it] = max(start.device_time_s) / scale_t * (1 + 1e-9)  # never worse than the heuristic
        x0 = _encode(prob, start, scale_t, v.n)
    x, status = _solve_highs(c, A, lo, hi, lb, ub, integer=np.arange(v.n - 1), x0=x0, time_limit_s=time_limit_s,
                            work_limit_nodes=work_limit_nodes)
    if x is None:
        if start is not None and start.fits:
            start.solver = "heuristic (HiGHS found nothing better: " + status + ")"
            return start
        raise AsapError("strategy", f"no split of {U} units over {S} stages fits in {prob.hbm_bytes / GB:.1f} GiB "
                                    f"({status})")
    b = np.round(x[:U * S].reshape(U, S))
    counts = [int(n) for n in np.diff(np.concatenate([[0.0], b.sum(axis=0)]))]
    split = price_split(prob, counts, [bool(round(r)) for r in x[v.R]])
    split.solver = f"HiGHS: {status}"
    if start is not None and start.fits and start.pipeline_time_s < split.pipeline_time_s:
        start.solver = f"heuristic (HiGHS: {status})"
        return start
    return split


def _encode(prob: StageProblem, split: StageSplit, scale_t: float, n: int) -> np.ndarray:
    """A split as a MIP start for the ILP's variables (b, z, r, T_max in that order)."""
    S = prob.stages
    stage_of = np.repeat(np.arange(S), split.boundaries)
    b = (stage_of[:, None] <= np.arange(S)[None, :]).astype(float)
    r = np.array(split.recompute, dtype=float)
    z = (stage_of[:, None] == np.arange(S)[None, :]) * r[None, :]
    x0 = np.concatenate([b.ravel(), z.ravel(), r, [max(split.device_time_s) / scale_t]])
    assert len(x0) == n
    return x0


@contextlib.contextmanager
def _quiet_stdout():
    """HiGHS prints its banner from C++ on file descriptor 1 before any option can silence it: send it to
    /dev/null, so that stdout stays one JSON document and a user's terminal stays free of it."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    try:
        yield
    finally:
        sys.stdout.flush()
        with contextlib.suppress(OSError, AttributeError):  # flush C stdio while it still points at /dev/null
            import ctypes

            ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def _solve_highs(c, A, row_lo, row_hi, lb, ub, integer, x0, time_limit_s, work_limit_nodes):
    import highspy

    with _quiet_stdout():
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        if time_limit_s is not None:
            h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("mip_max_nodes", int(work_limit_nodes))
        h.setOptionValue("mip_rel_gap", MIP_REL_GAP)
        h.setOptionValue("presolve", "off")
        h.setOptionValue("mip_heuristic_effort", 0.0)
        h.setOptionValue("mip_detect_symmetry", False)
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = A.shape[1], A.shape[0]
        lp.col_cost_, lp.col_lower_, lp.col_upper_ = c, lb, ub
        lp.row_lower_, lp.row_upper_ = row_lo, row_hi
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_, lp.a_matrix_.index_, lp.a_matrix_.value_ = A.indptr, A.indices, A.data
        kinds = np.full(A.shape[1], highspy.HighsVarType.kContinuous, dtype=object)
        kinds[integer] = highspy.HighsVarType.kInteger
        lp.integrality_ = kinds.tolist()
        h.passModel(lp)
        if x0 is not None:
            sol = highspy.HighsSolution()
            sol.col_value = list(x0)
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        status = h.modelStatusToString(h.getModelStatus())
        info = h.getInfo()
        if info.primal_solution_status != 2:  # kSolutionStatusFeasible
            return None, status
        return np.array(h.getSolution().col_value), status
