"""``asap plan``: every legal configuration priced, pruned by memory, ranked by step time.

Block by block (a block is every legal strategy of some mesh shapes, ``search.space.Space.blocks``), so memory
stays bounded however big the space:
1. enumerate the block with the ``--fix`` keys pinned;
2. price its peak memory (vectorized) and drop what does not fit (unless ``include_oom``);
3. price the step time of the rest (a progress callback per block);
4. keep only what the result can show: the fastest rows and the running Pareto front of step time against
   peak memory; in the end, return the fastest N and that front.
"""

from __future__ import annotations

import ctypes
import functools
import math
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable

import numpy as np

from asap.cost.batch import StrategyBatch, expand
from asap.cost.estimate import UNIT_KEYS, BatchEstimate, Estimate, estimate, estimate_batch, estimate_from_batch
from asap.cost.units import UnitTimes, unit_times
from asap.cost.bands import indistinguishable
from asap.cost.device_memory import default_headroom_gb, usable_hbm_gb
from asap.errors import AsapError
from asap.search.mesh import tpu_mesh
from asap.search.nofit import no_fit_error
from asap.search.pricing import (BOUND_PER_SHAPE, Deadline, Kept, Search, bound_pool_rows, first_n_per_shape,
                                 first_per_shape, pareto_front, search_space)
from asap.search.space import Space
from asap.search.split_dp import TIE_REL, planner_splits
from asap.search.stages import build_problems
from asap.spec.legality import check_offered
from asap.spec.job import Job
from asap.spec.stack_rules import UNIFORM_SPLIT_ONLY, RuleJob, first_unrunnable
from asap.spec.layout import layout
from asap.spec.strategy import Strategy, complete_strategy, fit_strategy

# A layer split can only remove the stages' imbalance (the heaviest stage's excess over the mean): when the
# estimate puts it under this share of the step, no split gains more than the model resolves, and no split is
# searched. The planner's split (``search.split_dp``) counts moves, not seconds, so the plan is the same on any
# machine load.
SPLIT_MIN_IMBALANCE = 0.01
# The whole search's budget (``plan --time-limit``): past it no further chunk is priced and no split searched,
# and the result says so (``stopped_early``, ``stop_reason``). The calibration cases take under 5 s on 2 cores.
PLAN_TIME_LIMIT_S = 60.0
# at most this many rows get the layer-split search (``plan --split-candidates``); the branch and bound stops
# sooner where the bound allows (DeepSeek-V3 on 2048 H800: 24 rows)
SPLIT_ROWS = 32


# glibc's malloc returns freed memory to the system early: a planner that prices chunk after chunk of
# temporaries (each a few MB) would then fault every page of every chunk in again, about 15% of its time. The
# planner keeps up to this much freed memory for reuse, and serves arrays under it from that heap.
MALLOC_KEEP_BYTES = 256 * 2 ** 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


@functools.cache
def reuse_freed_memory() -> bool:
    """Once per process: glibc's malloc keeps freed memory for reuse (False where there is no glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(_M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES)
                    and libc.mallopt(_M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES // 4))
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class FrontPoint:
    """A row of the Pareto front: its strategy (the dispatcher it was priced with), step time and peak memory,
    ``estimate``'s figures for that strategy."""
    strategy: Strategy
    step_time_s: float
    peak_memory_gb: float


@dataclass
class PlanResult:
    candidates: list[Estimate]
    pareto: list[FrontPoint]
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
    device_memory_gb: float = math.inf  # the device memory the driver reports (GiB)
    headroom_gb: float = 0.0  # kept free below it (``--memory-margin``; ``plan_headroom``)
    # which input the #1 leans on (``asap.search.sensitivity.sensitivity``; the CLI sets it)
    sensitivity: dict[str, Any] | None = None
    # ``plan(..., tight=True)``: the candidates of the same plan without the headroom (top 1, no split search:
    # what ``asap.search.advice.tight_row`` reads), priced in the same pass; None where not asked or not known
    tight_candidates: list[Estimate] | None = None

    @property
    def memory_limit_gb(self) -> float:
        """The peak a candidate may reach: the device memory less the headroom."""
        return self.device_memory_gb - self.headroom_gb

    def ties(self) -> list[bool]:
        """Whether each candidate's 80% interval overlaps the best's by more than half
        (``asap.cost.bands.indistinguishable``): the model cannot tell them apart."""
        if not self.candidates:
            return []
        best = self.candidates[0]
        return [indistinguishable(best, e) for e in self.candidates]

    def to_dict(self) -> dict[str, Any]:
        cands = []
        n = len(self.candidates)
        for est, mesh, split, tie in zip(self.candidates, self.meshes or [None] * n, self.stage_splits or [None] * n,
                                         self.ties(), strict=True):
            d = est.to_dict()
            d["tie_with_best"] = tie
            d["memory_limit_gb"], d["headroom_gb"] = self.memory_limit_gb, self.headroom_gb
            d["free_memory_gb"] = self.device_memory_gb - est.peak_memory_gb
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
            "device_memory_gb": self.device_memory_gb,
            "headroom_gb": self.headroom_gb,
            "memory_limit_gb": self.memory_limit_gb,
            "sensitivity": self.sensitivity,
        }


def explain_empty_space(job: Job, fixed: dict[str, Any]) -> AsapError:
    """Why no legal strategy exists: the first rule the pinned keys break, named like ``estimate`` names it."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    try:
        s = complete_strategy(fixed, cluster.num_devices, field="fix", framework=fw)
        # as ``estimate`` reads it (expert TP 1 for a dense model, not the tp the completion copied)
        s = fit_strategy(s, model, train, cluster.num_devices, field="fix", framework=fw)
    except AsapError as e:
        return e
    if (err := first_unrunnable(s, fw.name, RuleJob.of(job), field="fix")) is not None:
        return err
    return AsapError("fix", f"no legal strategy keeps {fixed} for {model.name} on {cluster.num_devices} devices "
                            f"with global batch {train.global_batch}")



@dataclass(frozen=True)
class Fallback:
    """A relaxation the planner makes only where nothing fits without it: ``pin`` added to the pinned keys (and,
    with ``partial_offload``, the partial activation offloads searched), for the ``reason`` given."""

    pin: dict[str, Any]
    reason: str
    partial_offload: bool = False


def fallbacks(fw, train, fixed: dict[str, Any]) -> list[Fallback]:
    """The relaxations, in the order they are tried (each on top of the ones before it that could be built)."""
    out = []
    if grad_bf16_offered(fw, train, fixed):
        out.append(Fallback({"grad_bf16": 1}, "16-bit gradients (Megatron-Core grad_reduce_in_fp32=False) trade "
                                              "the reduction's precision for memory, as Megatron-Bridge's "
                                              "performance configs do"))
    if "offload_layers" not in fixed and fw.offers.get("offload_act", (1,)) != (0,):
        out.append(Fallback({}, "a partial activation offload (some layers to the host) costs link time every "
                                "step, and an expert's shape beats it where one fits", partial_offload=True))
    if "offload_opt" not in fixed and offload_offered(fw):
        out.append(Fallback({"offload_opt": 1}, "optimizer offload only ever makes a step slower"))
    return out


def plan(job: Job, *, fixed: dict[str, Any] | None = None, top: int = 5, include_oom: bool = False,
         progress: Callable[[int, int], None] | None = None, split_candidates: int = SPLIT_ROWS,
         distinct: bool = True, time_limit_s: float | None = PLAN_TIME_LIMIT_S, oom_by_memory: bool = True,
         blame: bool = True, partial_offload: bool = False, tight: bool = False) -> PlanResult:
    """Rank the space with ``fixed`` pinned (every option keyword-only); then up to ``split_candidates``
    pipelined rows, in the order of the least step a layer split could give them, get the planner's split
    (``adopt_stage_splits``, ``search.split_dp``), adopted as their layout when the estimate prices it faster.
    Every candidate's ``step_time_s`` is ``estimate``'s figure for its complete strategy. ``distinct``: only
    the fastest row of each (tp, pp, cp, ep) shape is a candidate (``plan --all`` lists every row).
    ``time_limit_s`` (None: none): past it no more of the space is priced and no split searched; the result's
    ``stopped_early`` and ``stop_reason`` say so. With ``include_oom`` the rows that fit come first, then the
    rest by how far over memory (``oom_by_memory``; False: every row by speed alone). Where nothing fits and
    ``include_oom`` is off, the ``fallbacks`` are tried in turn; where none fits either, the no-fit error says
    why (``blame``: naming the pinned keys that, left open, would let one fit). ``tight``: also the result's
    ``tight_candidates`` (``tight_search``)."""
    t0 = time.perf_counter()
    reuse_freed_memory()
    deadline = Deadline(t0, time_limit_s)
    fixed = dict(fixed or {})
    check_offered(fixed, job.framework)
    # a few spare rows, since an adopted split may reorder the first ones
    top_k = top + (min(split_candidates, top) if "layer_split" not in fixed else 0)
    opts = Search(job, include_oom, top_k, distinct, oom_by_memory=oom_by_memory)
    shadow = tight_search(job) if tight and not partial_offload and job.train.memory_margin_gb > 0 else None
    search = _search(job, fixed, opts, partial_offload, progress, deadline, shadow)
    if search.space == 0:
        raise explain_empty_space(job, fixed)
    shadow = shadow if shadow is not None and shadow.fitting and not deadline.notes else None
    if search.fitting == 0 and not include_oom:
        search = _fallback_search(job, fixed, opts, partial_offload, progress, deadline, search, blame)
    result = _result(job, fixed, search, top, top_k, split_candidates, distinct, deadline, time_limit_s, t0)
    if shadow is not None:
        result.tight_candidates = _result(shadow.job, fixed, shadow, 1, 1, 0, True, Deadline(t0, None),
                                          PLAN_TIME_LIMIT_S, t0, front=False).candidates
    return result


def tight_search(job: Job) -> Search:
    """The first search of ``plan(plan_headroom(job, 0.0), top=1, split_candidates=0)`` (the tight row's plan,
    ``asap.search.advice.tight_row``), to be priced beside ``job``'s own (``search_space``'s ``shadow``: the
    same space, each chunk's memory priced once). Complete and with a row that fits, ``_result`` of it gives
    that plan's candidates: a plan without headroom falls back (``_fallback_search``) only where nothing fits,
    and its split search is off."""
    return Search(plan_headroom(job, 0.0), include_oom=False, top_k=1, distinct=True)


def _search(job: Job, fixed: dict[str, Any], opts: Search, partial_offload: bool, progress, deadline,
            shadow: Search | None = None) -> Search:
    """One pricing of the space with ``fixed`` pinned (a fresh ``Search`` of the options ``opts``; ``shadow``
    priced beside it, ``search_space``)."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    space = Space.of(model, cluster.num_devices, cluster.topology.domain_size, train, fixed, fw, partial_offload,
                     priced_for=job)
    return search_space(replace(opts), space, progress, deadline, shadow=shadow)


def _fallback_search(job: Job, fixed: dict[str, Any], opts: Search, partial_offload: bool, progress, deadline,
                     search: Search, blame: bool) -> Search:
    """The first search with the ``fallbacks`` (each on top of those before it whose space was not empty) in
    which something fits; where none does, the no-fit error of the search without them."""
    pins, partial = dict(fixed), partial_offload
    for fb in fallbacks(job.framework, job.train, fixed):
        if fb.partial_offload and partial:
            continue
        tried = _search(job, {**pins, **fb.pin}, opts, partial or fb.partial_offload, progress, deadline)
        if tried.fitting:
            return tried
        if tried.space:
            pins, partial = {**pins, **fb.pin}, partial or fb.partial_offload
    raise no_fit_error(job, fixed, search, plan if blame else None)


def _result(job: Job, fixed: dict[str, Any], search: Search, top: int, top_k: int, split_candidates: int,
            distinct: bool, deadline: Deadline, time_limit_s: float | None, t0: float,
            front: bool = True) -> PlanResult:
    """The plan of a search: the candidates (with their adopted layer splits) and (``front``) the Pareto
    front."""
    cluster, train = job.cluster, job.train
    kept = search.kept
    assert kept is not None  # something was priced and kept: the space is not empty, and a row fits or include_oom
    front_idx = pareto_front(kept.step, kept.mem.peak_gb, kept.by_step()) if front else np.zeros(0, np.int64)
    hbm_rank = usable_hbm_gb(cluster.accelerator, train) if search.include_oom and search.oom_by_memory else math.inf
    pool = candidate_pool(kept, top_k, distinct)
    rows, pareto = priced_rows(job, kept, pool, front_idx)
    if "layer_split" not in fixed and split_candidates and deadline.passed():
        deadline.notes.append("time limit reached before the pipeline-stage split: candidates keep the default "
                              "layer split")
    elif "layer_split" not in fixed and split_candidates:
        rows = adopt_stage_splits(job, rows, [float(kept.bound[i]) for i in pool], split_candidates, top, distinct,
                                  hbm_rank)
    ranked = rank_rows(rows, hbm_rank, distinct)[:top]
    candidates, splits = [as_estimate(job, r[0]) for r in ranked], [r[1] for r in ranked]
    return PlanResult(candidates=candidates, pareto=pareto, searched=search.priced,
                      fitting=search.fitting, search_time_s=time.perf_counter() - t0,
                      meshes=[tpu_mesh(cluster, e.strategy) for e in candidates], stage_splits=splits,
                      distinct=distinct, space=search.space, time_limit_s=time_limit_s,
                      stopped_early=bool(deadline.notes), stop_reason="; ".join(deadline.notes) or None,
                      device_memory_gb=cluster.accelerator.usable_hbm_gb, headroom_gb=train.memory_margin_gb)


def plan_headroom(job: Job, margin_gb: float | None = None) -> Job:
    """The job a plan recommends for: ``margin_gb`` GiB kept free per device, or by default the headroom the
    stacks' users keep (``asap.cost.device_memory.default_headroom_gb``: 8% of the device for allocator
    fragmentation and NCCL buffers); ``margin_gb=0`` plans to the edge of the device memory."""
    margin = default_headroom_gb(job.cluster.accelerator) if margin_gb is None else float(margin_gb)
    return replace(job, train=replace(job.train, memory_margin_gb=margin))


def candidate_pool(kept: Kept, top_k: int, distinct: bool) -> np.ndarray:
    """The kept rows a candidate may come from: the first ``top_k`` (shapes) by step time and the first
    ``bound_pool_rows(top_k)`` rows by split bound (``BOUND_PER_SHAPE`` of a shape at most)."""
    shown = first_per_shape(kept.S, kept.by_rank()) if distinct else kept.by_rank()
    both = np.concatenate([shown[:top_k],
                           first_n_per_shape(kept.S, kept.by_rank(kept.bound), BOUND_PER_SHAPE)
                           [:bound_pool_rows(top_k)]])
    _, first = np.unique(both, return_index=True)
    return both[np.sort(first)]


@dataclass
class PricedRow:
    """Row ``i`` of a priced batch: the figures the ranking and the split search read, its ``Estimate`` built
    only for the rows a plan shows (``estimate_from_batch`` on the same batch: the same figures)."""

    S: StrategyBatch
    be: BatchEstimate
    i: int
    step_time_s: float = field(init=False)
    peak_memory_gb: float = field(init=False)
    fits: bool = field(init=False)
    imbalance_s: float = field(init=False)

    def __post_init__(self):
        i, be = self.i, self.be
        self.step_time_s = float(be.step_time_s[i])
        self.peak_memory_gb = float(be.peak_memory_gb[i])
        self.fits = bool(be.fits[i])
        self.imbalance_s = float(be.imbalance_s[i])

    @cached_property
    def strategy(self) -> Strategy:
        be = self.be
        priced = None if be.dispatcher is None else int(np.broadcast_to(be.dispatcher, be.step_time_s.shape)[self.i])
        return self.S.strategy(self.i, dispatcher=priced)

    @cached_property
    def shape(self) -> tuple[int, int, int, int]:
        """(tp, pp, cp, ep), read off the batch (ranking a row builds no Strategy)."""
        S, i = self.S, self.i
        return (int(S.tp[i]), int(S.pp[i]), int(S.cp[i]), int(S.ep[i]))

    def estimate(self, job: Job) -> Estimate:
        return estimate_from_batch(job, self.S, self.be, self.i)


Row = Estimate | PricedRow  # what the ranking and the split search read of a candidate


def priced_rows(job: Job, kept: Kept, idx: np.ndarray,
                front_idx: np.ndarray) -> tuple[list[tuple[Row, dict | None]], list[FrontPoint]]:
    """The kept rows ``idx`` as candidate rows and the rows ``front_idx`` as front points, priced in one batch
    (``estimate_batch``: the figures ``estimate_from_batch`` would read, without building an Estimate per
    row; a row's figures are its own, whatever rows are priced beside it)."""
    both = np.concatenate([idx, front_idx])
    sub = kept.S.take(both)
    be = estimate_batch(job, sub, mem=expand(kept.mem, both))
    priced = np.broadcast_to(be.dispatcher, be.step_time_s.shape) if be.dispatcher is not None else None
    front = [FrontPoint(sub.strategy(j, dispatcher=None if priced is None else int(priced[j])),
                        float(be.step_time_s[j]), float(be.peak_memory_gb[j])) for j in range(len(idx), len(both))]
    return [(PricedRow(sub, be, j), None) for j in range(len(idx))], front


def as_estimate(job: Job, row: Row) -> Estimate:
    return row.estimate(job) if isinstance(row, PricedRow) else row


def _rank_key(e: Row, hbm_rank: float) -> tuple:
    """Rows that fit first; then the step time (to float noise: ``split_dp.TIE_REL``), then less memory."""
    step = float(f"{e.step_time_s:.9g}")
    over = max(e.peak_memory_gb - hbm_rank, 0.0) if math.isfinite(hbm_rank) else 0.0  # ``over_capacity_gb``
    return (over, step, e.peak_memory_gb)


def _shape(e: Row) -> tuple[int, int, int, int]:
    if isinstance(e, PricedRow):
        return e.shape
    s = e.strategy
    return (s.tp, s.pp, s.cp, s.ep)


def rank_rows(rows: list, hbm_rank: float, distinct: bool) -> list:
    """Rows in the candidates' order, the fastest of each (tp, pp, cp, ep) shape only with ``distinct``."""
    out, seen = [], set()
    for r in sorted(rows, key=lambda r: _rank_key(r[0], hbm_rank)):
        if distinct and _shape(r[0]) in seen:
            continue
        seen.add(_shape(r[0]))
        out.append(r)
    return out


def grad_bf16_offered(fw, train, fixed) -> bool:
    """Whether the planner may fall back to 16-bit gradients: a 16-bit run, the stack offers them, unpinned."""
    allowed = fw.offers.get("grad_bf16")
    return train.precision != "fp32" and "grad_bf16" not in fixed and (allowed is None or 1 in allowed)


def offload_offered(fw) -> bool:
    allowed = fw.offers.get("offload_opt")
    return allowed is None or 1 in allowed


SPLIT_ROUND = 6  # rows whose splits are priced together (one ``estimate_batch``)


def adopt_stage_splits(job: Job, rows: list, bounds: list[float], max_tries: int, top: int, distinct: bool,
                       hbm_rank: float = math.inf) -> list:
    """Branch and bound over the candidate rows: in the order of their bound (the step less the stage
    imbalance, the least a split can give), each pipelined row gets the planner's splits
    (``search.split_dp.planner_splits``: exact for one stage per device), priced by ``estimate`` and adopted
    where faster and fitting; it stops once the next bound cannot beat the ``top``-th shape found (or after
    ``max_tries`` rows). So the best row is the minimum over every shape that could win, and a looser memory
    limit never gives a slower #1."""
    rows = list(rows)
    order = sorted(range(len(rows)), key=lambda i: (bounds[i], i))
    tried = 0
    pool_ut: UnitTimes | None = None  # the rows' unit times, priced once for every round (a row's are its own)
    while order and tried < max_tries:
        ranked = rank_rows(rows, hbm_rank, distinct)[:top]
        cutoff = ranked[-1][0].step_time_s * (1 - TIE_REL) if len(ranked) >= top else math.inf
        # with ``distinct``: a row cannot lift its shape above that shape's fastest row
        shape_best: dict[tuple[int, int, int, int], float] = {}
        for e, _ in rows:
            shape_best[_shape(e)] = min(shape_best.get(_shape(e), math.inf), e.step_time_s)
        batch: list[int] = []
        while order and len(batch) < min(SPLIT_ROUND, max_tries - tried) and bounds[order[0]] < cutoff:
            i = order.pop(0)
            e = rows[i][0]
            if distinct and bounds[i] >= shape_best[_shape(e)] * (1 - TIE_REL) and rows[i][0].step_time_s > \
                    shape_best[_shape(e)] * (1 + TIE_REL):
                continue
            if e.strategy.pp > 1 and e.fits and e.imbalance_s > SPLIT_MIN_IMBALANCE * e.step_time_s:
                batch.append(i)
        if not batch:
            break
        tried += len(batch)
        if pool_ut is None and job.framework.name not in UNIFORM_SPLIT_ONLY:
            pool_ut = unit_times(job, StrategyBatch.from_strategies([r[0].strategy for r in rows]), UNIT_KEYS)
        ut = pool_ut.subset(np.array(batch)) if pool_ut is not None else None
        for i, row in zip(batch, split_rows(job, [rows[i][0] for i in batch], ut), strict=True):
            rows[i] = row
    return rows


def stage_split(job: Job, strategy) -> dict[str, Any]:
    """The planner's layer split for one strategy (``split_rows`` on its estimate): ``layers_per_stage`` and
    ``adopted`` (True where a split other than the strategy's own is faster and fits)."""
    return split_rows(job, [estimate(job, strategy)])[0][1]


def split_rows(job: Job, rows: list[Row], ut: UnitTimes | None = None) -> list[tuple[Row, dict[str, Any]]]:
    """Each row with the fastest of the planner's splits (``search.split_dp.planner_splits``) as ``estimate``
    prices them (all rows' splits in one batch), where it fits and beats the row's own split (equal time: less
    memory); else as it was. The dict says which (``stage_split`` in the plan's JSON): its figures are
    ``estimate``'s. ``ut``: the rows' unit times, where the caller has them."""
    tried, alts = [], []
    infos: list[dict[str, Any]] = []
    uniform_only = job.framework.name in UNIFORM_SPLIT_ONLY
    strategies = [e.strategy for e in rows]
    # a layer split changes no unit time (``UNIT_KEYS``): the rows' unit times are their splits' too
    if ut is None and not uniform_only:
        ut = unit_times(job, StrategyBatch.from_strategies(strategies), UNIT_KEYS)
    problems = [None] * len(rows) if uniform_only else \
        build_problems(job, strategies, recompute_choice=False, ut=ut)
    owner: list[int] = []  # the row each split is of
    for k, (e, prob) in enumerate(zip(rows, problems, strict=True)):
        s = e.strategy
        default = layout(job.model, s.pp, s.vpp).chunk_layers
        splits = [] if prob is None else \
            [sp for sp in planner_splits(prob) if tuple(sp.layers_per_stage) != tuple(default)]
        tried.append(splits)
        infos.append({"layers_per_stage": list(s.layer_split or default), "default_layers_per_stage": list(default),
                      "default_split_step_time_s": e.step_time_s, "adopted": False,
                      "solver": "; ".join(sp.solver for sp in splits) or "no other split fits", "tried": []})
        alts += [replace(s, layer_split=tuple(sp.layers_per_stage)) for sp in splits]
        owner += [k] * len(splits)
    S = StrategyBatch.from_strategies(alts) if alts else None
    be = estimate_batch(job, S, unit=ut.subset(np.array(owner))) if S is not None and ut is not None else None
    out, at = [], 0
    for e, splits, info in zip(rows, tried, infos, strict=True):
        best = e
        for j, sp in enumerate(splits, start=at):
            assert be is not None  # a split was tried, so the alternatives were priced
            step, peak, fits = float(be.step_time_s[j]), float(be.peak_memory_gb[j]), bool(be.fits[j])
            info["tried"].append({"layers_per_stage": list(sp.layers_per_stage), "solver": sp.solver,
                                  "step_time_s": step, "peak_memory_gb": peak, "fits": fits})
            faster = step < best.step_time_s * (1 - TIE_REL)
            tie_less_memory = step <= best.step_time_s * (1 + TIE_REL) and peak < best.peak_memory_gb
            if fits and (faster or tie_less_memory):
                assert S is not None
                best = PricedRow(S, be, j)
                info.update(adopted=True, layers_per_stage=list(sp.layers_per_stage), solver=sp.solver)
        at += len(splits)
        out.append((best, info))
    return out
