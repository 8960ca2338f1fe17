"""The pipeline-stage problem: which layers go on which (virtual) stage, and which stages recompute.

As the MoE training report does (analytical estimation plus integer linear programming), the model is a chain
of heterogeneous units — the embedding, leading dense layers, MoE layers, MTP modules, the LM head and loss —
each with a time per micro-batch (forward + backward, with the strategy's recompute or with full recompute),
stored activation bytes per micro-batch under either mode, and model-state bytes. Units are cut into
pp * vpp contiguous virtual stages; virtual stage j runs on device j mod pp (Megatron-Core's interleaved order).
Here: the problem (``build_problem``), a split's price (``price_split``, ``simulate_split``), the uniform and
balanced greedy splits and the brute-force reference; the planner's
own split ``search.split_dp``.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from asap.cost.allocator import logits_tensor_bytes
from asap.cost.batch import StrategyBatch
from asap.cost.device_memory import (GB, comm_buffer_bytes, dense_and_expert_shards, fixed_allowance_bytes,
                                     micro_batches_in_flight, quantised_weight_copies, stack_reserve_bytes,
                                     state_bytes_per_param, usable_hbm_gb)
from asap.cost.estimate import paired_hidden_s
from asap.cost.pipeline import simulated_pipeline_time_s
from asap.cost.units import UnitTimes, stack_activation_semantics, unit_activations, unit_params, unit_times
from asap.errors import AsapError
from asap.spec.job import Job
from asap.spec.layout import Unit, layout
from asap.spec.knobs import Recompute, RecomputePolicy, Schedule
from asap.spec.strategy import Strategy


@dataclass
class StageUnit:
    name: str  # embedding | dense | moe | mtp | head
    time_s: float  # forward + backward (+ the strategy's own recompute) per micro-batch
    recompute_extra_s: float  # added by full recompute
    act_bytes: float  # stored per micro-batch without full recompute
    act_saved_bytes: float  # what full recompute saves per micro-batch
    state_bytes: float  # weights, gradients and optimizer states on one device
    once: bool = False  # activations live for one micro-batch only (the logits: loss and backward follow at once)


@dataclass
class StageProblem:
    units: list[StageUnit]
    pp: int
    vpp: int
    micro_batches: int
    hbm_bytes: float
    base_recompute: RecomputePolicy
    default_layers: tuple[int, ...] = ()  # the layout's default layers per chunk
    schedule: Schedule = Schedule.ONE_F_ONE_B

    @property
    def stages(self) -> int:
        return self.pp * self.vpp

    @cached_property
    def unit_rows(self) -> list[tuple[float, float, float, float, float, bool]]:
        """Per unit: (time, full recompute's extra time, model states, activations kept, what full recompute
        saves, once): what ``price_split`` adds up."""
        return [(u.time_s, u.recompute_extra_s, u.state_bytes, u.act_bytes, u.act_saved_bytes, u.once)
                for u in self.units]

    @cached_property
    def layers_before(self) -> list[int]:
        """Transformer layers among the first i units, for i = 0 .. len(units)."""
        return [0] + list(itertools.accumulate(u.name in ("dense", "moe") for u in self.units))

    def in_flight(self, device: int) -> float:
        """Micro-batches' worth of activations device ``device`` holds at its peak (the memory model's count)."""
        if not hasattr(self, "_flight"):  # every device's at once (asked per stage and unit)
            self._flight = [float(x) for x in micro_batches_in_flight(
                self.micro_batches, self.pp, self.vpp, self.schedule, np.arange(self.pp))]
        return self._flight[device]


@dataclass
class StageSplit:
    """A placement: units per virtual stage, recompute per stage, and its priced figures."""

    boundaries: list[int]  # number of units in each virtual stage, in order
    recompute: list[bool]
    device_time_s: list[float]
    device_memory_gb: list[float]
    pipeline_time_s: float
    ideal_bubble_s: float
    imbalance_s: float
    recompute_s: float
    fits: bool
    layers_per_stage: list[int] = field(default_factory=list)  # transformer layers only
    solver: str = ""
    simulated_pipeline_time_s: float | None = None  # the event simulator's time for this split (planner output)

    def to_dict(self) -> dict[str, Any]:
        return {
            "units_per_stage": self.boundaries,
            "layers_per_stage": self.layers_per_stage,
            "recompute_per_stage": self.recompute,
            "pipeline_time_s": self.pipeline_time_s,
            "bubble_s": {"ideal": self.ideal_bubble_s, "imbalance": self.imbalance_s, "recompute": self.recompute_s},
            "device_time_s": self.device_time_s,
            "device_memory_gb": self.device_memory_gb,
            "fits": self.fits,
            "solver": self.solver,
            "simulated_pipeline_time_s": self.simulated_pipeline_time_s,
        }


# ------------------------------------------------------------------------------------------------------------
# Building the units from the cost model
# ------------------------------------------------------------------------------------------------------------


def build_problem(job: Job, s: Strategy, recompute_choice: bool = True) -> StageProblem:
    """The chain of units with the cost model's own unit figures (``asap.cost.units``): time per micro-batch
    under the strategy's recompute and under full recompute, activations kept and what full recompute saves,
    model states per device. ``recompute_choice`` False: the strategy's recompute on every stage (the
    planner's split), so full recompute is not priced (its extra time and savings are 0)."""
    return build_problems(job, [s], recompute_choice)[0]


def build_problems(job: Job, strategies: list[Strategy], recompute_choice: bool = True,
                   ut: UnitTimes | None = None) -> list[StageProblem]:
    """``build_problem`` for several strategies, their unit figures priced as one batch (``ut``: their unit
    times, where the caller has them)."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    if any(s.pp < 2 for s in strategies):
        raise AsapError("strategy.pp", "the stage split needs pp > 1")
    base = StrategyBatch.from_strategies([replace(s, layer_split=()) for s in strategies])
    full = (StrategyBatch.from_strategies([replace(s, recompute=RecomputePolicy(Recompute.FULL), layer_split=())
                                           for s in strategies]) if recompute_choice else base)
    t_base = unit_times(job, base).parts if ut is None else {k: ut.rows(v) for k, v in ut.parts.items()}
    t_full = unit_times(job, full).parts if recompute_choice else t_base
    semantics = stack_activation_semantics(fw, train)
    a_base = unit_activations(model, train, base, **semantics)
    a_full = unit_activations(model, train, full, **semantics) if recompute_choice else a_base
    params = unit_params(model, base)
    dense_shard, edp = dense_and_expert_shards(base)
    g = fw.grad_bytes(train.precision, base.zero, base.grad_bf16)
    copies = quantised_weight_copies(fw, cluster.accelerator, train.precision)
    dense_state, expert_state = (sum(state_bytes_per_param(train.precision, base.zero, shard, g, base.fp8_param,
                                                          base.offload_opt, fw.half_weight_copy, copies))
                                 for shard in (dense_shard, edp))
    states = params.dense * np.reshape(dense_state, (-1, 1)) + params.expert * np.reshape(expert_state, (-1, 1))
    hbm = usable_hbm_gb(cluster.accelerator, train) * GB - fixed_allowance_bytes(cluster.accelerator)
    # the allocator's reserve (cost/allocator.py): one fenced segment of the largest transient tensor, here the fp32
    # logits of one micro-batch (priced on every stage: a bound above the reserve of the stages without the head)
    logits = logits_tensor_bytes(base.mbs, train.seq_len, base.cp, model.vocab_size, base.tp, base.vocab_tiles,
                                 fw.loss_parallel)
    # and what the stack's communication holds outside the allocator (TE's userbuffers, DeepEP's buffers)
    userbuffers, deepep = comm_buffer_bytes(model, cluster.accelerator, train, base, fw)
    reserve = stack_reserve_bytes(fw, cluster.accelerator, train, logits) + userbuffers + deepep
    out = []
    for r, s in enumerate(strategies):
        # with a pipeline each micro-batch's expert all-to-alls hide behind its paired micro-batch's
        # computation (cost/estimate.py, stage_times); unit by unit only what exceeds its own computation stays
        paired = (s.a2a_overlap and s.schedule != Schedule.GPIPE and model.moe is not None
                  and s.recompute.kind != Recompute.FULL
                  and s.micro_batches(train.global_batch) >= 2)  # cost.estimate.expert_overlap

        def unit_time(t, r: int = r, paired: bool = paired):  # bound now: called within this row
            ep = t["ep"][r] - paired_hidden_s(t["ep"][r], t["compute"][r]) if paired else t["ep"][r]
            return t["compute"][r] + t["tp"][r] + ep + t["cp"][r] + t["host"][r]

        time_base, time_full = unit_time(t_base), unit_time(t_full)

        def unit(kind: Unit, r: int = r, time_base=time_base, time_full=time_full) -> StageUnit:
            kept = a_base.kept[r, kind] + a_base.once[r, kind]
            saved = max(float(a_base.kept[r, kind] - a_full.kept[r, kind]), 0.0)
            return StageUnit(kind.name.lower(), float(time_base[kind]),
                             max(float(time_full[kind] - time_base[kind]), 0.0), float(kept), saved,
                             float(states[r, kind]), once=kind == Unit.HEAD)

        chain = [Unit.EMBEDDING] + [Unit.DENSE if i < model.num_dense_layers else Unit.MOE
                                    for i in range(model.num_layers)]
        chain += [Unit.MTP] * model.mtp_layers + [Unit.HEAD]
        made = {kind: unit(kind) for kind in set(chain)}  # units of a kind are alike: one (unchanged) object each
        units = [made[kind] for kind in chain]
        out.append(StageProblem(units=units, pp=s.pp, vpp=s.vpp, micro_batches=s.micro_batches(train.global_batch),
                                hbm_bytes=hbm - float(reserve[r]), base_recompute=s.recompute,
                                default_layers=layout(model, s.pp, s.vpp).chunk_layers, schedule=s.schedule))
    return out


# ------------------------------------------------------------------------------------------------------------
# Pricing a given split (shared by the ILP, the uniform split and the brute force)
# ------------------------------------------------------------------------------------------------------------


def price_split(prob: StageProblem, counts: list[int], recompute: list[bool]) -> StageSplit:
    pp, S = prob.pp, prob.stages
    assert len(counts) == S and sum(counts) == len(prob.units)
    dev_t = [0.0] * pp
    dev_mem = [0.0] * pp
    rc_s = 0.0
    start = 0
    for j, n in enumerate(counts):
        d = j % pp
        f = prob.in_flight(d)
        for time_s, extra_s, state, act, saved, once in prob.unit_rows[start:start + n]:
            extra = extra_s if recompute[j] else 0.0
            dev_t[d] += time_s + extra
            rc_s += extra
            held = 1.0 if once else f
            dev_mem[d] += state + held * (act - (saved if recompute[j] else 0.0))
        start += n
    m = prob.micro_batches
    t_max = max(dev_t)
    t_avg = sum(dev_t) / pp
    ideal = (pp - 1) * t_avg / prob.vpp
    total = (m - 1) * t_max + t_avg + ideal  # cost/pipeline.py: exact for uneven 1F1B stages
    ends = list(itertools.accumulate(counts))
    layers = [prob.layers_before[e] - prob.layers_before[e - n] for e, n in zip(ends, counts, strict=True)]
    return StageSplit(boundaries=list(counts), recompute=list(recompute), device_time_s=dev_t,
                      device_memory_gb=[x / GB for x in dev_mem], pipeline_time_s=total, ideal_bubble_s=ideal,
                      imbalance_s=(m - 1) * (t_max - t_avg), recompute_s=m * rc_s / pp,
                      fits=all(x <= prob.hbm_bytes for x in dev_mem), layers_per_stage=layers)


def simulate_split(prob: StageProblem, split: StageSplit, schedule: Schedule) -> float:
    """The split's step by the event simulator (cost/schedule_sim.py) instead of the closed form: chunk by chunk,
    which the closed form cannot see when virtual stages differ (interleaving stalls on unequal chunks).
    Each unit's time is a third forward and two thirds backward; full recompute adds to the backward."""
    fwd, bwd = [], []
    start = 0
    for j, n in enumerate(split.boundaries):
        units = prob.units[start:start + n]
        base = sum(u.time_s for u in units)
        extra = sum(u.recompute_extra_s for u in units) if split.recompute[j] else 0.0
        fwd.append(max(base / 3.0, 1e-12))
        bwd.append(max(2.0 * base / 3.0 + extra, 1e-12))
        start += n
    if prob.vpp > 1 or schedule == Schedule.INTERLEAVED:
        schedule = Schedule.INTERLEAVED if prob.vpp > 1 else Schedule.ONE_F_ONE_B
    return simulated_pipeline_time_s(prob.pp, prob.vpp, prob.micro_batches, schedule.label, fwd, bwd)


def uniform_split_or_none(prob: StageProblem) -> StageSplit | None:
    """``uniform_split``, or None where it would leave a stage empty."""
    try:
        return uniform_split(prob)
    except AsapError:
        return None


def uniform_split(prob: StageProblem) -> StageSplit:
    """The default layout (``asap.spec.layout``: L // (pp vpp) layers per chunk, the remainder from the middle
    chunks out), the embedding with the first chunk, MTP and the head with the last; the strategy's recompute
    everywhere."""
    S = prob.stages
    counts = list(prob.default_layers)
    counts[0] += 1  # embedding
    counts[-1] += sum(1 for u in prob.units if u.name in ("mtp", "head"))
    if min(counts) < 1:
        raise AsapError("strategy.pp", f"{S} virtual stages for {len(prob.units)} units leave a stage empty")
    full = prob.base_recompute.kind == Recompute.FULL
    return price_split(prob, counts, [full] * S)


CHUNK_SLACK_LAYERS = 1  # interleaved chunks may move this many layers off the default split


def _units_per_stage_bounds(prob: StageProblem) -> tuple[list[float], list[float]]:
    """At least one unit per stage. Interleaved chunks stay within CHUNK_SLACK_LAYERS of the default split:
    the event simulator shows unequal chunks stall the steady state (cost/pipeline.py), a cost the ILP's
    closed form does not see, so wider moves are never adopted, and the bound keeps the problem small."""
    S = prob.stages
    if prob.vpp == 1 or not prob.default_layers:
        return [1.0] * S, [np.inf] * S
    units = list(prob.default_layers)
    units[0] += 1
    units[-1] += len(_tail_units(prob))
    return ([max(1.0, n - CHUNK_SLACK_LAYERS) for n in units], [float(n + CHUNK_SLACK_LAYERS) for n in units])


def _tail_units(prob: StageProblem) -> list[int]:
    return [i for i, u in enumerate(prob.units) if u.name in ("mtp", "head")]


def heuristic_split(prob: StageProblem, allow_recompute_choice: bool = True) -> StageSplit | None:
    """A good feasible split to start the ILP from: the uniform split and balanced splits (stage time capped
    by bisection, greedy contiguous fill), with and without full recompute; the fastest that fits."""
    S = prob.stages
    uniform = uniform_split_or_none(prob)
    options = [uniform] if uniform is not None else []
    modes = [prob.base_recompute.kind == Recompute.FULL]
    if allow_recompute_choice and prob.base_recompute.kind != Recompute.FULL:
        modes.append(True)
    tail = len(_tail_units(prob))  # MTP and the head stay together on the last stage: one block for the fill
    for rc in modes:
        times = [u.time_s + (u.recompute_extra_s if rc else 0.0) for u in prob.units]
        times = times[:len(times) - tail] + [sum(times[len(times) - tail:])]
        lo, hi = max(times), sum(times)
        runs = _running_sums(times)
        for _ in range(40):
            cap = (lo + hi) / 2
            if _greedy_counts(times, cap, S, runs) is None:
                lo = cap
            else:
                hi = cap
        counts = _greedy_counts(times, hi, S, runs)
        if counts is not None:
            counts[-1] += tail - 1
            options.append(price_split(prob, counts, [rc] * S))
    fitting = [o for o in options if o.fits]
    pool = fitting or options
    return min(pool, key=lambda o: o.pipeline_time_s) if pool else None


def _running_sums(times: list[float]) -> list[list[float]]:
    """Per start unit i: the running sums of ``times[i:]``, added left to right from 0.0 (``runs[i][n - 1]``
    is the time of units i .. i + n - 1, the same float ``_greedy_counts``' fill adds up)."""
    return [list(itertools.accumulate(times[i:], initial=0.0))[1:] for i in range(len(times))]


def _greedy_counts(times: list[float], cap: float, stages: int,
                   runs: list[list[float]] | None = None) -> list[int] | None:
    """Fill stages left to right up to ``cap`` while leaving a unit for every later stage: a stage from unit i
    takes unit i, then each next unit while the running sum stays within ``cap`` (``runs``:
    ``_running_sums(times)``, where the caller has them; unit times are not negative, so the running sums
    rise and the units taken are those up to the first sum over ``cap``, found by bisection)."""
    U = len(times)
    runs = _running_sums(times) if runs is None else runs
    counts, i = [], 0
    for j in range(stages):
        left = stages - j - 1
        room = U - left - i  # the most units this stage may take
        if room <= 0:
            return None
        n = max(1, bisect.bisect_right(runs[i], cap, 0, room))
        if j == stages - 1 and i + n < U:
            return None
        counts.append(n)
        i += n
    return counts if i == U else None


def brute_force_split(prob: StageProblem, allow_recompute_choice: bool = True) -> StageSplit | None:
    """Every contiguous split (MTP and the head on the last stage) and recompute choice (small problems only):
    the ILP's reference."""
    U, S = len(prob.units), prob.stages
    best = None
    rc_choices = ([False, True] if allow_recompute_choice and prob.base_recompute.kind != Recompute.FULL
                  else [prob.base_recompute.kind == Recompute.FULL])
    last_start = U - len(_tail_units(prob))  # MTP and the head on the last stage, as the ILP places them
    for cuts in itertools.combinations(range(1, last_start + 1), S - 1):
        edges = (0,) + cuts + (U,)
        counts = [edges[i + 1] - edges[i] for i in range(S)]
        for rc in itertools.product(rc_choices, repeat=S):
            split = price_split(prob, counts, list(rc))
            if split.fits and (best is None or split.pipeline_time_s < best.pipeline_time_s - 1e-12):
                best = split
    return best
