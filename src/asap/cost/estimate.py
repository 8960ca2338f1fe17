"""The composed estimate: step time, throughput, MFU, peak memory and the breakdown of one training step.

Per micro-batch, a pipeline stage spends on each of its layers
    t_layer = forward + backward compute + recompute + TP and EP communication + exposed CP communication
and the first stage adds the embedding, the last the LM head, the loss and the MTP modules.
With m micro-batches, the heaviest stage t_max, the mean stage t_avg and v virtual stages, the pipelined
part of the step is (Narayanan et al. 2021, sec. 2.2, generalised to uneven stages)
    T_pipe = (m - 1) t_max + t_avg (1 + (pp - 1) / v)      (1F1B, interleaved 1F1B; GPipe has the same bubble)
    T_pipe = (m - 1) t_max + t_avg (1 + (pp - 1) / (3 v))  (ZB-H1, Qi et al. 2023: about a third of the bubble)
and the step adds the exposed pipeline messages, the exposed data-parallel traffic and the optimizer:
    step = T_pipe + pp_exposed + dp_exposed + optimizer.

MFU counts model FLOPs only (no recompute), against the dense bf16/fp16 peak of the device (also for fp8
runs, so MFU stays comparable across precisions):
    model FLOPs per token = 6 N_matmul + 6 L s n_heads (d_qk + d_v) / 2 * 2
where N_matmul counts the parameters each token multiplies (active experts, the LM head, MTP modules; not
the embedding lookup) and the attention term is PaLM's 12 L H Q T (Chowdhery et al. 2022, App. B) written
for separate key and value head sizes (without causal savings, as published MFUs count it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asap.cost.batch import SCHEDULE_CODE, StrategyBatch, by_unique
from asap.cost.communication import data_parallel_comm, layer_comm
from asap.cost.compute import BWD_ELEMENTWISE, BWD_GEMM, layer_compute
from asap.cost.memory import STAGE_KEYS, MemoryBreakdown, memory, stage_layers, stage_params
from asap.cost.pipeline import bubble_s, uneven_chunk_excess_s
from asap.cost.roofline import elementwise_time_s
from asap.spec.hardware import Cluster
from asap.spec.model import ModelSpec
from asap.spec.strategy import Strategy, check_strategy, resolve_strategy
from asap.spec.train import TrainSpec

ADAM_BYTES_PER_PARAM = 32.0  # read master, m, v, grad (16 B) + write master, m, v (12 B) + bf16 weight (2 B) + norm (2 B)
COMPUTE_KEYS = ("tp", "cp", "mbs", "sp", "ep", "etp")
COMM_KEYS = ("tp", "cp", "dp", "mbs", "sp", "ep", "etp", "recompute", "pp")


def model_flops_per_token(model: ModelSpec, seq_len: int) -> float:
    n = model.num_active_params(include_mtp=True) - model.embedding_params()
    if model.tie_embeddings:
        n += model.embedding_params()  # the tied head still multiplies
    if model.mla is not None:
        d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        d_v = model.mla.v_head_dim
    else:
        d_qk = d_v = model.head_dim
    layers = model.num_layers + model.mtp_layers
    attention = 6.0 * layers * seq_len * model.num_attention_heads * (d_qk + d_v)
    return 6.0 * n + attention


def layer_parts(lc, cm, mlp_fwd, tp_comm, ep_comm, recompute) -> dict[str, Any]:
    """One layer, one micro-batch: compute (forward + backward + recompute) and in-layer communication.

    ``recompute`` is the RECOMPUTE_CODE per row: full redoes the forward; selective redoes the attention kernel
    and the memory-bound kernels. CP's ring hides behind the attention kernel of the same pass."""
    fwd = lc.attn_fwd_s + mlp_fwd
    bwd = lc.attn_bwd_s() + mlp_fwd * BWD_GEMM
    full = recompute == 2
    extra = np.select([full, recompute == 1], [fwd, lc.attn_core_fwd_s + lc.memory_bound_fwd_s], 0.0)
    cp_exposed = (np.maximum(0.0, cm.cp_fwd_s - lc.attn_core_fwd_s)
                  + np.maximum(0.0, 2 * cm.cp_fwd_s - lc.attn_core_fwd_s * 2.5)
                  + np.where(full, np.maximum(0.0, cm.cp_fwd_s - lc.attn_core_fwd_s), 0.0))
    cp_total = cm.cp_fwd_s * np.where(full, 4, 3)
    # TP and EP traffic repeats in a recomputed forward (passes: 3 instead of 2, see layer_comm)
    return dict(compute=fwd + bwd + extra, tp=tp_comm, ep=ep_comm, cp=cp_exposed, cp_total=cp_total,
                mem=lc.memory_bound_fwd_s * (1 + BWD_ELEMENTWISE))


@dataclass
class BatchEstimate:
    """Arrays over a StrategyBatch: what ``plan`` ranks."""

    step_time_s: np.ndarray
    peak_memory_gb: np.ndarray
    fits: np.ndarray
    breakdown_s: dict[str, np.ndarray]
    exposed_s: dict[str, np.ndarray]
    memory_gb: dict[str, np.ndarray]
    memory_bound_s: np.ndarray
    imbalance_s: np.ndarray
    ep_split_saving_s: np.ndarray | float = 0.0  # what splitting micro-batches for dispatch overlap would save


SPLIT_CHUNKS = 2


def split_dispatch_exposed_s(a2a_s, expert_s, chunks: int = SPLIT_CHUNKS):
    """Exposed all-to-all of one pass of an MoE layer when the micro-batch is cut into ``chunks`` pieces that
    pipeline dispatch, expert compute and combine (Megatron-Core's EP communication overlap, DeepSeek-V3's
    DualPipe sec. 3.2.1): the first dispatch and the last combine stay exposed, and in between each chunk's
    dispatch + combine hides behind another chunk's expert GEMMs, leaving only their excess:
        exposed = (D + C)/k + (k - 1) max(0, (D + C - E)/k),   D = C = ``a2a_s``, E = ``expert_s``
    (k = 1 gives the unsplit D + C)."""
    comm = 2.0 * a2a_s
    return comm / chunks + (chunks - 1) * np.maximum(0.0, (comm - expert_s) / chunks)


def estimate_batch(model: ModelSpec, cluster: Cluster, train: TrainSpec, S: StrategyBatch,
                   mem: MemoryBreakdown | None = None) -> BatchEstimate:
    """Price every row of S; ``mem`` passes peak memory already computed for S (the planner prunes by it)."""
    acc = cluster.accelerator
    # each term is computed once per distinct combination of the knobs it depends on
    lc = by_unique(S, COMPUTE_KEYS, lambda s: layer_compute(model, acc, train, s))
    cm = by_unique(S, COMM_KEYS, lambda s: layer_comm(model, cluster, train, s))
    m = (train.global_batch // (S.dp * S.mbs)).astype(float)
    pp = S.pp.astype(float)
    vpp = S.vpp.astype(float)

    dense = layer_parts(lc, cm, lc.dense_mlp_fwd_s, cm.tp_dense_s, 0.0, S.recompute)
    moe = layer_parts(lc, cm, lc.moe_mlp_fwd_s, cm.tp_moe_s, cm.ep_s, S.recompute) if model.moe is not None else dense
    head = lc.head_fwd_s * (1 + BWD_GEMM) * (1 + model.mtp_layers)
    embed = lc.embed_fwd_s * (1 + BWD_ELEMENTWISE)

    # ---- stages: the first (embedding, leading dense layers), the fullest middle one and the last (head, MTP),
    # each with its layers under the even split frameworks use by default (memory.stage_layers: the remainder
    # of L / pp on the middle stages); the slowest paces the pipeline. Evening out the stage work beyond that is
    # the pipeline ILP's job (search/stages.py), run on the best candidates. --------------------------------
    n_dense = model.num_dense_layers
    keys = ("compute", "tp", "ep", "cp", "cp_total", "mem")
    is_moe = model.moe is not None

    def combine(n_d, n_m, extra_compute, mtp=0):
        out = {k: n_d * dense[k] + (n_m + mtp) * moe[k] for k in keys}
        out["compute"] = out["compute"] + extra_compute
        return out

    def total(st):
        return st["compute"] + st["tp"] + st["ep"] + st["cp"]

    n_first, n_middle, n_last = stage_layers(model, S)
    n_dense_first = np.minimum(n_first, n_dense)
    first = combine(n_dense_first, n_first - n_dense_first, embed)
    middle = combine(0.0 if is_moe else n_middle, n_middle if is_moe else 0.0, 0.0)
    last = combine(0.0 if is_moe else n_last, n_last if is_moe else 0.0, head, model.mtp_layers)
    whole = combine(float(n_dense), float(model.num_moe_layers), embed + head, model.mtp_layers)

    # In a pipeline's steady state each forward is paired with another micro-batch's backward, and the expert
    # all-to-alls of one run while the other computes (DeepSeek-V3's DualPipe, Megatron-Core's
    # --overlap-moe-expert-parallel-comm): up to the pair's computation hides; the warm-up and cool-down
    # passes have no partner. Without a pipeline (or under GPipe) nothing pairs.
    paired = (S.pp > 1) & (S.schedule != SCHEDULE_CODE["gpipe"]) & is_moe

    def hide_ep(st):
        hidden_ep = np.where(paired, np.minimum(st["ep"], st["compute"]), 0.0)
        return dict(st, ep=st["ep"] - hidden_ep, ep_hidden=hidden_ep)

    first, middle, last, whole = (hide_ep(st) for st in (first, middle, last, whole))
    keys = keys + ("ep_hidden",)

    single = pp == 1
    t_first, t_middle, t_last = total(first), np.where(pp > 2, total(middle), 0.0), total(last)
    use_last = (t_last >= t_first) & (t_last >= t_middle)
    # which stage is the critical one: 0 first, 1 last, 2 the whole model (pp = 1), 3 a middle one
    pick = np.where(single, 2, np.where(use_last, 1, np.where(t_middle > t_first, 3, 0)))
    stage = {k: np.choose(pick, np.broadcast_arrays(first[k], last[k], whole[k], middle[k])) for k in keys}
    t_max = total(stage)
    t_avg = total(whole) / pp
    bubble = bubble_s(S.pp, S.vpp, S.schedule, t_avg, t_max) + uneven_chunk_excess_s(
        model.num_layers, S.pp, S.vpp, S.schedule, m.astype(np.int64), t_avg)
    imbalance = np.where(single, 0.0, m * (t_max - t_avg))

    # ---- the alternative of split micro-batches overlapping EP dispatch with expert compute -------------
    ep_split_saving = 0.0
    if model.moe is not None:
        passes = np.where(S.recompute == 2, 3.0, 2.0)
        a2a = cm.ep_s / passes / 2.0  # one dispatch (= one combine) of one pass
        e_fwd = lc.expert_fwd_s
        split = (split_dispatch_exposed_s(a2a, e_fwd) + split_dispatch_exposed_s(a2a, e_fwd * BWD_GEMM)
                 + np.where(S.recompute == 2, split_dispatch_exposed_s(a2a, e_fwd), 0.0))
        unsplit = 2.0 * a2a * passes
        ratio = np.where(unsplit > 0, split / np.maximum(unsplit, 1e-30), 1.0)
        ep_split_saving = m * stage["ep"] * (1.0 - ratio)

    # ---- pipeline messages ----------------------------------------------------------------------------
    pp_total = 2 * m * vpp * cm.pp_msg_s
    pp_exposed = np.where(S.vpp > 1, 2 * (pp - 1) * cm.pp_msg_s, pp_total)

    # ---- data parallel and optimizer ------------------------------------------------------------------
    first_dense, first_expert, middle_dense, middle_expert, last_dense, last_expert = by_unique(
        S, STAGE_KEYS, lambda s: stage_params(model, s))
    dense_params = np.choose(pick, np.broadcast_arrays(first_dense, last_dense, last_dense, middle_dense))
    expert_params = np.choose(pick, np.broadcast_arrays(first_expert, last_expert, last_expert, middle_expert))
    if model.moe is None:
        expert_params = np.zeros_like(dense_params)
    with_mtp = n_last + model.mtp_layers
    layers_on_stage = np.choose(pick, np.broadcast_arrays(n_first, with_mtp, with_mtp, n_middle))
    dpc = data_parallel_comm(cluster, S, dense_params, expert_params, layers_on_stage)
    fwd_share = 1.0 / (1.0 + BWD_GEMM)
    micro_compute = stage["compute"]
    zero3 = S.zero >= 3
    # ZeRO-2 keeps only its gradient shard, so it reduce-scatters after every micro-batch's backward
    # (DeepSpeed ZeRO-2 with gradient accumulation); ZeRO-3 also gathers weights per micro-batch
    grad_rounds = np.where(S.zero >= 2, m, 1.0)
    gather_rounds = np.where(zero3, m, 1.0)
    dp_total = grad_rounds * dpc.grad_sync_s + gather_rounds * dpc.param_gather_s
    first_layer_gather = dpc.param_gather_s / np.maximum(layers_on_stage, 1)
    bwd_window = micro_compute * (1 - fwd_share)
    # ZeRO-0/1 reduce gradients once per step as each bucket completes (Megatron-Core overlap_grad_reduce). With
    # interleaving the chunks finish in turn: the cool-down runs the last pp micro-batches through chunk v-1,
    # then v-2, ..., so chunk c's reduction can hide behind the pp (v-1) chunk-backwards still to come plus the
    # last chunk's own (((v-1) pp + 1) / v micro-batch backwards in all); without interleaving, behind the last
    # micro-batch's backward. The weight all-gather of the next step mirrors it in the warm-up forwards.
    chunks_ahead = np.where((S.vpp > 1) & (S.zero <= 1), ((S.vpp - 1) * np.minimum(m, pp) + 1) / S.vpp, 1.0)
    step_bwd_window = bwd_window * chunks_ahead
    step_fwd_window = micro_compute * fwd_share * chunks_ahead
    dp_exposed = np.where(
        zero3,
        # forward: the weight gathers hide behind forward compute; backward: gathers again plus the gradient
        # reduce-scatters behind backward compute (FSDP prefetches one layer ahead in both passes)
        m * (np.maximum(0.0, dpc.param_gather_s / 2 - micro_compute * fwd_share)
             + np.maximum(0.0, dpc.param_gather_s / 2 + dpc.grad_sync_s - bwd_window) + first_layer_gather),
        np.where(S.zero >= 2, m * np.maximum(0.0, dpc.grad_sync_s - bwd_window),
                 np.maximum(0.0, dpc.grad_sync_s - step_bwd_window))
        + np.maximum(0.0, dpc.param_gather_s - step_fwd_window),
    )
    shard_d = np.where(S.zero >= 1, S.dp * S.cp, 1)
    edp = np.maximum(S.tp * S.cp * S.dp // np.maximum(S.ep * S.etp, 1), 1)
    shard_e = np.where(S.zero >= 1, edp, 1)
    optimizer = elementwise_time_s(acc, ADAM_BYTES_PER_PARAM * (dense_params / shard_d + expert_params / shard_e),
                                   kernels=20)

    # overlapped communication still slows the computation it hides behind (SMs and HBM it occupies)
    tax = acc.family_constants.overlap_tax
    tp_hidden = m * stage["tp"] * acc.family_constants.tp_overlap
    unpaired = np.minimum(m, pp - 1)  # warm-up forwards and cool-down backwards: (pp - 1) micro-batches' worth
    ep_hidden = (m - unpaired) * stage["ep_hidden"]
    hidden = (dp_total - dp_exposed) + m * (stage["cp_total"] - stage["cp"]) + tp_hidden + ep_hidden
    exposed = {
        "compute": m * stage["compute"] + tax * hidden,
        "tp_comm": m * stage["tp"] - tp_hidden,
        "cp_comm": m * stage["cp"],
        "ep_comm": m * stage["ep"] + unpaired * stage["ep_hidden"],
        "pp_comm": pp_exposed,
        "dp_comm": dp_exposed,
        "bubble": bubble,
        "optimizer": optimizer,
    }
    breakdown = dict(exposed)
    breakdown.update(tp_comm=m * stage["tp"], cp_comm=m * stage["cp_total"], pp_comm=pp_total, dp_comm=dp_total,
                     ep_comm=m * (stage["ep"] + stage["ep_hidden"]))
    step = sum(exposed.values())
    if mem is None:
        mem = memory(model, acc, train, S)
    return BatchEstimate(
        step_time_s=step, peak_memory_gb=mem.peak_gb, fits=mem.peak_gb <= cluster.hbm_gb,
        breakdown_s=breakdown, exposed_s=exposed,
        memory_gb={"weights": mem.weights_gb, "grads": mem.grads_gb, "optimizer": mem.optimizer_gb,
                   "activations": mem.activations_gb, "allowance": mem.allowance_gb},
        memory_bound_s=m * stage["mem"], imbalance_s=imbalance, ep_split_saving_s=ep_split_saving)


# --------------------------------------------------------------------------------------------------------
# One strategy: the design.md estimate object
# --------------------------------------------------------------------------------------------------------


@dataclass
class Estimate:
    strategy: Strategy
    step_time_s: float
    tokens_per_s: float
    tokens_per_s_per_device: float
    model_tflops_per_device: float
    mfu: float
    peak_memory_gb: float
    fits: bool
    breakdown_s: dict[str, float]
    exposed_s: dict[str, float]
    memory_gb: dict[str, float]
    bottleneck: str
    evidence: list[str] = field(default_factory=list)
    alternatives: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.to_dict(),
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "model_tflops_per_device": self.model_tflops_per_device,
            "mfu": self.mfu,
            "peak_memory_gb": self.peak_memory_gb,
            "fits": self.fits,
            "breakdown_s": self.breakdown_s,
            "exposed_s": self.exposed_s,
            "memory_gb": self.memory_gb,
            "bottleneck": self.bottleneck,
            "evidence": self.evidence,
            "alternatives": self.alternatives,
        }


def name_bottleneck(exposed: dict[str, float], memory_bound_s: float, imbalance_s: float,
                    step_time_s: float) -> tuple[str, list[str]]:
    """The largest share of the step, in design.md's vocabulary, with the figures that made it so."""
    comm = sum(exposed[k] for k in ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm"))
    compute = exposed["compute"] + exposed["optimizer"]
    bubble = exposed["bubble"]
    # imbalance (the heaviest stage's excess over the mean) is time spent inside the critical stage's compute
    # and communication; count it apart so no second counts twice
    balanced_compute = max(compute - imbalance_s, 0.0)
    shares = {"compute": balanced_compute, "communication": comm, "pipeline_bubble": bubble,
              "imbalance": imbalance_s}
    name = max(shares, key=shares.get)
    if name == "compute" and memory_bound_s > 0.5 * compute:  # mostly low-intensity kernels: HBM-bound
        name = "memory"
    evidence = [f"{k} {v / step_time_s:.0%} of the step" for k, v in sorted(shares.items(), key=lambda kv: -kv[1])]
    evidence.append(f"memory-bound kernels {memory_bound_s / max(compute, 1e-12):.0%} of compute time")
    return name, evidence


def estimate_from_batch(model: ModelSpec, cluster: Cluster, train: TrainSpec, S: StrategyBatch,
                        be: BatchEstimate, i: int) -> Estimate:
    step = float(be.step_time_s[i])
    devices = cluster.num_devices
    tokens = train.tokens_per_step
    mft = model_flops_per_token(model, train.seq_len) * tokens / step / devices
    peak = cluster.accelerator.peak_flops("fp32" if train.precision == "fp32" else "bf16")
    exposed = {k: float(v[i]) for k, v in be.exposed_s.items()}
    bottleneck, evidence = name_bottleneck(exposed, float(be.memory_bound_s[i]), float(be.imbalance_s[i]), step)
    alternatives = {}
    saving = float(np.broadcast_to(be.ep_split_saving_s, be.step_time_s.shape)[i])
    if saving > 0:
        alternatives["moe_split_dispatch"] = {
            "chunks": SPLIT_CHUNKS, "ep_comm_s": exposed["ep_comm"] - saving, "step_time_s": step - saving,
            "why": "each micro-batch cut in two so one half's dispatch/combine hides behind the other's experts"}
    return Estimate(
        strategy=S.strategy(i), step_time_s=step, tokens_per_s=tokens / step,
        tokens_per_s_per_device=tokens / step / devices, model_tflops_per_device=mft / 1e12, mfu=mft / peak,
        peak_memory_gb=float(be.peak_memory_gb[i]), fits=bool(be.fits[i]),
        breakdown_s={k: float(v[i]) for k, v in be.breakdown_s.items()}, exposed_s=exposed,
        memory_gb={k: float(np.broadcast_to(v, be.step_time_s.shape)[i]) for k, v in be.memory_gb.items()},
        bottleneck=bottleneck, evidence=evidence, alternatives=alternatives)


def estimate(model: ModelSpec, cluster: Cluster, train: TrainSpec, strategy: Strategy | str | dict | None) -> Estimate:
    """Price one strategy (a Strategy, or ``key=value`` text/mapping completed with the documented defaults)."""
    if isinstance(strategy, Strategy):
        check_strategy(strategy, model, train, cluster.num_devices)
    else:
        strategy = resolve_strategy(strategy, model, train, cluster.num_devices)
    S = StrategyBatch.from_strategies([strategy])
    be = estimate_batch(model, cluster, train, S)
    return estimate_from_batch(model, cluster, train, S, be, 0)
