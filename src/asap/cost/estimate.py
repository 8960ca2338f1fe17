"""The composed estimate: step time, throughput, MFU, peak memory and the breakdown of one training step.

The model is a chain of units (embedding, dense and MoE layers, MTP modules, LM head and loss;
``asap.cost.units``), each with its time per micro-batch
    t_unit = forward + backward compute + recompute + TP and EP communication + exposed CP communication,
and a pipeline device is the units the layout (``asap.spec.layout``) puts on it: t_device = sum of its units.
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
for separate key and value head sizes (without causal savings, as published MFUs count it). ``mfu_causal``
counts the pairs a causal mask keeps (half the square, as the Llama 3 report's 38-43% do):
    causal model FLOPs per token = 6 N_matmul + 6 L s n_heads (d_qk + d_v) / 2
the two differ by 3 L s n_heads (d_qk + d_v), which grows with s: at 128K tokens the attention term dominates.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.classes import Counterfactuals, classify
from asap.cost.communication import data_parallel_comm
from asap.cost.dp_overlap import bucketed_exposed_s, dp_buckets, dp_link_busy_s
from asap.cost.host import step_host_s
from asap.cost.layer_ops import window_keys_ratio
from asap.cost.operations import BWD_GEMM
from asap.cost.bands import error_bands, error_quantiles
from asap.cost.device_memory import (MemoryBreakdown, fits_memory, fits_with_headroom, memory, stack_device_figures,
                              usable_hbm_gb)
from asap.cost.pipeline import (bubble_s, exposed_p2p_messages, overlapped_p2p_excess_s,
                                uneven_chunk_excess_s, zb_small_batch_excess_s)
from asap.cost.step_fixed import step_fixed_s
from asap.cost.units import DeviceFigures, UnitTimes, paired_hidden_s, unit_times
from asap.spec.framework import Framework, GradSync
from asap.spec.hardware import Cluster
from asap.spec.job import Job
from asap.spec.model import ModelSpec
from asap.spec.strategy import RecomputePolicy, Schedule, Strategy, Zero, check_strategy, resolve_strategy
from asap.spec.knobs import Recompute
from asap.spec.train import TrainSpec
from asap.spec.words import Bottleneck, ClassSaving

UNIT_KEYS = ("tp", "cp", "dp", "mbs", "sp", "ep", "etp", "dispatcher", "recompute", "pp",
             "offload_act", "offload_layers", "cp_comm", "cp_a2a", "vocab_tiles")  # what unit_times reads
SPLIT_CHUNKS = 2  # pieces a micro-batch is cut into for the split-dispatch alternative


# what ``mfu`` counts for attention (``mfu_causal`` beside it counts the causal half)
MFU_ATTENTION_CONVENTION = "non-causal: 6 L s heads (d_qk + d_v) per token (PaLM App. B); mfu_causal: half of it"


def model_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """Model FLOPs per token (the module docstring's formula); ``causal``: the attention term counts the half
    of the query-key square a causal mask keeps (``mfu_causal``), else the whole square (``mfu``, PaLM's)."""
    n = model.num_active_params(include_mtp=True) - model.embedding_params()
    if model.tie_embeddings:
        n += model.embedding_params()  # the tied head still multiplies
    if model.mla is not None:
        d_qk = model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
        d_v = model.mla.v_head_dim
    else:
        d_qk = d_v = model.head_dim
    layers = float(model.num_layers + model.mtp_layers)  # a sliding-window layer counts its share of the pairs
    if model.num_window_layers:
        layers -= model.num_window_layers * (1.0 - float(window_keys_ratio(seq_len, model.sliding_window)))
    attention = 6.0 * layers * seq_len * model.num_attention_heads * (d_qk + d_v)
    return 6.0 * n + (attention / 2 if causal else attention)


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
    dispatcher: np.ndarray | None = None  # the MoE dispatcher priced per row (index into DISPATCHERS)
    host_memory_gb: np.ndarray | float = 0.0  # what host offload keeps in host memory per device
    # parts of memory_gb's terms (MemoryBreakdown's gathered, reduce buffers, logits)
    memory_detail_gb: dict[str, np.ndarray | float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------------------
# Step 1: the stages. Every representative device of the layout is timed from its units; the slowest paces
# the pipeline. Evening out stage work beyond the default split is the layer split's job (search/split_dp.py).
# --------------------------------------------------------------------------------------------------------


@dataclass
class StageTimes:
    parts: dict[str, np.ndarray]  # the critical device, per micro-batch: TIME_PARTS + ep_hidden
    t_max_s: np.ndarray  # the critical device's time per micro-batch
    t_avg_s: np.ndarray  # the whole model's time per micro-batch / pp
    critical: np.ndarray  # [N] index of the critical device among the representatives


def _busy(parts):
    return parts["compute"] + parts["tp"] + parts["ep"] + parts["cp"] + parts["host"]


def expert_overlap(model: ModelSpec, S: StrategyBatch, m) -> np.ndarray:
    """Rows whose expert all-to-alls hide behind an adjacent micro-batch's computation (Megatron-Core's
    combined 1F1B, ``--overlap-moe-expert-parallel-comm``; DeepSeek-V3's DualPipe): the switch on, an MoE
    model, a pipeline whose steady state pairs one micro-batch's forward with another's backward (pp > 1, not
    GPipe), and no full recompute (the documented incompatibility). Megatron-Core (v0.14) also pairs
    micro-batches without a pipeline; that is not priced: the one such calibration run (Qwen3-30B-A3B on 16
    H100) is predicted 28% fast already, and pairing would take it to -46%."""
    return ((S.a2a_overlap == 1) & (S.schedule != Schedule.GPIPE) & (model.moe is not None) & (S.pp > 1)
            & (m >= 2) & (S.recompute != Recompute.FULL))


def stage_times(model: ModelSpec, S: StrategyBatch, f: DeviceFigures, m) -> StageTimes:
    """The critical device: the busiest representative once paired EP traffic hides (``expert_overlap``: up to
    the paired micro-batch's computation; the unpaired warm-up and cool-down passes are ``compose``'s), its host
    then the paired one (``asap.cost.units.paired_host_s``). Both cases are ranked once per device-figure row,
    then each strategy takes its own."""
    paired = expert_overlap(model, S, m)
    t, w = f.time, f.whole_time
    assert t is not None and w is not None  # estimate_batch's figures are built with the unit times
    hidden = paired_hidden_s(t["ep"], t["compute"])
    busy = _busy(t)
    paired_busy = busy - hidden + t["host_paired"] - t["host"]  # the host a shorter device time leaves exposed
    critical = np.where(paired, f.rows(np.argmax(paired_busy, axis=1)), f.rows(np.argmax(busy, axis=1)))
    parts = {k: f.at(v, critical) for k, v in t.items()}
    parts["ep_hidden"] = np.where(paired, f.at(hidden, critical), 0.0)
    parts["ep"] = parts["ep"] - parts["ep_hidden"]
    parts["host"] = np.where(paired, parts["host_paired"], parts["host"])
    whole_busy = f.rows(_busy(w)) - np.where(
        paired, f.rows(paired_hidden_s(w["ep"], w["compute"]) + w["host"] - w["host_paired"]), 0.0)
    return StageTimes(parts=parts, t_max_s=_busy(parts), t_avg_s=whole_busy / S.pp, critical=critical)


# --------------------------------------------------------------------------------------------------------
# Step 2: the pipeline schedule: closed form, plus what the event simulator finds beyond it
# --------------------------------------------------------------------------------------------------------


def pipeline_bubble_s(model: ModelSpec, S: StrategyBatch, f: DeviceFigures, times: StageTimes, m) -> np.ndarray:
    """Fill and drain over the closed form (cost/pipeline.py), plus the stall of unequal interleaved chunks and
    ZB-H1's unfilled warm-up when m < pp, both from the event simulator."""
    t_avg, t_max = times.t_avg_s, times.t_max_s
    m_int = m.astype(np.int64)
    return (bubble_s(S.pp, S.vpp, S.schedule, t_avg, t_max)
            + uneven_chunk_excess_s(f.layouts, f.rows(f.layout_id), S.schedule, m_int, t_avg, model.num_layers)
            + zb_small_batch_excess_s(S.pp, S.vpp, S.schedule, m_int, t_avg))


def split_dispatch_exposed_s(a2a_s, expert_s, chunks: int = SPLIT_CHUNKS):
    """Exposed all-to-all of one pass of an MoE layer when the micro-batch is cut into ``chunks`` pieces that
    pipeline dispatch, expert compute and combine (Megatron-Core's EP communication overlap, DeepSeek-V3's
    DualPipe sec. 3.2.1): the first dispatch and the last combine stay exposed, and in between each chunk's
    dispatch + combine hides behind another chunk's expert GEMMs, leaving only their excess:
        exposed = (D + C)/k + (k - 1) max(0, (D + C - E)/k),   D = C = ``a2a_s``, E = ``expert_s``
    (k = 1 gives the unsplit D + C)."""
    comm = 2.0 * a2a_s
    return comm / chunks + (chunks - 1) * np.maximum(0.0, (comm - expert_s) / chunks)


def ep_split_saving_s(model: ModelSpec, S: StrategyBatch, ut: UnitTimes, times: StageTimes, m):
    """What cutting each micro-batch in two for dispatch/expert overlap would save where the all-to-alls are not
    already paired (reported as an alternative, not applied). ``ut`` is compact (``ut.rows`` maps to it)."""
    if model.moe is None:
        return 0.0
    full = S.recompute == Recompute.FULL
    passes = np.where(full, 3.0, 2.0)
    a2a = ut.rows(ut.cm.ep_s) / passes / 2.0  # one dispatch (= one combine) of one pass
    e_fwd = ut.rows(ut.lc.expert_fwd_s)
    split = (split_dispatch_exposed_s(a2a, e_fwd) + split_dispatch_exposed_s(a2a, e_fwd * BWD_GEMM)
             + np.where(full, split_dispatch_exposed_s(a2a, e_fwd), 0.0))
    unsplit = 2.0 * a2a * passes
    ratio = np.where(unsplit > 0, split / np.maximum(unsplit, 1e-30), 1.0)
    return np.where(expert_overlap(model, S, m), 0.0, m * times.parts["ep"] * (1.0 - ratio))


# --------------------------------------------------------------------------------------------------------
# Step 3: data parallelism and the optimizer, from the critical device's parameters
# --------------------------------------------------------------------------------------------------------


@dataclass
class DataParallelTerms:
    total_s: np.ndarray
    exposed_s: np.ndarray
    optimizer_s: np.ndarray


def per_parameter_gathers_s(cluster: Cluster, S: StrategyBatch, fw: Framework, dense_params, expert_params,
                            layers_on_stage, gather_s):
    """ZeRO-3 weight gathers as DeepSpeed runs them (``Framework.collectives_per_layer`` > 1: one collective per
    parameter, gathered into list outputs on each submodule's pre-forward hook): each such small gather of a
    data-parallel group crosses a node on one ring channel, at about one NIC's rate, not over all of its
    members' NICs there (NCCL cuts a small collective's channels, ``getChannnelThreadInfo`` in
    src/enqueue.cc; the group's members in the node take turns on that channel). The limit is per group, not
    per node: with tp > 1 the node holds tp data-parallel groups (one per tensor-parallel rank: DeepSpeed
    partitions each tp shard over ``mpu.get_data_parallel_group()``, ``deepspeed.zero.Init(mpu=...)``), each
    its own communicator on its own GPUs and their own NICs, so each group gets one NIC and a rank's gathers per
    step (P/tp weights, tp times the micro-batches) take as long at any tp. Activation checkpointing re-runs
    each forward, which fetches the released parameters again: forward, recompute and backward, 3 gathers where
    2 are priced. Other stacks: ``gather_s`` as is."""
    if fw.collectives_per_layer <= 1:
        return gather_s
    slow = data_parallel_comm(cluster, S, dense_params, expert_params, layers_on_stage,
                              fw.collectives_per_layer, gather_nics_per_domain=1).param_gather_s
    passes = np.where(S.recompute == Recompute.FULL, 1.5, 1.0)
    return np.where(S.zero >= Zero.PARAMETERS, slow * passes, gather_s)


@dataclass
class DataParallelTraffic:
    """The data-parallel collectives of a step as the stack issues them: ``grad_sync_s`` one gradient reduction,
    ``gather_s`` one weight gather (half of it where the stage keeps its gathered weights through the step),
    when each recurs (``grad_per_mb``, ``gather_per_mb``: per micro-batch, else once per step) and their total."""

    grad_sync_s: np.ndarray
    gather_s: np.ndarray
    grad_per_mb: np.ndarray
    gather_per_mb: np.ndarray
    total_s: np.ndarray


def data_parallel_traffic(cluster: Cluster, S: StrategyBatch, fw: Framework, dense_params, expert_params,
                          layers_on_stage, m, precision: str = "bf16", tensors_on_stage=None) -> DataParallelTraffic:
    """The traffic: total = (m if per micro-batch else 1) * grad_sync + (m if per micro-batch else 1) * gather.

    Per step (ZeRO-0/1; Megatron-Core overlap_grad_reduce, DeepSpeed at the accumulation boundary; FSDP2 under
    a pipeline, which keeps the gathered stage for all micro-batches: gathered for forward only, gather / 2);
    per micro-batch: ZeRO-3 gathers weights for forward and again for backward and reduce-scatters each
    backward, ZeRO-2 (where the stack reduce-scatters partitioned gradients per micro-batch) keeps only its
    gradient shard, and a stack that syncs every micro-batch's gradients at ZeRO <= 1."""
    zero1_gathers = tensors_on_stage if fw.zero1_gather_per_tensor and tensors_on_stage is not None else 1.0
    buckets = dp_buckets(fw.dp_bucket_elements(S.zero, S.dp * S.cp), dense_params + expert_params, layers_on_stage)
    dpc = data_parallel_comm(cluster, S, dense_params, expert_params, layers_on_stage, fw.collectives_per_layer,
                             fw.grad_bytes(precision, S.zero, S.grad_bf16), zero1_gathers,
                             4.0 if precision == "fp32" else np.where(S.fp8_param > 0, 1.0, 2.0), buckets=buckets)
    param_gather_s = per_parameter_gathers_s(cluster, S, fw, dense_params, expert_params, layers_on_stage,
                                             dpc.param_gather_s)
    zero3 = S.zero >= Zero.PARAMETERS
    kept = zero3 & (S.pp > 1) & fw.fsdp_keeps_params_under_pp
    gather_per_mb = zero3 & ~kept
    grad_per_mb = gather_per_mb | ((S.zero == Zero.GRADIENTS) & fw.zero2_grad_per_micro_batch) | (
        (S.zero <= Zero.OPTIMIZER) & (fw.zero_le1_grad_sync == GradSync.PER_MICRO_BATCH))
    gather = np.where(kept, param_gather_s / 2, param_gather_s)  # kept: gathered for forward only
    total = np.where(grad_per_mb, m, 1.0) * dpc.grad_sync_s + np.where(gather_per_mb, m, 1.0) * gather
    return DataParallelTraffic(dpc.grad_sync_s, gather, grad_per_mb, gather_per_mb, total)


def data_parallel_exposed_s(S: StrategyBatch, fw: Framework, t: DataParallelTraffic, dense_params, expert_params,
                            layers_on_stage, micro_compute, m, embedding_params=0.0, link_busy_s=0.0):
    """The overlap: how much of the traffic ``t`` no compute hides.

    The window is the compute whose links the traffic has to itself, free = max(0, compute - link_busy)
    (``link_busy_s``: hidden TP/CP traffic on the same tier, per micro-batch), split fwd = free / (1 + 2),
    bwd = the rest. Once per step: the reduction hides behind the last micro-batch's backward, or with
    interleaving behind the chunk-backwards still to come as the chunks finish in turn (the cool-down runs the
    last pp micro-batches through chunk v-1, then v-2, ...: ((v-1) min(m, pp) + 1) / v micro-batch backwards);
    the next step's weight gather mirrors it in the warm-up forwards. Per micro-batch: ZeRO-3 prefetches one
    layer ahead (its first layer's gather exposed), m (max(0, gather/2 - fwd) + first) + (m-1) max(0,
    gather/2 + grad - bwd) + the step's tail; ZeRO-2 (m-1) max(0, grad - bwd) + the last bucket. Bucketed
    traffic leaves its last reduction bucket and first gather bucket exposed at the step boundary
    (``asap.cost.dp_overlap``), where reduce-scatter, optimizer and all-gather serialize. A stack whose FSDP
    wraps the token embedding as its own unit (``Framework.fsdp_embedding_unit``) starts each forward with that
    unit's gather and the first block's, and ends the step's backward with their reduce-scatters, with no
    compute to hide behind. With async collectives (XLA's latency-hiding scheduler) any collective may overlap
    any compute of the step: at most the first layers' gathers + max(0, total - m free). Without overlap
    (``Framework.dp_overlap`` off) all of it."""
    grad, gather, gather_per_mb, grad_per_mb = t.grad_sync_s, t.gather_s, t.gather_per_mb, t.grad_per_mb
    first_layer_gather = gather / np.maximum(layers_on_stage, 1)
    step_end: float | np.ndarray = 0.0
    if fw.fsdp_embedding_unit:
        # the embedding unit and the first block: the embedding's lookup is too short to hide the first block's
        # prefetched gather, and its scatter-add backward too short to hide the first block's reduce-scatter
        share = np.where(S.pp > 1, 0.0, embedding_params / np.maximum(dense_params + expert_params, 1.0))
        share = np.where(share > 0, share + (1.0 - share) / np.maximum(layers_on_stage, 1), 0.0)
        first_layer_gather = np.where(share > 0, gather * share, first_layer_gather)
        step_end = np.where(gather_per_mb, grad * share, 0.0)
    free = np.maximum(0.0, micro_compute - link_busy_s)  # compute whose links the traffic has to itself
    fwd_share = 1.0 / (1.0 + BWD_GEMM)
    fwd, bwd = free * fwd_share, free * (1 - fwd_share)
    buckets = dp_buckets(fw.dp_bucket_elements(S.zero, S.dp * S.cp), dense_params + expert_params, layers_on_stage)
    interleaved_dp = (S.vpp > 1) & ~grad_per_mb
    chunks_ahead = np.where(interleaved_dp, ((S.vpp - 1) * np.minimum(m, S.pp) + 1) / S.vpp, 1.0)
    per_step_gather = bucketed_exposed_s(gather, fwd * chunks_ahead, buckets)
    grad_over = np.maximum(0.0, grad - bwd)
    # ZeRO-3: the last micro-batch's backward ends with the first layer's reduce-scatter (the embedding unit's
    # own ``step_end`` where the stack wraps it)
    zero3_over = np.maximum(0.0, gather / 2 + grad - bwd)
    zero3_tail = np.where(np.asarray(step_end) > 0, 0.0, grad / buckets)
    exposed = np.select(
        [gather_per_mb, grad_per_mb],
        [m * (np.maximum(0.0, gather / 2 - fwd) + first_layer_gather) + (m - 1) * zero3_over
         + np.maximum(zero3_over, zero3_tail) + step_end,
         (m - 1) * grad_over + bucketed_exposed_s(grad, bwd, buckets) + per_step_gather],
        bucketed_exposed_s(grad, bwd * chunks_ahead, buckets) + per_step_gather)
    if fw.async_collectives:
        exposed = np.minimum(exposed, np.where(gather_per_mb, m, 1.0) * first_layer_gather
                             + np.maximum(0.0, t.total_s - m * free))
    if not fw.dp_overlap:  # reduced after the backward, gathered after the step: nothing hides
        exposed = t.total_s
    return exposed


def data_parallel_terms(cluster: Cluster, S: StrategyBatch, fw: Framework, dense_params, expert_params,
                        layers_on_stage, micro_compute, m, precision: str = "bf16",
                        tensors_on_stage=None, embedding_params=0.0, link_busy_s=0.0) -> DataParallelTerms:
    """Gradient reduction and weight gathers as the framework issues them (``asap.spec.framework``), how much of
    them hides behind compute, and the optimizer step: ``data_parallel_traffic`` (the collectives and when they
    recur), ``data_parallel_exposed_s`` (the overlap) and the step's fixed terms (``asap.cost.step_fixed``:
    the optimizer, the gradient buffer's memset, the gradient norm's and fp8 weights' amax all-reduces)."""
    traffic = data_parallel_traffic(cluster, S, fw, dense_params, expert_params, layers_on_stage, m, precision,
                                    tensors_on_stage)
    exposed = data_parallel_exposed_s(S, fw, traffic, dense_params, expert_params, layers_on_stage, micro_compute,
                                      m, embedding_params, link_busy_s)
    fixed = step_fixed_s(cluster, S, fw, dense_params, expert_params, fw.grad_bytes(precision, S.zero, S.grad_bf16),
                         1.0 if tensors_on_stage is None else tensors_on_stage, precision,
                         np.where(S.pp == 1, 2.0, 0.0) * embedding_params)  # embedding and head without a pipeline
    return DataParallelTerms(total_s=traffic.total_s, exposed_s=exposed, optimizer_s=np.sum(list(fixed.values()), axis=0))


# --------------------------------------------------------------------------------------------------------
# Step 4: the step, term by term
# --------------------------------------------------------------------------------------------------------


def compose(cluster: Cluster, S: StrategyBatch, times: StageTimes, ut: UnitTimes, dp: DataParallelTerms,
            bubble, m, step_host=0.0, tp_overlap: float | None = None) -> tuple[dict, dict]:
    """(exposed, breakdown) terms of the step. Overlapped communication still slows the computation it hides
    behind (the SMs and HBM bandwidth it occupies): the family's ``overlap_tax`` of every hidden second. The
    host's time (``asap.cost.host``) is its own term: the units' share of every micro-batch and the step's."""
    fam = cluster.accelerator.family_constants
    stage = times.parts
    pp, vpp = S.pp.astype(float), S.vpp.astype(float)
    # pipeline messages: one activation and one gradient per micro-batch and chunk; those on the critical path
    # by the schedule's blocking semantics (asap.cost.pipeline.exposed_p2p_messages)
    pp_msg = ut.rows(ut.cm.pp_msg_s)
    pp_exposed = (exposed_p2p_messages(m, pp, vpp) * pp_msg
                  + overlapped_p2p_excess_s(m, pp, vpp, pp_msg, times.t_max_s))
    # a device sends 2 m v messages; the critical path crosses every stage's links in fill and drain, so the
    # messages it waits on can outnumber them (the total is never below what is exposed)
    pp_total = np.maximum(2 * m * vpp * pp_msg, pp_exposed)
    tp_hidden = m * stage["tp"] * (fam.tp_overlap if tp_overlap is None else tp_overlap)
    # the passes without a partner: the warm-up forwards and cool-down backwards, (pp - 1) micro-batches' worth
    unpaired = np.minimum(m, pp - 1)
    ep_hidden = (m - unpaired) * stage["ep_hidden"]
    hidden = (dp.total_s - dp.exposed_s) + m * (stage["cp_total"] - stage["cp"]) + tp_hidden + ep_hidden
    exposed = {
        "compute": m * stage["compute"] + fam.overlap_tax * hidden,
        "tp_comm": m * stage["tp"] - tp_hidden,
        "cp_comm": m * stage["cp"],
        "ep_comm": m * stage["ep"] + unpaired * stage["ep_hidden"],
        "pp_comm": pp_exposed,
        "dp_comm": dp.exposed_s,
        "bubble": bubble,
        "optimizer": dp.optimizer_s,
        "host": m * stage["host"] + step_host,
    }
    breakdown = dict(exposed, tp_comm=m * stage["tp"], cp_comm=m * stage["cp_total"], pp_comm=pp_total,
                     dp_comm=dp.total_s, ep_comm=m * (stage["ep"] + stage["ep_hidden"]))
    return exposed, breakdown


def estimate_batch(job: Job, S: StrategyBatch, mem: MemoryBreakdown | None = None,
                   figures: DeviceFigures | None = None, unit: UnitTimes | None = None) -> BatchEstimate:
    """Price every row of S; ``mem``, ``figures`` and ``unit`` pass what the caller computed already for S (the
    planner prices memory first and prunes by it)."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    ut = unit if unit is not None else unit_times(job, S, UNIT_KEYS)
    f = figures if figures is not None else stack_device_figures(model, train, S, fw, ut)
    m = (train.global_batch // (S.dp * S.mbs)).astype(float)
    times = stage_times(model, S, f, m)
    bubble = pipeline_bubble_s(model, S, f, times, m)
    c = times.critical  # the critical device's parameters set the data-parallel traffic
    tensors = f.at(f.param_tensors, c)
    tp_overlap = fw.tp_overlap_share(cluster.accelerator.family_constants)
    busy = dp_link_busy_s(cluster, S, times.parts["tp"], times.parts["cp_total"], times.parts["cp"], tp_overlap)
    dp = data_parallel_terms(cluster, S, fw, f.at(f.dense_params, c), f.at(f.expert_params, c), f.at(f.layers, c),
                             times.parts["compute"], m, train.precision, tensors,
                             model.embedding_params() / S.tp, busy)
    step_host = step_host_s(cluster, S, fw, f.at(f.layers, c), tensors, m, float(model.moe is not None),
                            dp.optimizer_s)
    exposed, breakdown = compose(cluster, S, times, ut, dp, bubble, m, step_host, tp_overlap)
    if mem is None:
        mem = memory(model, cluster.accelerator, train, S, figures=f, framework=fw)
    return BatchEstimate(
        step_time_s=sum(exposed.values()), peak_memory_gb=mem.peak_gb, host_memory_gb=mem.host_gb,
        fits=fits_memory(mem, cluster.accelerator, train),
        breakdown_s=breakdown, exposed_s=exposed,
        memory_gb={"weights": mem.weights_gb, "grads": mem.grads_gb, "optimizer": mem.optimizer_gb,
                   "activations": mem.activations_gb, "allowance": mem.allowance_gb,
                   "allocated": mem.peak_gb - mem.allowance_gb},
        memory_detail_gb=mem.detail_gb(),
        memory_bound_s=m * times.parts["mem"], imbalance_s=np.where(S.pp == 1, 0.0, m * (times.t_max_s - times.t_avg_s)),
        ep_split_saving_s=ep_split_saving_s(model, S, ut, times, m), dispatcher=ut.rows(ut.cm.dispatcher))


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
    bottleneck: Bottleneck | None  # the verdict's coarse word; set by name_bottleneck
    evidence: list[str] = field(default_factory=list)
    alternatives: dict[str, Any] = field(default_factory=dict)
    imbalance_s: float = 0.0  # the heaviest pipeline stage's excess over the mean, over the step
    # model FLOP/s over the run precision's own dense peak, where it is not the bf16 one (fp8, fp32 runs)
    precision_peak_utilization: float | None = None
    step_time_range_s: tuple[float, float] = (0.0, 0.0)  # this prediction's 80% interval (asap.cost.bands)
    error_scale: float = 0.0  # the interval's relative half-width (e_hi - e_lo) / 2 (asap.cost.bands)
    host_memory_gb: float = 0.0  # what host offload keeps in host memory per device (GiB)
    # parts of memory_gb's terms, each key "<term>_<part>" (MEMORY_DETAIL_WORDS)
    memory_detail_gb: dict[str, float] = field(default_factory=dict)
    memory_bound_s: float = 0.0  # time in memory-bound kernels over the step (inside compute)
    # what can be won (asap.cost.classes), verdict first; bottleneck is classes[0]'s coarse word
    classes: list[ClassSaving] = field(default_factory=list)
    # within the device memory less the default headroom a plan keeps (``asap.cost.device_memory.HEADROOM_SHARE``);
    # ``fits`` is within the device memory (less any --memory-margin), what a published run that trained met
    fits_with_headroom: bool = True
    # MFU with the causal attention count (``model_flops_per_token(causal=True)``); ``mfu`` counts the square
    mfu_causal: float = 0.0

    @property
    def bottleneck_class(self) -> str | None:  # None until name_bottleneck sets the verdict
        return self.classes[0].cls.value if self.classes else self.bottleneck

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy.to_dict(),
            "strategy_string": str(self.strategy),
            "step_time_s": self.step_time_s,
            "step_time_range_s": list(self.step_time_range_s),
            "error_scale": self.error_scale,
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "model_tflops_per_device": self.model_tflops_per_device,
            "mfu": self.mfu,
            "mfu_causal": self.mfu_causal,
            "mfu_attention_flops": MFU_ATTENTION_CONVENTION,
            **({"precision_peak_utilization": self.precision_peak_utilization}
               if self.precision_peak_utilization is not None else {}),
            "peak_memory_gb": self.peak_memory_gb,
            **({"host_memory_gb": self.host_memory_gb} if self.host_memory_gb else {}),
            "fits": self.fits,
            "fits_with_headroom": self.fits_with_headroom,
            "breakdown_s": self.breakdown_s,
            "exposed_s": self.exposed_s,
            "memory_gb": self.memory_gb,
            "memory_detail_gb": self.memory_detail_gb,
            "bottleneck": self.bottleneck,
            "bottleneck_class": self.bottleneck_class,
            "classes": [c.to_dict() for c in self.classes],
            "evidence": self.evidence,
            "alternatives": self.alternatives,
        }


def name_bottleneck(est: "Estimate", hbm_gb: float, device_gb: float | None = None,
                    cf: Counterfactuals = Counterfactuals()) -> "Estimate":
    """``est`` with its classes (``asap.cost.classes``, verdict first), its bottleneck (the verdict's coarse
    word) and evidence (each class's figure, largest first)."""
    classes = classify(est.exposed_s, est.step_time_s, est.mfu, est.peak_memory_gb,
                       hbm_gb if device_gb is None else device_gb, est.fits,
                       est.memory_bound_s, est.imbalance_s, cf)
    est.classes = [ClassSaving(o.cls, o.saving_s, o.figure) for o in classes]
    est.bottleneck = classes[0].cls.bottleneck
    est.evidence = [o.figure for o in classes]
    return est


def step_time_range_s(step_s: float, family: str) -> tuple[float, float]:
    """[low, high] step times consistent with the family's held-out residuals (the widest it has been off on
    runs it never saw): [step / (1 + e_max), step / (1 + e_min)]. Families without calibration runs take the
    range pooled over all families. An estimate's own range is its 80% interval
    (``asap.cost.bands.prediction_interval``)."""
    bands = error_bands()
    band = bands["families"].get(family, bands["pooled"])
    return step_s / (1.0 + band["high"]), step_s / (1.0 + band["low"])


def estimate_from_batch(job: Job, S: StrategyBatch, be: BatchEstimate, i: int) -> Estimate:
    model, cluster, train = job.model, job.cluster, job.train
    step = float(be.step_time_s[i])
    devices = cluster.num_devices
    tokens = train.tokens_per_step
    mft = model_flops_per_token(model, train.seq_len) * tokens / step / devices
    peak = mfu_peak_flops(cluster.accelerator)
    own = cluster.accelerator.peak_flops(train.precision)  # fp32 without a figure of its own: half of bf16
    exposed = {k: float(v[i]) for k, v in be.exposed_s.items()}
    band = error_quantiles(cluster.accelerator.family, job.framework.name, train.precision,
                           learned_runs=job.learned_runs, learned_spread=job.learned_spread)
    alternatives = {}
    saving = float(np.broadcast_to(be.ep_split_saving_s, be.step_time_s.shape)[i])
    if saving > 0:
        alternatives["moe_split_dispatch"] = {
            "chunks": SPLIT_CHUNKS, "ep_comm_s": exposed["ep_comm"] - saving, "step_time_s": step - saving,
            "why": "each micro-batch cut in two so one half's dispatch/combine hides behind the other's experts"}
    priced = None if be.dispatcher is None else int(np.broadcast_to(be.dispatcher, be.step_time_s.shape)[i])
    est = Estimate(
        strategy=S.strategy(i, dispatcher=priced), step_time_s=step, tokens_per_s=tokens / step,
        tokens_per_s_per_device=tokens / step / devices, model_tflops_per_device=mft / 1e12, mfu=mft / peak,
        mfu_causal=model_flops_per_token(model, train.seq_len, causal=True) * tokens / step / devices / peak,
        precision_peak_utilization=mft / own if own != peak else None,
        peak_memory_gb=float(be.peak_memory_gb[i]), fits=bool(be.fits[i]),
        breakdown_s={k: float(v[i]) for k, v in be.breakdown_s.items()}, exposed_s=exposed,
        memory_gb={k: float(np.broadcast_to(v, be.step_time_s.shape)[i]) for k, v in be.memory_gb.items()},
        memory_detail_gb={k: float(np.broadcast_to(v, be.step_time_s.shape)[i])
                          for k, v in be.memory_detail_gb.items()},
        bottleneck=None, alternatives=alternatives, imbalance_s=float(be.imbalance_s[i]),
        step_time_range_s=band.interval_s(step), error_scale=band.relative_half_width,
        host_memory_gb=float(np.broadcast_to(be.host_memory_gb, be.step_time_s.shape)[i]),
        memory_bound_s=float(be.memory_bound_s[i]),
        fits_with_headroom=bool(be.fits[i] and fits_with_headroom(be.peak_memory_gb[i], cluster.accelerator)))
    return name_bottleneck(est, usable_hbm_gb(cluster.accelerator, train), cluster.accelerator.usable_hbm_gb)


def mfu_peak_flops(acc) -> float:
    """MFU's one denominator: the dense bf16 peak per device, for every run precision (fp8 and fp32 too, so
    MFUs compare across precisions); an accelerator without bf16 (a CPU) its fp32 peak."""
    return acc.peak_flops("bf16") if acc.peak_tflops.get("bf16") else acc.peak_flops("fp32")


def counterfactuals(job: Job, strategy: Strategy, step_s: float) -> Counterfactuals:
    """The seconds the strategy's recompute, the busiest expert rank and packed documents' uneven attention cost:
    the step priced again without each (recompute=none; balanced routing; every rank the mean attention work of
    the packed samples), all else equal."""
    model, train = job.model, job.train

    def step_of(t: TrainSpec, s: Strategy) -> float:
        return float(estimate_batch(replace(job, train=t), StrategyBatch.from_strategies([s])).step_time_s[0])

    recompute = (step_s - step_of(train, replace(strategy, recompute=RecomputePolicy()))
                 if strategy.recompute.kind != Recompute.NONE else 0.0)
    expert = (step_s - step_of(replace(train, moe_imbalance=1.0), strategy)
              if model.moe is not None and train.moe_imbalance > 1.0 else 0.0)
    even = tuple((dp, train.attention_work_mean) for dp, _ in train.attention_work)  # every rank the mean
    sequence = step_s - step_of(replace(train, attention_work=even), strategy) if train.attention_work else 0.0
    return Counterfactuals(max(recompute, 0.0), max(expert, 0.0), max(sequence, 0.0))


def estimate(job: Job, strategy: Strategy, classes: bool = True) -> Estimate:
    """Price one strategy (checked against the model, the devices and the framework's options; text is read by
    ``estimate_spelled`` / ``resolve_strategy`` at the edge). ``classes``: name the bottleneck with the
    counterfactual pricings too (recompute, expert and sequence imbalance; ``asap.cost.classes``)."""
    model, cluster, train, fw = job.model, job.cluster, job.train, job.framework
    check_strategy(strategy, model, train, cluster.num_devices, framework=fw)
    S = StrategyBatch.from_strategies([strategy])
    be = estimate_batch(job, S)
    est = estimate_from_batch(job, S, be, 0)
    if not classes:
        return est
    return name_bottleneck(est, usable_hbm_gb(cluster.accelerator, train), cluster.accelerator.usable_hbm_gb,
                           counterfactuals(job, est.strategy, est.step_time_s))


def estimate_spelled(job: Job, text: str | dict | Strategy | None, classes: bool = True) -> Estimate:
    """The API's edge (``asap.estimate``): price ``key=value`` text or a mapping (completed with the documented
    defaults and the job's framework's, then checked); a ``Strategy`` is priced as it is."""
    if not isinstance(text, Strategy):
        text = resolve_strategy(text, job.model, job.train, job.devices, framework=job.framework)
    return estimate(job, text, classes)
