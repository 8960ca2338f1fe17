"""Peak device memory: model states, activations of the in-flight micro-batches, and an allowance.

Model states per parameter under mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, sec. 3.1, K = 12):
half-precision weights 2 B, fp32 gradients 4 B (Megatron accumulates fp32 main grads for bf16 runs; FSDP2 in
torchtitan reduces in fp32), fp32 master weights + Adam m and v 12 B. ZeRO-1 shards the 12 B over the data-
parallel group d, ZeRO-2 also the gradients, ZeRO-3 everything:
    zero0: 2 + 4 + 12        zero1: 2 + 4 + 12/d        zero2: 2 + (4 + 12)/d        zero3: (2 + 4 + 12)/d
d is dp*cp for dense parameters (context-parallel ranks hold the same weights) and the expert-data-parallel
size edp for expert parameters (Megatron-Core parallel folding). fp8 runs keep a 1 B fp8 copy of each weight.

Activations per layer per micro-batch (Korthikanti et al. 2022, "Reducing Activation Recomputation", sec. 4,
eq. 1-2: 34 s b h + 5 a s^2 b bytes for GPT with 2-byte activations), generalised term by term:
    replicated unless sequence-parallel: 2 layer-norm inputs, QKV input, MLP input (ab h each) -> 4 ab h
                     (Korthikanti's two 1-byte dropout masks are gone: modern LLM pretraining runs without
                     dropout, as the Llama, Qwen, DeepSeek and Mixtral configs set it to 0)
    tensor-parallel: Q, K, V and the attention output -> ab (qkv_width + out_width) / tp
                     MLP: first linear output(s) and the second linear's input -> ab (1|2) ffn + ab ffn / tp
    fp8 (Transformer Engine): the inputs of fp8 GEMMs (QKV, MLP, out-projection and fc2 inputs) are 1 B.
    attention scores: 0, because flash attention stores only the output and the log-sum-exp
For GPT (gelu, ffn = 4h, MHA) this is (8 + 24/tp) s b h: Korthikanti's eq. 2 without the attention-score
term (5as/h) and without dropout masks (2).
Selective recompute (Megatron-Core --recompute-modules core_attn/layernorm/moe_act; torchtitan op-level SAC)
keeps the GEMM outputs (Q, K, V, the attention output, fc1 outputs) and the layer and mid-layer inputs, and
recomputes norms, activation functions and the attention kernel: 20 s b h / tp for GPT instead of 32.
Full recompute keeps only each layer's input (2 s b h / tp with SP) plus one layer's activations while it
is recomputed; MoE layers store the routed token copies, their expert activations, and the router logits.

In-flight micro-batches (Narayanan 2021 sec. 2.2; Korthikanti sec. 4.2.3): stage d of 1F1B keeps min(m, pp - d)
micro-batches of its layers; interleaved 1F1B keeps ((pp-d-1) 2 + (v-1) pp + 1) / v, which on the first stage is
pp (1 + (pp-1)/(pp v)); GPipe all m. The first, the fullest middle and the last stage (with its MTP modules and
the fp32 logits of one micro-batch) are priced, each with its own layers under the even split, and the fullest
one is the peak.

Allowance: 5% of the total for allocator fragmentation plus a fixed 1 GB for the CUDA/driver context,
NCCL buffers and GEMM workspaces (0.25 GB on CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.cost.batch import StrategyBatch, by_unique
from asap.cost.roofline import act_bytes
from asap.spec.hardware import Accelerator
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

GB = float(2**30)  # memory is reported in GiB, as nvidia-smi and torch.cuda do; "80 GB" HBM is 80 GiB
FRAGMENTATION = 0.05
FIXED_ALLOWANCE_GB = {"cpu": 0.25}
DEFAULT_FIXED_ALLOWANCE_GB = 1.0


@dataclass
class MemoryBreakdown:
    weights_gb: np.ndarray  # half-precision weights (and fp8 copies)
    grads_gb: np.ndarray
    optimizer_gb: np.ndarray  # master weights + Adam moments
    activations_gb: np.ndarray
    allowance_gb: np.ndarray
    peak_gb: np.ndarray

    @classmethod
    def concatenate(cls, parts: list["MemoryBreakdown"]) -> "MemoryBreakdown":
        """Join breakdowns of consecutive chunks of one batch."""
        out = {}
        for name in cls.__dataclass_fields__:
            cols = [np.broadcast_to(getattr(p, name), np.shape(p.peak_gb)) for p in parts]
            out[name] = np.concatenate(cols)
        return cls(**out)


def stage_layers(model: ModelSpec, S: StrategyBatch):
    """Transformer layers on the (first, fullest middle, last) pipeline stage under the even split
    (``search.stages.uniform_split``, Megatron's layout): L // pp each, the remainder spread from the middle
    outwards, so the end stages (which also carry the embedding, the head and the MTP modules) get an extra
    layer only when the remainder is pp - 1 (the last one when pp is even, the first when odd)."""
    L = model.num_layers
    pp = np.asarray(S.pp, dtype=np.int64)
    # worked out once per pipeline depth (a handful), then looked up for every strategy
    p = np.arange(1, max(int(pp.max(initial=1)), 1) + 1)
    base, r = L // p, L % p
    reaches_end = (r == p - 1) & (p > 1)
    table = np.stack([base + (reaches_end & (p % 2 == 1)), base + (r > 0), base + (reaches_end & (p % 2 == 0))])
    table[:, 0] = L  # pp = 1: one stage holds everything
    first, middle, last = table.astype(float)[:, pp - 1]
    return first, middle, last


def state_bytes_per_param(precision: str, zero, shard):
    """Bytes per parameter for weights, gradients and optimizer states under ZeRO stage ``zero``."""
    w = 4.0 if precision == "fp32" else 2.0
    g = 4.0
    o = 8.0 if precision == "fp32" else 12.0
    if precision == "fp8":
        w = w + 1.0
    shard = np.maximum(shard, 1)
    w_b = np.where(zero >= 3, w / shard, w)
    g_b = np.where(zero >= 2, g / shard, g)
    o_b = np.where(zero >= 1, o / shard, o)
    return w_b, g_b, o_b


STAGE_KEYS = ("tp", "pp", "ep", "etp")  # what stage_params depends on (for by_unique)


def stage_params(model: ModelSpec, S: StrategyBatch):
    """(dense params, expert params) per device on the first, the fullest middle and the last pipeline stage,
    as six arrays: first_dense, first_expert, middle_dense, middle_expert, last_dense, last_expert.

    Dense parameters (attention, dense MLPs, shared experts, router, norms, embeddings) are split by tp;
    routed experts by ep * etp. The first stage carries the embedding and the leading dense layers, a middle
    stage only layers of the kind that fills the model's middle (MoE layers for an MoE model), the last the LM
    head (unless tied and pp = 1) and the MTP modules. Layers per stage follow ``stage_layers``.
    """
    tp = S.tp.astype(float)
    n_first, n_middle, n_last = stage_layers(model, S)
    dense_layer = model.dense_layer_params()
    emb = model.embedding_params()
    head = model.head_params() if not model.tie_embeddings else 0
    head = np.where((S.pp > 1) & (model.tie_embeddings), model.embedding_params(), head)
    if model.moe is None:
        zeros = np.zeros_like(n_first)
        last_dense = n_last * dense_layer + head + model.mtp_layers * model.mtp_module_params()
        return ((n_first * dense_layer + emb) / tp, zeros, n_middle * dense_layer / tp, zeros, last_dense / tp,
                zeros)
    mo = model.moe
    moe_dense, moe_expert = moe_layer_params(model)
    n_dense_first = np.minimum(n_first, mo.first_dense_layers)
    n_moe_first = n_first - n_dense_first
    first_dense = n_dense_first * dense_layer + n_moe_first * moe_dense + emb
    mtp_dense = model.mtp_layers * (moe_dense + 2 * model.hidden_size ** 2 + 2 * model.hidden_size)
    last_dense = n_last * moe_dense + head + mtp_dense
    ee = (S.ep * S.etp).astype(float)
    return (first_dense / tp, n_moe_first * moe_expert / ee, n_middle * moe_dense / tp, n_middle * moe_expert / ee,
            last_dense / tp, (n_last + model.mtp_layers) * moe_expert / ee)


def moe_layer_params(model: ModelSpec) -> tuple[float, float]:
    """(dense, routed-expert) parameters of one MoE layer: attention, norms, router and shared experts are
    dense (split by tp); the routed experts are split by ep * etp."""
    mo = model.moe
    dense = (model.attention_params() + 2 * model.hidden_size + model.hidden_size * mo.num_experts
             + mo.shared_experts * model.expert_params())
    return dense, mo.num_experts * model.expert_params()


def activation_bytes_per_layer(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool, selective=False):
    """Stored activation bytes of one layer for one micro-batch on one device, without recompute, or under
    selective recompute (only GEMM outputs and the layer inputs are kept)."""
    ab = act_bytes(train.precision)
    h = model.hidden_size
    tp = S.tp.astype(float)
    T = S.mbs * train.seq_len / S.cp
    sp_div = np.where(S.sp > 0, tp, 1.0)
    nh = model.num_attention_heads
    if model.mla is not None:
        m = model.mla
        qkv_width = nh * (2 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + m.v_head_dim)
        out_width = nh * m.v_head_dim
        replicated_extra = ab * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        qkv_width = (nh + 2 * model.num_kv_heads) * model.head_dim
        out_width = nh * model.head_dim
        replicated_extra = 0.0
    mult = 2.0 if model.gated else 1.0
    gemm_in = 1.0 if train.precision == "fp8" else ab  # fp8 GEMMs save their inputs in fp8 (Transformer Engine)
    if selective:  # layer input + mid-layer residual; Q, K, V; attention output; fc1 output(s)
        per_token = (2 * ab * h / sp_div + (ab * qkv_width + gemm_in * out_width) / tp + replicated_extra)
        ffn_bytes = ab * mult
    else:  # 2 norm inputs, QKV and MLP inputs; Q, K, V, attention output; fc1 out, fc2 in
        per_token = ((2 * ab + 2 * gemm_in) * h / sp_div
                     + (ab * qkv_width + gemm_in * out_width) / tp + replicated_extra)
        ffn_bytes = ab * mult + gemm_in
    if not moe:
        return T * (per_token + ffn_bytes * model.ffn_hidden_size / tp)
    mo = model.moe
    etp = S.etp.astype(float)
    rows = T * mo.top_k * etp / tp  # routed copies this device stores
    routed = rows * ((ab + gemm_in) * h + ffn_bytes * mo.expert_ffn_hidden_size / etp)
    shared = T * ffn_bytes * mo.shared_experts * mo.expert_ffn_hidden_size / tp
    router = 4.0 * T / sp_div * mo.num_experts
    return T * per_token + routed + shared + router


def in_flight_micro_batches(train: TrainSpec, S: StrategyBatch, device=0):
    """Micro-batches' worth of its own activations pipeline stage ``device`` holds at its peak: 1F1B keeps
    pp - d micro-batches; interleaved 1F1B runs (pp - d - 1) 2 + (v - 1) pp warm-up chunks plus one
    (Megatron-Core's schedule), 1/v of a stage each, which for d = 0 is pp (1 + (pp-1)/(pp v)); GPipe all m."""
    m = train.global_batch // (S.dp * S.mbs)
    pp = S.pp.astype(float)
    vpp = S.vpp.astype(float)
    one_f_one_b = np.minimum(m, np.maximum(pp - device, 1))
    chunks = np.maximum((pp - device - 1) * 2 + (vpp - 1) * pp + 1, 1)
    interleaved = np.minimum(chunks / vpp, m)
    # schedule codes: 1f1b 0, interleaved 1, zb 2, gpipe 3
    out = np.select([S.schedule == 1, S.schedule == 3], [interleaved, m], one_f_one_b)
    return np.where(S.pp > 1, out, 1.0)


def memory(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch) -> MemoryBreakdown:
    first_dense, first_expert, middle_dense, middle_expert, last_dense, last_expert = by_unique(
        S, STAGE_KEYS, lambda s: stage_params(model, s))
    dense_shard = S.dp * S.cp
    edp = np.maximum(S.tp * S.cp * S.dp // np.maximum(S.ep * S.etp, 1), 1)
    wd, gd, od = state_bytes_per_param(train.precision, S.zero, dense_shard)
    we, ge, oe = state_bytes_per_param(train.precision, S.zero, edp)

    def states(dense, expert):
        return dense * wd + expert * we, dense * gd + expert * ge, dense * od + expert * oe

    w1, g1, o1 = states(first_dense, first_expert)
    w2, g2, o2 = states(last_dense, last_expert)
    # the second stage: no embedding and no leading dense layers, one micro-batch fewer in flight than the
    # first; with MoE models whose first layers are dense it is the fullest device (DeepSeek-V3, pp = 8)
    w3, g3, o3 = states(middle_dense, middle_expert)

    # ZeRO-3 gathers a layer's full weights for compute (and prefetches the next): two layers in flight
    n_first, n_middle, n_last = stage_layers(model, S)
    layer_w_bytes = 2.0 * (last_dense + last_expert) / np.maximum(n_last + model.mtp_layers, 1)
    gathered = np.where(S.zero >= 3, 2 * layer_w_bytes, 0.0)

    is_moe = model.moe is not None
    a_layer = activation_bytes_per_layer(model, train, S, moe=is_moe)
    a_selective = activation_bytes_per_layer(model, train, S, moe=is_moe, selective=True)
    ab = act_bytes(train.precision)
    T = S.mbs * train.seq_len / S.cp
    layer_input = ab * model.hidden_size * T / np.where(S.sp > 0, S.tp, 1)
    stored = np.select([S.recompute == 2, S.recompute == 1], [layer_input, a_selective], a_layer)
    working = np.where(S.recompute == 2, a_layer, 0.0)  # one layer re-materialised during backward
    acts_first = n_first * in_flight_micro_batches(train, S) * stored + working
    logits = T * model.vocab_size / S.tp * (ab + 4.0)
    acts_last = (n_last + model.mtp_layers) * in_flight_micro_batches(train, S, S.pp - 1) * stored + working
    acts_last = np.where(S.pp > 1, acts_last, acts_first) + logits * (1 + model.mtp_layers)
    acts_second = n_middle * in_flight_micro_batches(train, S, 1) * stored + working

    total_first = w1 + g1 + o1 + gathered + acts_first
    total_last = w2 + g2 + o2 + gathered + acts_last
    total_second = np.where(S.pp > 2, w3 + g3 + o3 + gathered + acts_second, 0.0)
    which = np.argmax(np.stack(np.broadcast_arrays(total_first, total_last, total_second)), axis=0)
    fixed = FIXED_ALLOWANCE_GB.get(acc.family, DEFAULT_FIXED_ALLOWANCE_GB) * GB
    pick = lambda a, b, c: np.choose(which, np.broadcast_arrays(a, b, c))  # noqa: E731
    body = pick(total_first, total_last, total_second)
    allowance = FRAGMENTATION * body + fixed
    return MemoryBreakdown(
        weights_gb=pick(w1, w2, w3) / GB + gathered / GB, grads_gb=pick(g1, g2, g3) / GB,
        optimizer_gb=pick(o1, o2, o3) / GB, activations_gb=pick(acts_first, acts_last, acts_second) / GB,
        allowance_gb=allowance / GB, peak_gb=(body + allowance) / GB)
