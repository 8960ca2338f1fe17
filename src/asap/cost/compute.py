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
from asap.spec.framework import Framework, get_framework
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
    # what re-running each recompute module's forward costs (``RecomputeModule`` label -> seconds), per layer
    # kind: the dense layer's and the MoE layer's (modules a kind lacks cost nothing there)
    dense_module_fwd_s: dict
    moe_module_fwd_s: dict
    dense_gemm_fwd_s: np.ndarray  # every GEMM of a dense layer's forward (torchtitan's op-level SAC redoes half)
    moe_gemm_fwd_s: np.ndarray

    def attn_bwd_s(self):
        core = self.attn_core_fwd_s
        return (self.attn_fwd_s - core) * BWD_GEMM + core * BWD_ATTENTION


def kv_heads_per_device(model: ModelSpec, tp):
    """KV heads each tensor-parallel rank holds: kv / tp, or one replicated head when tp exceeds the KV heads
    (Megatron-Core and vLLM replicate each KV head over tp / kv ranks; PaLM's multi-query attention at tp=12)."""
    return np.maximum(model.num_kv_heads / np.asarray(tp, dtype=float), 1.0)


def qkv_width_per_device(model: ModelSpec, tp):
    """Output width of the fused QKV projection on one tensor-parallel rank (GQA/MQA, KV heads replicated)."""
    tp = np.asarray(tp, dtype=float)
    return (model.num_attention_heads / tp + 2 * kv_heads_per_device(model, tp)) * model.head_dim


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


@dataclass
class _Shapes:
    """Per-device shapes of one micro-batch: T tokens in GEMMs, T_sp in norms and residuals (SP splits them)."""

    p: str
    ab: int
    h: float
    b: np.ndarray
    s: float
    tp: np.ndarray
    cp: np.ndarray
    T: np.ndarray
    T_sp: np.ndarray
    unfused: float  # the framework's elementwise traffic over fused kernels (asap.spec.framework)
    attn_work: np.ndarray | float = 1.0  # attention FLOPs over full-length single-document samples (--lengths)

    @classmethod
    def of(cls, model: ModelSpec, train: TrainSpec, S: StrategyBatch, unfused: float = 1.0) -> "_Shapes":
        b, tp, cp = S.mbs.astype(float), S.tp.astype(float), S.cp.astype(float)
        T = b * train.seq_len / cp
        return cls(train.precision, act_bytes(train.precision), float(model.hidden_size), b, float(train.seq_len),
                   tp, cp, T, T / np.where(S.sp > 0, tp, 1.0), unfused, train.attention_work_factor(S.dp))

    @property
    def norm_bytes(self):
        return 2 * self.ab * self.T_sp * self.h * self.unfused  # read x, write y

    @property
    def resid_bytes(self):
        return 3 * self.ab * self.T_sp * self.h * self.unfused  # read x, read f(x), write sum (dropout fused)


def _projections(model: ModelSpec, acc: Accelerator, x: _Shapes):
    """(QKV / MLA projection GEMMs, their elementwise bytes: lora norms and RoPE, MLA's up-projections with
    their RoPE alone: what ``mla_up_proj`` recompute redoes)."""
    p, T, tp, h, ab = x.p, x.T, x.tp, x.h, x.ab
    if model.mla is None:
        proj = gemm_time_s(acc, p, T, qkv_width_per_device(model, tp), h)
        rope = 2 * ab * T * (model.num_attention_heads / tp + kv_heads_per_device(model, tp)) * model.head_dim
        return proj, rope, np.zeros_like(proj)
    m, nh = model.mla, model.num_attention_heads
    d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        q_down = gemm_time_s(acc, p, T, m.q_lora_rank, h)
        q_up = gemm_time_s(acc, p, T, nh * d_qk / tp, m.q_lora_rank)
    else:
        q_down, q_up = gemm_time_s(acc, p, T, nh * d_qk / tp, h), 0.0
    kv_down = gemm_time_s(acc, p, T, m.kv_lora_rank + m.qk_rope_head_dim, h)  # replicated over tp
    kv_up = gemm_time_s(acc, p, T, nh * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank)
    lora_norm = 2 * ab * T * ((m.q_lora_rank or 0) + m.kv_lora_rank)
    rope = 2 * ab * T * (nh / tp + 1) * m.qk_rope_head_dim
    up = q_up + kv_up + elementwise_time_s(acc, rope * x.unfused, kernels=1)
    return q_down + q_up + kv_down + kv_up, lora_norm + rope, up


def attention_block(model: ModelSpec, acc: Accelerator, x: _Shapes):
    """(attention block forward, the flash kernel alone, its memory-bound part, its GEMMs, MLA's
    up-projections)."""
    _, out_width, _, _ = _attention_dims(model)
    proj, elem_bytes, up = _projections(model, acc, x)
    out_proj = gemm_time_s(acc, x.p, x.T, x.h, out_width / x.tp)
    # document-masked packed samples: the slowest dp rank's sum(l^2) over (its samples x seq_len^2)
    core = attention_time_s(acc, x.p, attention_flops_fwd(model, x.b, x.s, x.cp, x.tp) * x.attn_work)
    elem = elementwise_time_s(acc, x.norm_bytes + x.resid_bytes + elem_bytes * x.unfused, kernels=4)
    return proj + out_proj + core + elem, core, elem, proj + out_proj, up


def mlp_time(model: ModelSpec, acc: Accelerator, x: _Shapes, tokens, ffn_per_device, count=1.0, grouped=False):
    """(GEMMs, activation kernel) of ``count`` MLPs with ``tokens`` rows each and ``ffn_per_device`` columns;
    ``grouped``: the routed experts' grouped GEMM (``roofline.grouped_half_dim_scale``)."""
    up_mult = 2.0 if model.gated else 1.0
    act_elems_mult = 3.0 if model.gated else 2.0  # SwiGLU reads gate and up, writes the product
    up = gemm_time_s(acc, x.p, tokens, up_mult * ffn_per_device, x.h, count=count, grouped=grouped)
    down = gemm_time_s(acc, x.p, tokens, x.h, ffn_per_device, count=count, grouped=grouped)
    act = elementwise_time_s(acc, act_elems_mult * x.ab * tokens * ffn_per_device * count * x.unfused, kernels=1)
    return up + down, act


def moe_block(model: ModelSpec, acc: Accelerator, x: _Shapes, S: StrategyBatch, imbalance: float = 1.0):
    """(MoE MLP forward without norms/residual, the routed experts alone, the memory-bound part), under
    Megatron-Core parallel folding: experts over etp x ep x edp of the stage's devices. ``imbalance``: the
    busiest expert rank receives that many times the mean of routed tokens (it sets the pace)."""
    mo = model.moe
    etp, ep = S.etp.astype(float), S.ep.astype(float)
    router = gemm_time_s(acc, "fp32" if x.p == "fp32" else "bf16", x.T_sp, mo.num_experts, x.h)
    topk_bytes = 4 * x.T_sp * mo.num_experts * 3  # softmax/top-k over fp32 logits
    permute_bytes = 2 * 2 * x.ab * x.T_sp * mo.top_k * x.h  # permute + unpermute, read and write
    rows = x.T * mo.top_k * etp / x.tp * imbalance  # routed token copies this device's etp group computes
    local_experts = mo.num_experts / ep
    gemms, act = mlp_time(model, acc, x, rows / local_experts, mo.expert_ffn_hidden_size / etp, count=local_experts,
                           grouped=True)
    expert = gemms + act
    moe = router + expert + elementwise_time_s(acc, topk_bytes + permute_bytes, kernels=4)
    shared = np.zeros_like(moe)
    if mo.shared_experts:
        sg, sa = mlp_time(model, acc, x, x.T, mo.shared_experts * mo.expert_ffn_hidden_size / x.tp)
        moe, shared, gemms = moe + sg + sa, sg + sa, gemms + sg
    parts = dict(moe=moe, moe_act=act, shared_experts=shared, gemms=gemms + router)
    return moe, expert, act + elementwise_time_s(acc, topk_bytes + permute_bytes), parts


def layer_compute(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch,
                  fused_elementwise: bool | None = None, framework: Framework | None = None) -> LayerCompute:
    """fused_elementwise: price the norms, RoPE, activations and residuals as fused kernels (True) or eager
    ones (False); None: the job's choice (``TrainSpec.fused_elementwise``), else the stack's default
    (``Framework.fused_elementwise``). framework: the job's stack (``Job.framework``); None: the one
    ``train`` names, else the accelerator family's default."""
    fw = framework if framework is not None else get_framework(train.framework, acc.family)
    fused = train.fused_elementwise if fused_elementwise is None else fused_elementwise
    traffic = fw.elementwise_traffic_for(fused)
    x = _Shapes.of(model, train, S, traffic)
    attn_fwd, core, attn_elem, attn_gemm, mla_up = attention_block(model, acc, x)
    dense_gemm, dense_act = mlp_time(model, acc, x, x.T, model.ffn_hidden_size / x.tp)
    mlp_elem = elementwise_time_s(acc, x.norm_bytes + x.resid_bytes, kernels=2)
    dense_mlp_fwd = dense_gemm + dense_act + mlp_elem
    zero = np.zeros_like(dense_mlp_fwd)
    both = dict(core_attn=core, layernorm=elementwise_time_s(acc, 2 * x.norm_bytes, kernels=2), mla_up_proj=mla_up)
    dense_modules = dict(both, mlp=dense_gemm + dense_act)
    if model.moe is not None:
        moe, expert, moe_memory_bound, moe_parts = moe_block(model, acc, x, S, train.moe_imbalance)
        moe_mlp_fwd = moe + mlp_elem
        memory_bound = attn_elem + mlp_elem + moe_memory_bound
        moe_modules = dict(both, moe=moe, moe_act=moe_parts["moe_act"], shared_experts=moe_parts["shared_experts"])
        moe_gemm = attn_gemm + moe_parts["gemms"]
    else:
        moe_mlp_fwd, expert, moe_modules, moe_gemm = zero, zero, dense_modules, zero
        memory_bound = attn_elem + mlp_elem + dense_act
    # LM head and the cross entropy over fp32-upcast logits: read bf16 logits, ~4 passes of 4 bytes
    V = float(model.vocab_size)
    head_gemm = gemm_time_s(acc, x.p, x.T, V / x.tp, x.h)
    head_fwd = head_gemm + elementwise_time_s(acc, x.T * V / x.tp * (x.ab + 4 * 4) + x.norm_bytes, kernels=4)
    embed_fwd = elementwise_time_s(acc, 2 * x.ab * x.T_sp * x.h, kernels=1)
    return LayerCompute(attn_fwd_s=attn_fwd, attn_core_fwd_s=core, dense_mlp_fwd_s=dense_mlp_fwd,
                        moe_mlp_fwd_s=moe_mlp_fwd, memory_bound_fwd_s=memory_bound,
                        head_fwd_s=head_fwd, embed_fwd_s=embed_fwd, expert_fwd_s=expert,
                        dense_module_fwd_s=dense_modules, moe_module_fwd_s=moe_modules,
                        dense_gemm_fwd_s=attn_gemm + dense_gemm, moe_gemm_fwd_s=moe_gemm)
