"""Communication of one training step: what each parallel dimension sends, over which tier, and how much of it
the frameworks hide behind compute.

Rank order: ``spec.placement`` (Megatron-Core ``order='tp-cp-ep-dp-pp'``: tp is innermost, stride 1, cp has
stride tp, dp stride tp*cp, pp stride tp*cp*dp; expert layers fold the stage's tp*cp*dp devices into etp,
stride 1, ep, stride etp, and edp, stride etp*ep). Each group's size and stride come from its ``Placement``, so
the tier a collective crosses is the one the runners' meshes put it on.

Per layer and micro-batch, with T = b s / cp tokens per device and ab bytes per activation:
- TP (Shoeybi et al. 2019; with SP, Korthikanti 2022 sec. 4.2.2): a dense layer does two all-reduces of
  T h ab in forward and two in backward (with SP each is an all-gather + reduce-scatter pair: the same bytes,
  two calls' latency); full
  recompute repeats the forward pair. An MoE layer keeps the attention pair (and the shared-expert pair); the
  routed experts exchange tokens by all-to-all instead. The family's ``tp_overlap`` share of it hides behind
  the GEMMs (estimate.py); the rest is exposed.
- EP (Lepikhin et al. 2020, GShard): dispatch and combine of T_sp tokens to top_k experts each, forward and
  backward, as the cheaper of a flat all-to-all and a hierarchical (node-deduplicated) exchange (and again under full recompute); the flat
  all-to-all adds its receive-side reordering of the tokens by local expert (``chunk_sort_s``); etp > 1 adds an all-gather/reduce-scatter of the
  routed tokens inside the etp group. With a pipeline, estimate.py hides it behind the paired micro-batch's
  computation (DualPipe, Megatron-Core 1F1B A2A overlap).
- CP (``cp_comm``, ``cp_exchange_s``): p2p (ring attention, Liu et al. 2023; Megatron-Core context parallel):
  cp-1 ring steps each passing the local K,V chunk (T kv_width ab, ``ring_links_s``); backward passes K,V and
  their gradients (2x). Each step's send overlaps that step's kernel call (``asap.cost.ring_attention``: TE's
  chunk by chunk, torch's all-gather behind the first step), so only each step's excess is exposed. a2a (Ulysses):
  four all-to-alls per pass (Q, K, V in, O out), exposed; allgather: K,V gathered over the cp group (backward:
  again, and dK,dV reduce-scattered), exposed.
- PP (Narayanan et al. 2021): one activation (forward) and one gradient (backward) message of T_sp h ab per
  micro-batch and virtual stage; those on the critical path by the schedule are exposed
  (asap.cost.pipeline.exposed_p2p_messages: blocking 1F1B; interleaved 1F1B hides all but the warm-up and
  flush hand-offs).
- DP, once per step: zero 0 all-reduces fp32 gradients (4 B/param); zero 1/2 reduce-scatter them and
  all-gather the updated bf16 weights (2 B/param), zero 2 reduce-scattering after every micro-batch since it
  keeps only its gradient shard; zero 3 gathers bf16 weights for forward and again for
  backward and reduce-scatters fp32 gradients for every micro-batch. The gradient reduction overlaps the
  backward of the last micro-batch and the weight gather the forward of the first (Megatron-Core
  overlap_grad_reduce / overlap_param_gather); ZeRO-3 prefetches one layer ahead, leaving one layer's
  gather exposed per micro-batch.
- Hybrid sharding (``dp_replicate`` = r > 1): the ZeRO collectives above run within a replica's shard group
  (dp/r x cp ranks; edp/r for experts), and every gradient reduction adds an all-reduce of the reduced shard
  (grads / shard group) across the r replicas, a group that spans nodes or slices (``placement``: replicas
  outermost). Megatron-Core (``param_and_grad_buffer.py``, ``num_distributed_optimizer_instances > 1``):
  each bucket's reduce-scatter in the instance, then the all-reduce of its shard over
  ``inter_distributed_optimizer_instance_group``, once per step; FSDP2 HSDP (``foreach_reduce``): the
  reduce-scatter's output all-reduced over the replicate mesh dim with every reduce-scatter (per micro-batch
  where FSDP2 syncs each one; ``set_requires_all_reduce``); DeepSpeed MiCS (``allreduce_mics_shard_grads``)
  at the accumulation boundary. The all-reduce follows its reduce-scatter bucket by bucket, so it is priced
  inside ``grad_sync_s`` and overlaps as the reduction does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.collectives import (all_gather_s, all_reduce_s, all_to_all_s, broadcast_s, expert_dispatch_s, p2p_s,
                                   reduce_scatter_s, spans_domains)
from asap.cost.layer_ops import kv_heads_per_device
from asap.cost.ring_attention import ring_ranks
from asap.cost.roofline import act_bytes, elementwise_time_s
from asap.spec.hardware import Cluster
from asap.spec.framework import BEST_DISPATCHER, DISPATCHERS
from asap.spec.job import Job
from asap.spec.placement import Placement
from asap.spec.strategy import Zero
from asap.spec.knobs import module_recomputed, CpComm, Recompute, RecomputeModule
from asap.spec.remat import is_maxtext


@dataclass
class LayerComm:
    """Seconds per layer per micro-batch (forward + backward, + recompute where it repeats)."""

    tp_dense_s: np.ndarray
    tp_moe_s: np.ndarray
    ep_s: np.ndarray
    cp_fwd_s: np.ndarray  # one forward ring pass; backward is 2x (0 where cp_comm is not p2p)
    cp_send_s: np.ndarray  # ring: one K,V chunk's p2p send (0 where cp_comm is not p2p)
    cp_gather_s: np.ndarray  # ring: K,V all-gathered over the cp group (torch's rotater; 0 where not p2p)
    cp_ring_ranks: np.ndarray  # the ranks the ring passes K,V around (``ring_ranks``; 1: no ring)
    cp_serial_fwd_s: np.ndarray  # a2a / allgather: the exchange of one forward pass, before the kernel (exposed)
    cp_serial_bwd_s: np.ndarray  # ... and of the backward
    pp_msg_s: np.ndarray  # one p2p message between stages
    tp_pair_s: np.ndarray  # one TP exchange of a micro-batch's T h ab (the embedding's and the head's)
    dispatcher: np.ndarray  # the dispatcher priced (index into DISPATCHERS; the fastest for BEST_DISPATCHER rows)


def layer_comm(job: Job, S: StrategyBatch) -> LayerComm:
    model, cluster, train = job.model, job.cluster, job.train
    ab = act_bytes(train.precision)
    h = model.hidden_size
    T = S.mbs * train.seq_len / S.cp
    T_sp = T / np.where(S.sp > 0, S.tp, 1)
    # forward, backward, and the recomputed forward; a MaxText remat policy re-runs the norms (no name saves
    # their outputs, so their gathers repeat) and the dispatch (``asap.cost.remat``)
    passes = np.where((S.recompute == Recompute.FULL) | is_maxtext(S.recompute), 3, 2)
    place = Placement.of(S)
    tp = place.group("tp")
    # a block's TP exchange: one all-reduce, or under SP an all-gather and a reduce-scatter of the same bytes
    # (two calls, two latencies)
    tp_pair = np.where(S.sp > 0, all_gather_s(cluster, T * h * ab, *tp) + reduce_scatter_s(cluster, T * h * ab, *tp),
                       all_reduce_s(cluster, T * h * ab, *tp))
    tp_dense = 2 * passes * tp_pair
    if model.moe is not None:
        mo = model.moe
        shared_pairs = 1 if mo.shared_experts else 0
        tp_moe = (1 + shared_pairs) * passes * tp_pair
        a2a, dispatcher = moe_dispatch_s(job, S)
        etp_gather = all_reduce_s(cluster, T_sp * mo.top_k * S.etp * h * ab, *place.group("etp"))
        # recomputing the MoE block (``moe`` module) re-runs its dispatch and combine as full recompute does
        ep_passes = np.where(module_recomputed(S.recompute, RecomputeModule.MOE), 3, passes)
        ep = ep_passes * (2 * a2a + etp_gather)
    else:
        tp_moe = np.zeros_like(tp_dense)
        ep = np.zeros_like(tp_dense)
        dispatcher = np.asarray(S.dispatcher)
    cp_fwd, cp_serial_fwd, cp_serial_bwd = cp_exchange_s(job, S, T, place)
    cp_send, cp_gather = ring_links_s(job, S, T, place)
    pp_spans = spans_domains(cluster, *place.group("pp"))
    pp_msg = np.where(S.pp > 1, p2p_s(cluster, T_sp * h * ab, pp_spans), 0.0)
    return LayerComm(tp_dense_s=tp_dense, tp_moe_s=tp_moe, ep_s=ep, cp_fwd_s=cp_fwd, cp_send_s=cp_send,
                     cp_gather_s=cp_gather, cp_ring_ranks=ring_ranks(S), cp_serial_fwd_s=cp_serial_fwd,
                     cp_serial_bwd_s=cp_serial_bwd, pp_msg_s=pp_msg,
                     tp_pair_s=np.broadcast_to(tp_pair, np.shape(tp_dense)), dispatcher=dispatcher)


def attention_widths(model) -> tuple[int, int, int]:
    """(query, key+value, output) widths of one token's attention inputs and output, all heads."""
    if model.mla is not None:
        m = model.mla
        q = model.num_attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        return q, q + model.num_attention_heads * m.v_head_dim, model.num_attention_heads * m.v_head_dim
    heads = model.num_attention_heads * model.head_dim
    return heads, 2 * model.num_kv_heads * model.head_dim, heads


def kv_width_per_device(model, tp):
    """Key + value width of one token on one tensor-parallel rank: 2 kv_heads_per_device head_dim (KV heads
    replicated where tp exceeds them: Megatron-Core, so the ring and the gathers carry a whole head per rank);
    MLA's up-projected K,V split by tp."""
    if model.mla is not None:
        return attention_widths(model)[1] / np.asarray(tp, dtype=float)
    return 2.0 * kv_heads_per_device(model, tp) * model.head_dim


def ring_links_s(job: Job, S: StrategyBatch, T, place: Placement):
    """(one K,V chunk's p2p send, the all-gather of the ring's chunks) per layer and micro-batch where a ring runs
    (``ring_ranks`` > 1; 0 elsewhere): what ``asap.cost.ring_attention`` sets against each step's kernel. The send
    crosses the slowest tier the ring's group spans (every rank sends at once, the ring steps in lockstep). Under
    a2a+p2p the ring runs over the outer group (stride cp_a2a x the cp stride), each rank holding cp_a2a T tokens
    of heads / cp_a2a after the inner all-to-all: the same T kv_width ab bytes a chunk."""
    cluster, ab = job.cluster, act_bytes(job.train.precision)
    kv_chunk = T * kv_width_per_device(job.model, S.tp) * ab
    (_, stride), a2a = place.group("cp"), np.where(S.cp_comm == CpComm.A2A_P2P.code, S.cp_a2a, 1)
    ranks = ring_ranks(S)
    group = (ranks, stride * a2a)
    send = np.where(ranks > 1, p2p_s(cluster, kv_chunk, spans_domains(cluster, *group)), 0.0)
    gather = np.where(ranks > 1, all_gather_s(cluster, ranks * kv_chunk, *group), 0.0)
    return send, gather


def cp_exchange_s(job: Job, S: StrategyBatch, T, place: Placement):
    """(one forward ring pass, one forward serial exchange, one backward serial exchange) per layer and
    micro-batch, by ``S.cp_comm`` (``CpComm``), with T = b s / cp tokens per rank and widths over tp:
    - p2p (ring attention): cp-1 steps each passing the local K,V chunk T w_kv ab; overlapped step by step
      (``asap.cost.ring_attention``, from ``ring_links_s``).
    - a2a (DeepSpeed-Ulysses, Jacobs et al. 2023; TE ``AttnFuncWithCPAndQKVOA2A``): forward all-to-alls of Q,
      K and V (sequence to head sharding) and of O back, each moving (cp-1)/cp of its T w ab bytes
      (``all_to_all_s``); backward the same four (dO in; dQ, dK, dV out). They precede / follow the kernel:
      exposed.
    - allgather (TE ``AttnFuncWithCPAndKVAllGather``, Megatron-Core cp_comm_type=allgather; MaxText's context
      parallelism): forward all-gathers the cp T w_kv ab of K,V; backward gathers them again and
      reduce-scatters dK,dV (the same bytes). Exposed: the gather precedes the kernel."""
    model, cluster, ab = job.model, job.cluster, act_bytes(job.train.precision)
    q_w, kv_w, o_w = attention_widths(model)
    kv_chunk = T * kv_width_per_device(model, S.tp) * ab
    cp_group = place.group("cp")
    ring = np.where((S.cp > 1) & (S.cp_comm == CpComm.P2P.code),
                    (S.cp - 1) * p2p_s(cluster, kv_chunk, spans_domains(cluster, *cp_group)), 0.0)
    a2a = ulysses_s(cluster, T, (q_w / S.tp * ab, kv_chunk / T, o_w / S.tp * ab), cp_group)
    # a2a+p2p: the same four all-to-alls inside the inner group (cp_a2a ranks at the cp stride)
    inner = ulysses_s(cluster, T, (q_w / S.tp * ab, kv_chunk / T, o_w / S.tp * ab), (S.cp_a2a, cp_group[1]))
    gathered = S.cp * kv_chunk
    ag_fwd = all_gather_s(cluster, gathered, *cp_group)
    ag_bwd = ag_fwd + reduce_scatter_s(cluster, gathered, *cp_group)
    on = S.cp > 1
    kinds = [on & (S.cp_comm == CpComm.A2A.code), on & (S.cp_comm == CpComm.ALLGATHER.code),
             on & (S.cp_comm == CpComm.A2A_P2P.code)]
    fwd = np.select(kinds, [a2a, ag_fwd, inner], 0.0)
    bwd = np.select(kinds, [a2a, ag_bwd, inner], 0.0)
    return ring, fwd, bwd


def ulysses_s(cluster: Cluster, T, token_bytes, group):
    """One pass's four Ulysses all-to-alls over ``group`` (size, stride): Q, K, V in and O out (backward: dO in;
    dQ, dK, dV out, the same bytes), ``token_bytes`` = (q, k+v, o) bytes per token on the rank."""
    q, kv, o = token_bytes
    return (all_to_all_s(cluster, T * q, *group) + 2 * all_to_all_s(cluster, T * kv / 2, *group)
            + all_to_all_s(cluster, T * o, *group))


def moe_dispatch_table_s(job: Job, S) -> np.ndarray:
    """[len(DISPATCHERS), N] one dispatch (or combine) of each row under every dispatcher: each device's T_sp
    tokens of h ab bytes, the busiest expert rank receiving moe_imbalance times the mean of routed tokens (a stack
    whose forced balance routes round-robin, ``Framework.round_robin_balance``, does so when the run is
    force-balanced: moe_imbalance 1, ``expert_dispatch_s``); the flat all-to-all also pays its receive-side
    reordering (``chunk_sort_s``) where a rank holds several experts. ``S``: a batch, or the planner's columns
    (anything with the degrees, mbs and sp)."""
    model, train, cluster = job.model, job.train, job.cluster
    mo = model.moe
    assert mo is not None
    tokens = S.mbs * train.seq_len / S.cp / np.where(S.sp > 0, S.tp, 1) * train.moe_imbalance
    token_bytes = model.hidden_size * act_bytes(train.precision)
    round_robin = mo.num_experts if job.framework.round_robin_balance and train.moe_imbalance == 1.0 else 0.0
    by_name = expert_dispatch_s(cluster, tokens, mo.top_k, token_bytes, *Placement.of(S).group("ep"),
                                round_robin_experts=round_robin)
    by_name["alltoall"] = by_name["alltoall"] + chunk_sort_s(cluster, tokens * mo.top_k * token_bytes, S.ep,
                                                             mo.num_experts / S.ep)
    return np.stack([np.broadcast_to(by_name[name], np.shape(S.ep)) for name in DISPATCHERS])


def moe_dispatch_s(job: Job, S: StrategyBatch):
    """(one dispatch per row under its dispatcher, the dispatcher priced) of ``moe_dispatch_table_s``: rows
    marked BEST_DISPATCHER (a dispatcher left free) take the fastest."""
    table = moe_dispatch_table_s(job, S)
    chosen = np.where(S.dispatcher == BEST_DISPATCHER, np.argmin(table, axis=0), S.dispatcher)
    return np.take_along_axis(table, chosen[None, :], axis=0)[0], chosen


def chunk_sort_s(cluster: Cluster, received_bytes, ep, local_experts):
    """The flat all-to-all's second permutation, per dispatch (and its inverse per combine): the tokens arrive
    source-rank-major ([ep ranks] x [local experts] chunks) and the grouped GEMM needs them expert-major, so a
    rank holding more than one expert copies every received token once more (Megatron-Core
    MoEAlltoAllTokenDispatcher: ``sort_chunks_by_idxs`` by ``sort_input_by_local_experts`` after the
    all-to-all, by ``restore_output_by_local_experts`` before the combine's; torchtitan's expert parallelism
    reorders its received tokens by expert the same way). A memory-bound copy: read and write the
    ``received_bytes``. The deduplicated and all-gather dispatchers permute their received tokens once, in the
    layer's dispatch operation (``asap.cost.layer_ops.moe_mlp_ops``), and pay nothing here."""
    copy = elementwise_time_s(cluster.accelerator, 2.0 * received_bytes)
    return np.where((np.asarray(ep) > 1) & (np.asarray(local_experts) > 1), copy, 0.0)


@dataclass
class DataParallelComm:
    grad_sync_s: np.ndarray  # per step (zero 0-2) or per micro-batch (zero 3): gradient all-reduce / reduce-scatter
    param_gather_s: np.ndarray  # per step (zero 1-2) or per micro-batch (zero 3, forward + backward)


def data_parallel_comm(cluster: Cluster, S: StrategyBatch, dense_params, expert_params,
                       layers_on_stage=1.0, collectives_per_layer: int = 1, grad_bytes=4.0,
                       zero1_gathers=1.0, weight_bytes=2.0, gather_nics_per_domain=None,
                       buckets=1.0) -> DataParallelComm:
    """Gradient and weight traffic of the data-parallel groups (dense over dp*cp, experts over edp).

    ZeRO-0/1/2 reduce gradients in the stack's buckets, ``buckets`` collectives per step of 1/buckets of the
    stage each (``asap.cost.dp_overlap.dp_buckets``; Megatron-Core's ``_ParamAndGradBucketGroup`` issues one
    reduce-scatter, or all-reduce, per bucket group as its last gradient is ready, and one all-gather per
    bucket with ``overlap_param_gather``: ``param_and_grad_buffer.py`` ``start_grad_sync`` /
    ``start_param_sync``; PyTorch DDP one all-reduce per bucket, ``reducer.cpp``), each paying its own launch
    and ring latency (a 256-rank reduce-scatter is 255 ring steps of a few microseconds: NCCL's own tuning
    model, ``src/graph/tuning.cc``, prices each step of a Simple-protocol ring at 3.4 us over NVLink and 14 us
    over the network); ZeRO-3 gathers weights module by
    module, ``collectives_per_layer`` per layer (one per FSDP unit; one per parameterised submodule in
    DeepSpeed), n = layers * collectives_per_layer gathers of 1/n of the stage each, and reduce-scatters
    gradients a layer at a time (FSDP units; DeepSpeed's reduce buckets), every collective paying its ring
    latency (at thousands of ranks the (g-1) hops become a real cost) and reaching only the bandwidth its chunk
    size allows (``collectives.message_efficiency``). Gradients travel at ``grad_bytes`` per element (the
    stack's ``Framework.grad_bytes``), weights at ``weight_bytes`` (16 bits; 32 in fp32 runs). ``zero1_gathers``: the weight gathers after a ZeRO-1
    step (1: bucketed; torch's ZeroRedundancyOptimizer broadcasts each parameter tensor on its own).
    ``gather_nics_per_domain``: the NICs per scale-up domain each weight gather reaches
    (``collectives.all_gather_s``; None: all its members')."""
    place = Placement.of(S)
    # the ZeRO shard groups: dp x cp and edp, or one replica's share of them under hybrid sharding
    dense_group, expert_group = place.group("dp_shard"), place.group("edp_shard")
    zero3 = S.zero >= Zero.PARAMETERS
    layers = np.maximum(layers_on_stage, 1.0)
    n_buckets = np.maximum(np.asarray(buckets, dtype=float), 1.0)
    n_gather = np.where(zero3, layers * collectives_per_layer,
                        np.where((S.zero == Zero.OPTIMIZER) & (np.asarray(zero1_gathers) > 1.0), zero1_gathers,
                                 n_buckets))
    n_reduce = np.where(zero3, layers, n_buckets)  # gradients leave in buckets of at least a layer
    has_experts = np.asarray(expert_params) > 0  # a dense model issues no expert collectives

    def both(fn, bytes_per_param, n, **link):
        dense = n * fn(cluster, bytes_per_param * dense_params / n, *dense_group, **link)
        return dense + has_experts * n * fn(cluster, bytes_per_param * expert_params / n, *expert_group, **link)

    grad = np.where(S.zero == Zero.NONE, both(all_reduce_s, grad_bytes, n_reduce),
                    both(reduce_scatter_s, grad_bytes, n_reduce))
    grad = grad + replica_all_reduce_s(cluster, place, dense_params, expert_params, grad_bytes, n_reduce)
    gather = both(all_gather_s, weight_bytes, n_gather, nics_per_domain=gather_nics_per_domain)
    if np.any(np.asarray(zero1_gathers) > 1.0):
        # ZeRO-1 by torch's ZeroRedundancyOptimizer: each tensor broadcast from the rank that stepped it
        gather = np.where(S.zero == Zero.OPTIMIZER, both(broadcast_s, weight_bytes, n_gather), gather)
    # ZeRO-3 gathers for forward and again for backward; ZeRO-0 keeps the weights and gathers nothing
    gather = np.where(S.zero == Zero.NONE, 0.0, np.where(zero3, 2 * gather, gather))
    return DataParallelComm(grad_sync_s=grad, param_gather_s=gather)


def replica_all_reduce_s(cluster: Cluster, place: Placement, dense_params, expert_params, grad_bytes,
                         n_reduce=1.0):
    """Hybrid sharding's all-reduce of the sharded gradients across the replicas (module docstring): per
    reduction, n collectives of ``grad_bytes * params / (n * shard group)`` over the replicate group (r ranks,
    stride of one replica: it crosses nodes or slices, priced on the tier it spans); 0 where dp_replicate is 1.
    E.g. 2 nodes x 8 GPUs, dp=16, dp_replicate=2, an 8B model, fp32 gradients: a 4 GB shard per GPU, an
    all-reduce over 2 ranks on the scale-out NICs."""
    n = np.maximum(np.asarray(n_reduce, dtype=float), 1.0)
    (d_shard, _), (e_shard, _) = place.group("dp_shard"), place.group("edp_shard")
    d_rep, e_rep = place.group("dp_replicate"), place.group("edp_replicate")
    dense = n * all_reduce_s(cluster, grad_bytes * dense_params / (n * np.maximum(d_shard, 1)), *d_rep)
    experts = n * all_reduce_s(cluster, grad_bytes * expert_params / (n * np.maximum(e_shard, 1)), *e_rep)
    return dense + (np.asarray(expert_params) > 0) * experts
