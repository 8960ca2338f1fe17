"""FLOPs, bytes and roofline time of every operator of a transformer layer, per device and micro-batch.

Shapes per device: a micro-batch of b sequences of s tokens; context parallelism gives each device s/cp of
them (T = b s / cp tokens); tensor parallelism splits heads and FFN columns by tp; sequence parallelism
(Korthikanti et al. 2022, sec. 4.2.2) splits the tokens of norms, residuals and dropout by tp as well
(T_sp = T / tp). GEMM shapes follow Megatron-Core's column/row-parallel linears.

Backward costs: every GEMM has a data-gradient and a weight-gradient GEMM of the same size (2x forward);
flash attention's backward runs five matmuls against the forward's two (2.5x; Dao 2023, FlashAttention-2,
sec. 3.1); memory-bound kernels read and write about twice as much in backward (2x).

Attention FLOPs (causal): QK^T and PV each cost 2 * b * s_q * s_k * heads * d per full square; causal
masking halves the work (flash kernels skip masked tiles), so forward = 2 * b * s^2 * heads * (d_qk + d_v) / 2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.roofline import act_bytes, attention_time_s, elementwise_time_s, gemm_time_s
from asap.spec.hardware import Accelerator
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

BWD_GEMM = 2.0
BWD_ATTENTION = 2.5
BWD_ELEMENTWISE = 2.0


@dataclass
class LayerCompute:
    """Forward times (s) per device per micro-batch, and the parts the rest of the model needs."""

    attn_fwd_s: np.ndarray  # projections + core + norms/residuals of the attention block
    attn_core_fwd_s: np.ndarray  # the flash-attention kernel alone (what selective recompute redoes)
    dense_mlp_fwd_s: np.ndarray  # a dense MLP block
    moe_mlp_fwd_s: np.ndarray  # router, permutation, routed and shared experts
    memory_bound_fwd_s: np.ndarray  # the memory-bound part of a (representative) layer, for the bottleneck
    head_fwd_s: np.ndarray  # final norm, LM head GEMM and the cross-entropy loss
    expert_fwd_s: np.ndarray  # the routed experts' GEMMs and activation alone (what dispatch can overlap)
    embed_fwd_s: np.ndarray

    def attn_bwd_s(self):
        core = self.attn_core_fwd_s
        return (self.attn_fwd_s - core) * BWD_GEMM + core * BWD_ATTENTION


def _attention_dims(model: ModelSpec) -> tuple[float, float, float, float]:
    """(qkv projection width, attention-output width, d_qk, d_v) for full heads."""
    nh = model.num_attention_heads
    if model.mla is not None:
        m = model.mla
        d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        return nh * d_qk, nh * m.v_head_dim, d_qk, m.v_head_dim
    hd = model.head_dim
    return (nh + 2 * model.num_kv_heads) * hd, nh * hd, hd, hd


def attention_flops_fwd(model: ModelSpec, b, s, cp, tp):
    """Causal attention core FLOPs per device: each device owns s/cp queries against, on average, s/2 keys."""
    _, _, d_qk, d_v = _attention_dims(model)
    return 2.0 * b * (s / cp) * s * (model.num_attention_heads / tp) * (d_qk + d_v) / 2.0


def layer_compute(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch) -> LayerCompute:
    p = train.precision
    ab = act_bytes(p)
    h = float(model.hidden_size)
    b = S.mbs.astype(float)
    s = float(train.seq_len)
    tp = S.tp.astype(float)
    cp = S.cp.astype(float)
    T = b * s / cp  # tokens per device in GEMMs
    T_sp = T / np.where(S.sp > 0, tp, 1.0)  # tokens per device in norms/residuals
    qkv_width, out_width, _, _ = _attention_dims(model)

    # ---- attention block -------------------------------------------------------------------------------
    norm_bytes = 2 * ab * T_sp * h  # read x, write y
    resid_bytes = 3 * ab * T_sp * h  # read x, read f(x), write sum (dropout fused)
    if model.mla is not None:
        m = model.mla
        nh = model.num_attention_heads
        d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        proj = 0.0
        if m.q_lora_rank:
            proj = proj + gemm_time_s(acc, p, T, m.q_lora_rank, h)  # q down (replicated over tp)
            proj = proj + gemm_time_s(acc, p, T, nh * d_qk / tp, m.q_lora_rank)  # q up
        else:
            proj = proj + gemm_time_s(acc, p, T, nh * d_qk / tp, h)
        proj = proj + gemm_time_s(acc, p, T, m.kv_lora_rank + m.qk_rope_head_dim, h)  # kv down
        proj = proj + gemm_time_s(acc, p, T, nh * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank)  # kv up
        lora_norm_bytes = 2 * ab * T * ((m.q_lora_rank or 0) + m.kv_lora_rank)
        rope_bytes = 2 * ab * T * (nh / tp + 1) * m.qk_rope_head_dim
        attn_elem_bytes = lora_norm_bytes + rope_bytes
    else:
        proj = gemm_time_s(acc, p, T, qkv_width / tp, h)
        rope_bytes = 2 * ab * T * (model.num_attention_heads + model.num_kv_heads) * model.head_dim / tp
        attn_elem_bytes = rope_bytes
    out_proj = gemm_time_s(acc, p, T, h, out_width / tp)
    core = attention_time_s(acc, p, attention_flops_fwd(model, b, s, cp, tp))
    attn_elem = elementwise_time_s(acc, norm_bytes + resid_bytes + attn_elem_bytes, kernels=4)
    attn_fwd = proj + out_proj + core + attn_elem

    # ---- dense MLP -------------------------------------------------------------------------------------
    up_mult = 2.0 if model.gated else 1.0
    act_elems_mult = 3.0 if model.gated else 2.0  # SwiGLU reads gate and up, writes the product

    def mlp_time(tokens, ffn_per_device):
        up = gemm_time_s(acc, p, tokens, up_mult * ffn_per_device, h)
        down = gemm_time_s(acc, p, tokens, h, ffn_per_device)
        act = elementwise_time_s(acc, act_elems_mult * ab * tokens * ffn_per_device, kernels=1)
        return up + down, act

    dense_gemm, dense_act = mlp_time(T, model.ffn_hidden_size / tp)
    mlp_elem = elementwise_time_s(acc, norm_bytes + resid_bytes, kernels=2)
    dense_mlp_fwd = dense_gemm + dense_act + mlp_elem

    # ---- MoE MLP (Megatron-Core parallel folding: experts over etp x ep x edp of the stage's devices) -----
    if model.moe is not None:
        mo = model.moe
        etp = S.etp.astype(float)
        ep = S.ep.astype(float)
        router = gemm_time_s(acc, "fp32" if p == "fp32" else "bf16", T_sp, mo.num_experts, h)
        topk_bytes = 4 * T_sp * mo.num_experts * 3  # softmax/top-k over fp32 logits
        permute_bytes = 2 * 2 * ab * T_sp * mo.top_k * h  # permute + unpermute, read and write
        rows = T * mo.top_k * etp / tp  # routed token copies this device's etp group computes
        local_experts = mo.num_experts / ep
        rows_per_expert = rows / local_experts
        fe = mo.expert_ffn_hidden_size / etp
        up = gemm_time_s(acc, p, rows_per_expert, up_mult * fe, h, count=local_experts)
        down = gemm_time_s(acc, p, rows_per_expert, h, fe, count=local_experts)
        act = elementwise_time_s(acc, act_elems_mult * ab * rows * fe, kernels=1)
        expert = up + down + act
        moe = router + expert + elementwise_time_s(acc, topk_bytes + permute_bytes, kernels=4)
        if mo.shared_experts:
            sg, sa = mlp_time(T, mo.shared_experts * mo.expert_ffn_hidden_size / tp)
            moe = moe + sg + sa
        moe_mlp_fwd = moe + mlp_elem
        memory_bound = attn_elem + mlp_elem + act + elementwise_time_s(acc, topk_bytes + permute_bytes)
    else:
        moe_mlp_fwd = np.zeros_like(dense_mlp_fwd)
        expert = np.zeros_like(dense_mlp_fwd)
        memory_bound = attn_elem + mlp_elem + dense_act

    # ---- embedding, LM head and loss -------------------------------------------------------------------
    V = float(model.vocab_size)
    head_gemm = gemm_time_s(acc, p, T, V / tp, h)
    # cross entropy over fp32-upcast logits: read bf16 logits, write/read fp32 softmax, ~4 passes of 4 bytes
    loss_bytes = T * V / tp * (ab + 4 * 4)
    head_fwd = head_gemm + elementwise_time_s(acc, loss_bytes + norm_bytes, kernels=4)
    embed_fwd = elementwise_time_s(acc, 2 * ab * T_sp * h, kernels=1)
    return LayerCompute(attn_fwd_s=attn_fwd, attn_core_fwd_s=core, dense_mlp_fwd_s=dense_mlp_fwd,
                        moe_mlp_fwd_s=moe_mlp_fwd, memory_bound_fwd_s=memory_bound,
                        head_fwd_s=head_fwd, embed_fwd_s=embed_fwd, expert_fwd_s=expert)
