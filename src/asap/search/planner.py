"""``asap plan``: every legal configuration priced at once, pruned by memory, ranked by step time.

1. enumerate the legal space (``search.space``) with the ``--fix`` keys pinned;
2. price peak memory for all of it (vectorized) and drop what does not fit (unless ``include_oom``);
3. price the step time of the rest in chunks (a progress callback per chunk);
4. return the fastest N, and the Pareto front of step time against peak memory.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from asap.cost.batch import StrategyBatch, expand
from asap.cost.estimate import UNIT_KEYS, Estimate, estimate, estimate_batch, estimate_from_batch, framework_of
from asap.cost.memory import MemoryBreakdown, memory
from asap.cost.units import device_figures, unit_times
from asap.errors import AsapError
from asap.search.mesh import tpu_mesh
from asap.search.space import enumerate_space
from asap.search.stages import build_problem, simulate_split, solve_split, uniform_split_or_none
from asap.spec.hardware import Cluster
from asap.spec.legality import check_offered
from asap.spec.layout import layout
from asap.spec.model import ModelSpec
from asap.spec.strategy import check_strategy, complete_strategy
from asap.spec.train import TrainSpec

CHUNK = 131072
# A layer split can only remove the stages' imbalance (the heaviest stage's excess over the mean): when the
# estimate puts it under this share of the step, no split gains more than the model resolves, and the ILP is
# not run.
ILP_MIN_IMBALANCE = 0.01
ILP_TIME_LIMIT_S = 0.2  # HiGHS per candidate; the heuristic start is already within a few tenths of a percent
# The whole search's budget (``plan --time-limit``): past it no further chunk is priced and no ILP is started,
# and the result says so (``stopped_early``, ``stop_reason``). The calibration cases take under 5 s on 2 cores.
PLAN_TIME_LIMIT_S = 60.0


class NoFitError(AsapError):
    """Legal strategies exist, but none fits in device memory."""


@dataclass
class PlanResult:
    candidates: list[Estimate]
    pareto: list[Estimate]
    searched: int
    fitting: int
    search_time_s: float
    meshes: list[dict[str, int] | None] = field(default_factory=list)
    stage_splits: list[dict[str, Any] | None] = field(default_factory=list)
    distinct: bool = True  # candidates are the fastest of each (tp, pp, cp, ep) shape
    space: int = 0  # legal configurations in the space (``searched`` is how many of them were priced)
    time_limit_s: float | None = None
    stopped_early: bool = False
    stop_reason: str | None = None

    def ties(self) -> list[bool]:
        """Whether each candidate's error band reaches the best one's: the model cannot tell them apart."""
        if not self.candidates:
            return []
        best_high = self.candidates[0].step_time_range_s[1]
        return [e.step_time_range_s[0] <= best_high for e in self.candidates]

    def to_dict(self) -> dict[str, Any]:
        cands = []
        n = len(self.candidates)
        for est, mesh, split, tie in zip(self.candidates, self.meshes or [None] * n, self.stage_splits or [None] * n,
                                         self.ties()):
            d = est.to_dict()
            d["tie_with_best"] = tie
            if mesh is not None:
                d["mesh"] = mesh
            if split is not None:
                d["stage_split"] = split
            cands.append(d)
        return {
            "candidates": cands,
            "searched": self.searched,
            "fitting": self.fitting,
            "search_time_s": self.search_time_s,
            "pareto": [{"strategy": e.strategy.to_dict(), "strategy_string": str(e.strategy),
                        "step_time_s": e.step_time_s, "peak_memory_gb": e.peak_memory_gb} for e in self.pareto],
            "distinct": self.distinct,
            "space": self.space or self.searched,
            "time_limit_s": self.time_limit_s,
            "stopped_early": self.stopped_early,
            "stop_reason": self.stop_reason,
        }


def explain_empty_space(model: ModelSpec, cluster: Cluster, train: TrainSpec, fixed: dict[str, Any]) -> AsapError:
    """Why no legal strategy exists: the first rule the pinned keys break, named like ``estimate`` names it."""
    try:
        fw = framework_of(train, cluster)
        s = complete_strategy(fixed, cluster.num_devices, field="fix", framework=fw)
        check_strategy(s, model, train, cluster.num_devices, field="fix", framework=fw)
    except AsapError as e:
        return e
    return AsapError("fix", f"no legal strategy keeps {fixed} for {model.name} on {cluster.num_devices} devices "
                            f"with global batch {train.global_batch}")


def pareto_front(step_s: np.ndarray, mem_gb: np.ndarray, by_step: np.ndarray | None = None) -> np.ndarray:
    """Indices of the configurations no other beats on both step time and peak memory, fastest first.
    ``by_step``: the indices already sorted by step time (stable), when the caller has them."""
    order = np.argsort(step_s, kind="stable") if by_step is None else by_step
    mem = mem_gb[order]
    prev = np.concatenate(([np.inf], np.minimum.accumulate(mem)[:-1]))
    front = order[mem < prev]
    # equal step times: only the one with the least memory is on the front
    same_step_next = np.concatenate((step_s[front][1:] == step_s[front][:-1], [False]))
    return front[~same_step_next]


class Deadline:
    """The search's time budget from its start (``limit_s`` None: none); ``notes`` say what it cut short."""

    def __init__(self, t0: float, limit_s: float | None):
        if limit_s is not None and not (limit_s > 0 and math.isfinite(limit_s)):
            raise AsapError("time-limit", f"must be a positive number of seconds, got {limit_s!r}")
        self.t0, self.limit_s = t0, limit_s
        self.notes: list[str] = []

    def passed(self) -> bool:
        return self.limit_s is not None and time.perf_counter() - self.t0 > self.limit_s


def chunk_order(n_chunks: int) -> list[int]:
    """Chunks in bit-reversed order (0, n/2, n/4, 3n/4, ...): a search stopped by its time limit has priced
    chunks spread over the whole space (its mesh shapes come in order), not only its first shapes."""
    bits = max(n_chunks - 1, 1).bit_length()
    return sorted(range(n_chunks), key=lambda k: int(format(k, f"0{bits}b")[::-1], 2))


def price_space(model: ModelSpec, cluster: Cluster, train: TrainSpec, S: StrategyBatch, include_oom: bool,
                fixed: dict[str, Any], progress: Callable[[int, int], None] | None, deadline: Deadline | None = None):
    """Chunk by chunk (at most CHUNK rows in memory at a time): the unit and device figures once, peak memory
    of every row, then the step times of the rows that fit (all of them with ``include_oom``): (the kept rows,
    their memory, their step times, how many fit, how many were priced). Past the deadline no further chunk
    is priced (at least one always is)."""
    total = len(S)
    n_chunks = -(-total // CHUNK)
    kept, mems, steps, n_fit, smallest, priced = [], [], [], 0, (np.inf, -1), 0
    fw = framework_of(train, cluster)
    for done, k in enumerate(chunk_order(n_chunks)):
        if done and deadline is not None and deadline.passed():
            deadline.notes.append(f"time limit of {deadline.limit_s:g} s reached: priced {priced:,} of {total:,} "
                                  f"configurations ({done} of {n_chunks} chunks, spread over the "
                                  f"space); the ranking covers those only")
            break
        part = S.take(slice(k * CHUNK, (k + 1) * CHUNK))
        idx = np.arange(k * CHUNK, k * CHUNK + len(part))
        ut = unit_times(model, cluster, train, part, UNIT_KEYS)
        f = device_figures(model, train, part, ut, fw.selective)
        mem = memory(model, cluster.accelerator, train, part, figures=f, framework=fw)
        fits = mem.peak_gb <= cluster.hbm_gb
        n_fit += int(fits.sum())
        j = int(np.argmin(mem.peak_gb))
        smallest = min(smallest, (float(mem.peak_gb[j]), int(idx[j])))
        rows = np.arange(len(part)) if include_oom else np.nonzero(fits)[0]
        if len(rows):
            mems.append(expand(mem, rows))
            steps.append(estimate_batch(model, cluster, train, part.take(rows), mem=mems[-1],
                                        figures=f.subset(rows), unit=ut.subset(rows)).step_time_s)
            kept.append(idx[rows])
        priced += len(part)
        if progress:
            progress(priced, total)
    if n_fit == 0 and not include_oom:
        cut = " before the time limit" if priced < total else ""
        raise NoFitError("fix" if fixed else "cluster",
                         f"no strategy fits in {cluster.hbm_gb:g} GiB per device (searched {priced}{cut}); the "
                         f"smallest needs {smallest[0]:.1f} GiB ({S.strategy(smallest[1])})")
    rows = np.concatenate(kept)
    order = np.argsort(rows, kind="stable")  # the space's own order, whatever order the chunks were priced in
    return (S.take(rows[order]), expand(MemoryBreakdown.concatenate(mems), order), np.concatenate(steps)[order],
            n_fit, priced)


def first_per_shape(S: StrategyBatch, by_step: np.ndarray) -> np.ndarray:
    """The fastest row of each parallel shape (tp, pp, cp, ep), in step-time order: what differs between the
    rows ``plan`` shows by default (rows differing only in vpp, mbs or ZeRO stage are variations of one shape)."""
    key = ((S.tp.astype(np.int64) * 8192 + S.pp) * 8192 + S.cp) * 65536 + S.ep
    _, first = np.unique(key[by_step], return_index=True)
    return by_step[np.sort(first)]


def plan(model: ModelSpec, cluster: Cluster, train: TrainSpec, fixed: dict[str, Any] | None = None, top: int = 5,
         include_oom: bool = False, progress: Callable[[int, int], None] | None = None,
         ilp_candidates: int = 1, ilp_time_limit_s: float = ILP_TIME_LIMIT_S, distinct: bool = True,
         time_limit_s: float | None = PLAN_TIME_LIMIT_S) -> PlanResult:
    """Rank the space; the first ``ilp_candidates`` candidates with pp > 1 get the pipeline-stage ILP's layer
    split (``search.stages``, ``ilp_time_limit_s`` each), adopted as their layout when the estimate says it is
    faster. Every candidate's ``step_time_s`` is ``estimate``'s figure for its complete strategy. ``distinct``:
    only the fastest row of each (tp, pp, cp, ep) shape is a candidate (``plan --all`` lists every row).
    ``time_limit_s`` (None: none): past it no more of the space is priced and no ILP started; the result's
    ``stopped_early`` and ``stop_reason`` say so."""
    t0 = time.perf_counter()
    deadline = Deadline(t0, time_limit_s)
    fixed = dict(fixed or {})
    fw = framework_of(train, cluster)
    check_offered(fixed, fw)
    S = enumerate_space(model, cluster.num_devices, cluster.topology.domain_size, train, fixed, fw)
    if len(S) == 0:
        raise explain_empty_space(model, cluster, train, fixed)
    space = len(S)
    S, mem_kept, step, n_fit, searched = price_space(model, cluster, train, S, include_oom, fixed, progress,
                                                     deadline)
    # a few spare rows, since an adopted ILP split may reorder the first ones
    by_step = np.argsort(step, kind="stable")
    front = pareto_front(step, mem_kept.peak_gb, by_step)
    shown = first_per_shape(S, by_step) if distinct else by_step
    order = shown[:top + (ilp_candidates if "layer_split" not in fixed else 0)]

    def full(idx: np.ndarray) -> list[Estimate]:
        sub = S.take(idx)
        be = estimate_batch(model, cluster, train, sub, mem=expand(mem_kept, idx))
        return [estimate_from_batch(model, cluster, train, sub, be, j) for j in range(len(sub))]

    candidates, splits = full(order), [None] * len(order)
    if "layer_split" not in fixed and ilp_candidates and deadline.passed():
        deadline.notes.append("time limit reached before the pipeline-stage ILP: candidates keep the default "
                              "layer split")
    elif "layer_split" not in fixed:
        candidates, splits = adopt_stage_splits(model, cluster, train, candidates, ilp_candidates, ilp_time_limit_s)
    ranked = sorted(range(len(candidates)), key=lambda i: candidates[i].step_time_s)[:top]
    candidates, splits = [candidates[i] for i in ranked], [splits[i] for i in ranked]
    return PlanResult(candidates=candidates, pareto=full(front), searched=searched, fitting=n_fit,
                      search_time_s=time.perf_counter() - t0,
                      meshes=[tpu_mesh(cluster, e.strategy) for e in candidates], stage_splits=splits,
                      distinct=distinct, space=space, time_limit_s=time_limit_s,
                      stopped_early=bool(deadline.notes), stop_reason="; ".join(deadline.notes) or None)


def adopt_stage_splits(model: ModelSpec, cluster: Cluster, train: TrainSpec, candidates: list[Estimate],
                       ilp_candidates: int, time_limit_s: float):
    """Run the stage ILP on the first ``ilp_candidates`` pipelined candidates; where its layer split differs
    from the default and ``estimate`` prices it faster, the candidate becomes that strategy."""
    out, splits, tried = [], [], 0
    for e in candidates:
        split = None
        if e.strategy.pp > 1 and tried < ilp_candidates and e.imbalance_s > ILP_MIN_IMBALANCE * e.step_time_s:
            tried += 1
            split = stage_split(model, cluster, train, e.strategy, time_limit_s)
            layers = tuple(split.get("layers_per_stage") or ())
            if layers and layers != layout(model, e.strategy.pp, e.strategy.vpp).chunk_layers:
                alt = estimate(model, cluster, train, replace(e.strategy, layer_split=layers))
                split["default_split_step_time_s"] = e.step_time_s
                split["adopted"] = alt.fits and alt.step_time_s < e.step_time_s
                if split["adopted"]:
                    e = alt
        out.append(e)
        splits.append(split)
    return out, splits


def stage_split(model: ModelSpec, cluster: Cluster, train: TrainSpec, strategy, time_limit_s: float) -> dict[str, Any]:
    """The ILP's layer placement for one strategy (the strategy's recompute on every stage, so a layer split
    expresses it), with the default split it is measured against."""
    prob = build_problem(model, cluster, train, strategy)
    uniform = uniform_split_or_none(prob)
    try:
        best = solve_split(prob, time_limit_s=time_limit_s, allow_recompute_choice=False)
    except AsapError as e:
        return {"error": str(e), "uniform": uniform.to_dict() if uniform else None}
    for split in (best, uniform):
        if split is not None:
            split.simulated_pipeline_time_s = simulate_split(prob, split, strategy.schedule)
    out = best.to_dict()
    out["uniform"] = uniform.to_dict() if uniform else None
    if uniform is not None:
        out["speedup_over_uniform"] = uniform.pipeline_time_s / best.pipeline_time_s
    return out
