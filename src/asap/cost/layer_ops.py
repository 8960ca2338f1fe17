"""The operation tables of a transformer: one per layer kind (dense, MoE) and one each for the embedding and
the head, per device and micro-batch, vectorized over a batch of strategies (``asap.cost.operations``).

Shapes per device: a micro-batch of b sequences of s tokens; context parallelism gives each device s/cp of
them (T = b s / cp tokens); tensor parallelism splits heads and FFN columns by tp; sequence parallelism
(Korthikanti et al. 2022, sec. 4.2.2) splits the tokens of norms, residuals and dropout by tp as well
(T_sp = T / tp). GEMM shapes follow Megatron-Core's column/row-parallel linears.

Attention FLOPs (causal): QK^T and PV each cost 2 * b * s_q * s_k * heads * d per full square; causal
masking halves the work (flash kernels skip masked tiles), so forward = 2 * b * s^2 * heads * (d_qk + d_v) / 2.
A sliding-window layer's query sees min(W, position + 1) keys (``window_keys_ratio``); the table's one attention
block is the mean layer (``attention_core_work``). Attention sinks (GPT-OSS: one learned logit per head added to
the softmax's denominator) add O(s heads) work against the kernel's O(s W heads d) and are not priced.

Stored tensors (Korthikanti et al. 2022, sec. 4, eq. 1-2, generalised term by term; ``asap.cost.device_memory``'s
module docstring): every operation saves what its backward reads, attached to the operation below with the
recompute modules that drop it (Megatron-Core ``--recompute-modules``, ``RecomputeModule``). The norm outputs
(the QKV and MLP inputs) are dropped by ``layernorm`` and by the kernels selective policy, Q, K and V by
``mla_up_proj`` (the latents stay), a dense MLP's fc1 output and fc2 input by ``mlp``, the routed experts' by
``moe`` (fc2's input also by ``moe_act``), the shared experts' by ``moe`` and ``shared_experts``, the routed
copies and router logits by ``moe``; ``core_attn`` drops nothing with flash attention (Q, K, V are its
checkpoint's inputs, its output the out projection's input). fp8 and fp4 GEMMs save their inputs quantised
(Transformer Engine).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.operations import BWD_ELEMENTWISE, Axis, Block, Operation, OperationTable, OpKind, Saved
from asap.cost.roofline import BYTES, LOW_PRECISIONS, act_bytes
from asap.cost.ring_attention import merge_bytes, ring_ranks
from asap.spec.framework import CpRing, HostOps
from asap.spec.knobs import RecomputeModule as M
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

GEMM, ATTENTION, ELEMENTWISE = OpKind.GEMM, OpKind.ATTENTION, OpKind.ELEMENTWISE


def kv_heads_per_device(model: ModelSpec, tp):
    """KV heads each tensor-parallel rank holds: kv / tp, or one replicated head when tp exceeds the KV heads
    (Megatron-Core and vLLM replicate each KV head over tp / kv ranks; PaLM's multi-query attention at tp=12)."""
    return np.maximum(model.num_kv_heads / np.asarray(tp, dtype=float), 1.0)


def qkv_width_per_device(model: ModelSpec, tp):
    """Output width of the fused QKV projection on one tensor-parallel rank (GQA/MQA, KV heads replicated)."""
    tp = np.asarray(tp, dtype=float)
    return (model.num_attention_heads / tp + 2 * kv_heads_per_device(model, tp)) * model.head_dim


def attention_head_dims(model: ModelSpec) -> tuple[float, float]:
    """(d_qk, d_v) of one head: MLA's nope + rope query/key dimension and its value dimension, or head_dim."""
    if model.mla is not None:
        m = model.mla
        return m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    return model.head_dim, model.head_dim


def attention_kv_len(s, cp, ring=False):
    """Keys per query per kernel call, on the slowest rank: causally s / 2 in one call over the sequence (no CP;
    Ulysses, whose call sees the whole sequence with heads / cp; the K,V all-gather, whose two calls per rank, a
    chunk of queries against the keys before it, average s / 2 by FLOPs); a ring's steps (``ring``: cp > 1 and
    cp_comm p2p) each see s / (2 cp) keys on the rank whose steps are all lower triangles (both query halves
    against one K,V half: ``asap.cost.ring_attention``)."""
    cp = np.maximum(np.asarray(cp, dtype=float), 1.0)
    return np.where(np.asarray(ring) & (cp > 1), s / (2.0 * cp), s / 2.0)


def attention_flops_fwd(model: ModelSpec, b, s, cp, tp):
    """Causal attention core FLOPs per device: each device owns s/cp queries against, on average, s/2 keys."""
    d_qk, d_v = attention_head_dims(model)
    return 2.0 * b * (s / cp) * s * (model.num_attention_heads / tp) * (d_qk + d_v) / 2.0


def window_keys_ratio(s, window):
    """Query-key pairs of a causal sliding-window layer over a full causal layer's, per sequence of s tokens:
    query i sees min(W, i + 1) keys, sum_i = W s - W (W - 1) / 2 for s >= W (else s (s + 1) / 2, ratio 1),
    over s (s + 1) / 2 (Beltagy et al. 2020, Longformer, sec. 3.1; Mistral 7B, arXiv:2310.06825, sec. 1)."""
    s = np.maximum(np.asarray(s, dtype=float), 1.0)
    w = np.minimum(float(window), s)
    return (w * s - w * (w - 1.0) / 2.0) / (s * (s + 1.0) / 2.0)


def attention_core_work(model: ModelSpec, b, s, cp, tp, work=1.0, ring=False, ring_cp=None):
    """(forward FLOPs, keys per query per kernel call) of the attention kernel averaged over the model's layers:
    ``model.num_window_layers`` of them slide (``window_keys_ratio`` of a causal layer's pairs; with document
    masking, ``work`` (``Shapes.attn_work``) or the window's ratio, whichever is smaller: an upper bound, short
    documents see less than the window), the rest attend causally. The kernel's time is linear in FLOPs over
    ``attention_shape_factor``'s kv / (kv + l0), so a layer's time is a + l0 a / kv and averaging the FLOPs
    and, harmonically by FLOPs, the keys per query (kv = F / mean(F_i / kv_i)) prices the mean layer exactly.
    Context parallelism: each rank's load-balanced chunks (Megatron-Core's 2 cp chunks per sequence) keep the
    window's share of the pairs; a windowed call's keys are at most the window's mean (ring traffic unchanged)."""
    full = attention_flops_fwd(model, b, s, cp, tp) * work
    kv_full = attention_kv_len(s, cp if ring_cp is None else ring_cp, ring)
    n_win = model.num_window_layers
    if not n_win:
        return full, kv_full
    ratio = window_keys_ratio(s, model.sliding_window)
    win = attention_flops_fwd(model, b, s, cp, tp) * np.minimum(work, ratio)
    kv_win = np.minimum(kv_full, ratio * (s + 1.0) / 2.0)  # the window's mean keys per query, W s - W (W - 1) / 2 over s
    f_win = n_win / model.num_layers
    flops = (1.0 - f_win) * full + f_win * win
    return flops, flops / ((1.0 - f_win) * full / kv_full + f_win * win / kv_win)


@dataclass
class Shapes:
    """Per-device shapes of one micro-batch: T tokens in GEMMs, T_sp in norms and residuals (SP splits them)."""

    p: str
    ab: int
    gemm_in: float  # bytes per element a GEMM saves of its input (quantised under fp8/fp4)
    h: float
    b: np.ndarray
    s: float
    tp: np.ndarray
    cp: np.ndarray
    T: np.ndarray
    T_sp: np.ndarray
    unfused: float  # the framework's elementwise traffic over fused kernels (asap.spec.framework)
    attn_work: np.ndarray | float = 1.0  # attention FLOPs over full-length single-document samples (--lengths)
    moe_imbalance: float = 1.0  # the busiest expert rank's routed tokens over the mean
    expert_row_tile: float = 0.0  # the grouped GEMM's row tile that each expert's rows may add (``moe_mlp_ops``)
    sdpa: bool = False  # the stack calls PyTorch SDPA for attention (``Framework.attention_kernel``)
    ring: np.ndarray | bool = False  # context parallelism by ring attention (cp > 1, cp_comm p2p)
    cp_ring: CpRing = CpRing.TE  # whose ring (``Framework.cp_ring``)
    ring_ranks: np.ndarray | float = 1.0  # the ring's ranks (cp; cp / cp_a2a under a2a+p2p: ``ring_ranks``)
    # the GEMMs after a sequence-parallel norm save their all-gathered input (``Framework.sp_gathered_input``)
    sp_gathered_input: bool = False

    @classmethod
    def of(cls, model: ModelSpec, train: TrainSpec, S: StrategyBatch, unfused: float = 1.0,
           expert_row_tile: float = 0.0, sdpa: bool = False, cp_ring: CpRing = CpRing.TE,
           sp_gathered_input: bool = False) -> "Shapes":
        b, tp, cp = S.mbs.astype(float), S.tp.astype(float), S.cp.astype(float)
        T = b * train.seq_len / cp
        ab = act_bytes(train.precision)
        gemm_in = BYTES[train.precision] if train.precision in LOW_PRECISIONS else ab
        # dp read only where a lengths file sets a factor per degree (1 for every row otherwise)
        work = train.attention_work_factor(S.dp) if train.attention_work else 1.0
        return cls(train.precision, ab, gemm_in, float(model.hidden_size), b, float(train.seq_len), tp, cp, T,
                   T / np.where(S.sp > 0, tp, 1.0), unfused, work, train.moe_imbalance,
                   expert_row_tile, sdpa, ring_ranks(S) > 1, cp_ring, ring_ranks(S), sp_gathered_input)

    @property
    def norm_bytes(self):
        return 2 * self.ab * self.T_sp * self.h * self.unfused  # read x, write y

    @property
    def resid_bytes(self):
        return 3 * self.ab * self.T_sp * self.h * self.unfused  # read x, read f(x), write sum (dropout fused)

    def norm_output(self) -> Saved:
        """A norm's output, saved as the next GEMM's input (``layernorm`` and the kernels policy drop it): its
        sequence shard under sequence parallelism where the linear re-gathers it in backward (Megatron-Core's
        ``LinearWithGradAccumulationAndAsyncCommunication`` saves the local input, Transformer Engine's
        ``ln_out``), the whole sequence where the stack's GEMM saves the all-gathered input
        (``sp_gathered_input``: DTensor's ``PrepareModuleInput`` redistributes the norm's Shard(1) output to
        Replicate, and ``aten.mm`` saves that for the weight gradient)."""
        tokens = self.T if self.sp_gathered_input else self.T_sp
        return Saved(tokens * self.gemm_in * self.h, (M.LAYERNORM,), selective=True)

    def norm(self, name: str, block: Block) -> Operation:
        """An RMSNorm/LayerNorm of the residual stream; it saves its input (the layer or mid-layer residual)."""
        return Operation(name, ELEMENTWISE, block, Axis.SP, (M.LAYERNORM,), (Saved(self.T_sp * self.ab * self.h),),
                         bytes=self.norm_bytes)

    def gemm(self, name: str, block: Block, axis: Axis, m, n, k, modules=(), saves=(), **kw) -> Operation:
        return Operation(name, GEMM, block, axis, modules, saves, precision=self.p, m=m, n=n, k=k, **kw)


def _mla_projections(model: ModelSpec, x: Shapes) -> list[Operation]:
    """MLA (DeepSeek-V2): q down/up (or one q projection), kv down (replicated over tp) and up, the latents'
    norms, RoPE on the rope dimensions; ``mla_up_proj`` re-runs the up-projections and RoPE."""
    m, nh, T, tp, h, ab = model.mla, model.num_attention_heads, x.T, x.tp, x.h, x.ab
    assert m is not None  # attention_ops calls this only when model.mla is set
    d_qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    A, up = Block.ATTENTION, (M.MLA_UP_PROJ,)
    if m.q_lora_rank:
        q = [x.gemm("q_down_proj", A, Axis.REPLICATED, T, m.q_lora_rank, h, saves=(x.norm_output(),)),
             x.gemm("q_up_proj", A, Axis.TP, T, nh * d_qk / tp, m.q_lora_rank, up)]
    else:
        q = [x.gemm("q_proj", A, Axis.TP, T, nh * d_qk / tp, h, saves=(x.norm_output(),))]
    latents = T * ab * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)  # the up-projections' inputs
    return q + [
        x.gemm("kv_down_proj", A, Axis.REPLICATED, T, m.kv_lora_rank + m.qk_rope_head_dim, h),
        Operation("lora_norms", ELEMENTWISE, A, Axis.REPLICATED,
                  bytes=2 * ab * T * ((m.q_lora_rank or 0) + m.kv_lora_rank) * x.unfused),
        x.gemm("kv_up_proj", A, Axis.TP, T, nh * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank, up,
               (Saved(latents),)),
        Operation("rope", ELEMENTWISE, A, Axis.TP, up,
                  bytes=2 * ab * T * (nh / tp + 1) * m.qk_rope_head_dim * x.unfused)]


def attention_ops(model: ModelSpec, x: Shapes) -> list[Operation]:
    """The attention block: input norm, QKV (or MLA) projections and RoPE, the flash-attention kernel, the out
    projection and the residual add."""
    A, T, tp, ab, nh = Block.ATTENTION, x.T, x.tp, x.ab, model.num_attention_heads
    d_qk, d_v = attention_head_dims(model)
    if model.mla is None:
        qkv_width = qkv_width_per_device(model, tp)  # KV heads replicated when tp exceeds them
        rope = 2 * ab * T * (nh / tp + kv_heads_per_device(model, tp)) * model.head_dim
        proj = [x.gemm("qkv_proj", A, Axis.TP, T, qkv_width, x.h, saves=(x.norm_output(),)),
                Operation("rope", ELEMENTWISE, A, Axis.TP, bytes=rope * x.unfused, kernels=2)]
    else:
        qkv_width = nh * (2 * d_qk + d_v) / tp  # the up-projected Q, K and V
        proj = _mla_projections(model, x)
    # document-masked packed samples: the slowest dp rank's sum(l^2) over (its samples x seq_len^2); sliding windows
    flops, kv_len = attention_core_work(model, x.b, x.s, x.cp, tp, x.attn_work, x.ring, x.ring_ranks)
    # a ring calls the kernel once per step (cp launches a pass) and merges the steps' partial results
    core = Operation("core_attn", ATTENTION, A, Axis.TP, (M.CORE_ATTN,),
                     (Saved(T * ab * qkv_width, (M.MLA_UP_PROJ,)),), precision="fp32" if x.p == "fp32" else "bf16",
                     flops=flops, head_dims=(d_qk, d_v), kv_len=kv_len, sdpa=x.sdpa,
                     kernels=np.where(x.ring, x.ring_ranks, 1.0))
    return [x.norm("input_norm", A), *proj, core, *ring_merge_ops(model, x, qkv_width), *_out_proj(model, x)]


def ring_merge_ops(model: ModelSpec, x: Shapes, qkv_width) -> list[Operation]:
    """The ring's merges of its steps (``asap.cost.ring_attention.merge_bytes``) as one memory-bound operation
    of the attention kernel's module (selective recompute re-runs it with the kernel): forward F and backward B
    bytes, the backward priced at the elementwise factor, so the operation carries (F + B) / (1 + 2) per pass;
    launches: two per forward step (the output and its log-sum-exp), three per backward step (dQ, dK, dV).
    None without a ring."""
    if not np.any(x.ring):
        return []
    d_qk, d_v = attention_head_dims(model)
    nh = model.num_attention_heads
    kv_width = qkv_width - nh / x.tp * d_qk if model.mla is None else nh / x.tp * (d_qk + d_v)
    # a2a+p2p: cp_a2a T tokens of heads / cp_a2a per rank after the all-to-all, the same bytes a step
    fwd, bwd = merge_bytes(x.cp_ring, np.where(x.ring, x.ring_ranks, 1.0), x.T, nh / x.tp * d_qk, nh / x.tp * d_v,
                           kv_width)
    launches = np.where(x.ring, 5.0 * x.ring_ranks / (1.0 + BWD_ELEMENTWISE), 0.0)
    return [Operation("cp_merge", ELEMENTWISE, Block.ATTENTION, Axis.TP, (M.CORE_ATTN,),
                      bytes=(fwd + bwd) / (1.0 + BWD_ELEMENTWISE), kernels=launches)]


def _out_proj(model: ModelSpec, x: Shapes) -> list[Operation]:
    """The attention block's out projection and its residual add."""
    A, T, nh = Block.ATTENTION, x.T, model.num_attention_heads
    d_v = attention_head_dims(model)[1]
    out_width, tp = nh * d_v, x.tp
    return [x.gemm("out_proj", A, Axis.TP, T, x.h, out_width / tp, saves=(Saved(T * x.gemm_in * out_width / tp),)),
            Operation("attn_residual", ELEMENTWISE, A, Axis.SP, bytes=x.resid_bytes)]


def mlp_ops(model: ModelSpec, x: Shapes, name: str, tokens, ffn_per_device, stored_tokens, axis: Axis,
            modules: tuple, act_modules: tuple, count=1.0, grouped=False, memory_bound=True,
            gemm_tokens=None) -> list[Operation]:
    """fc1, the activation function and fc2 of ``count`` MLPs with ``tokens`` rows each and ``ffn_per_device``
    columns (``grouped``: the routed experts' grouped GEMM, ``roofline.grouped_half_dim_scale``). The
    activation saves fc1's output(s), fc2 its input, for ``stored_tokens`` rows; ``modules`` re-run (and drop)
    all three, ``act_modules`` the activation (and fc2's input). ``gemm_tokens``: the rows the two GEMMs
    compute when their kernel pads them (None: ``tokens``)."""
    gemm_tokens = tokens if gemm_tokens is None else gemm_tokens
    up_mult = 2.0 if model.gated else 1.0
    act_elems_mult = 3.0 if model.gated else 2.0  # SwiGLU reads gate and up, writes the product
    B, h, ab = Block.MLP, x.h, x.ab
    fc1_out = Saved(stored_tokens * ab * up_mult * ffn_per_device, modules)
    fc2_in = Saved(stored_tokens * x.gemm_in * ffn_per_device, act_modules, selective=True)
    # eager kernels (``x.unfused`` > 1) run a gated activation as silu(w1 x) * (w3 x): the product saves silu's
    # output beside the up projection (torchtitan's FeedForward, the reference trainer's MLP and experts), a fourth
    # ffn-wide tensor where a fused kernel keeps three (benchmarks/saved_activations_cpu.py)
    act_saves = (fc1_out,) + ((Saved(stored_tokens * ab * ffn_per_device, act_modules, selective=True),)
                              if model.gated and x.unfused > 1.0 else ())
    return [x.gemm(f"{name}_fc1", B, axis, gemm_tokens, up_mult * ffn_per_device, h, modules, count=count, grouped=grouped),
            Operation(f"{name}_act", ELEMENTWISE, B, axis, act_modules, act_saves, memory_bound=memory_bound,
                      bytes=act_elems_mult * ab * tokens * ffn_per_device * count * x.unfused),
            x.gemm(f"{name}_fc2", B, axis, gemm_tokens, h, ffn_per_device, modules, (fc2_in,), count=count,
                   grouped=grouped)]


def dense_mlp_ops(model: ModelSpec, x: Shapes) -> list[Operation]:
    """A dense layer's MLP half: pre-MLP norm, fc1 (saving the norm output), activation, fc2, residual."""
    ffn = model.ffn_hidden_size / x.tp
    ops = mlp_ops(model, x, "mlp", x.T, ffn, x.T, Axis.TP, (M.MLP,), (M.MLP,))
    ops[0].saves = (x.norm_output(),)
    return [x.norm("pre_mlp_norm", Block.MLP), *ops,
            Operation("mlp_residual", ELEMENTWISE, Block.MLP, Axis.SP, bytes=x.resid_bytes)]


def moe_mlp_ops(model: ModelSpec, x: Shapes, S: StrategyBatch) -> list[Operation]:
    """An MoE layer's MLP half under Megatron-Core parallel folding (experts over etp x ep x edp of the stage's
    devices): pre-MLP norm, router GEMM and top-k over fp32 logits, dispatch (permute), the routed experts'
    grouped GEMMs over the busiest rank's rows (``Shapes.moe_imbalance`` times the mean), combine (unpermute),
    shared experts, residual; the all-to-all itself is communication (``asap.cost.communication``). The
    memory-bound share (the bottleneck's ``mem``, what selective recompute re-runs) counts the top-k and the
    permutes as one kernel launch and leaves the shared experts' activation out, as the model has priced it."""
    mo, B, ab = model.moe, Block.MLP, x.ab
    assert mo is not None  # moe=True tables are built only for MoE models
    etp, ep = S.etp.astype(float), S.ep.astype(float)
    stored_rows = x.T * mo.top_k * etp / x.tp  # routed token copies this device's etp group stores
    rows = stored_rows * x.moe_imbalance  # ... and computes on the busiest rank
    local_experts = mo.num_experts / ep
    # a grouped GEMM kernel with fixed row tiles (``Framework.expert_row_tile``) computes a tile that straddles
    # two experts' rows once for each of them, masked: one more tile per expert boundary, about one tile of rows
    # per local expert (at most the rows there are)
    per_expert = rows / local_experts
    padded = per_expert + np.minimum(x.expert_row_tile, rows)
    # read and write, once to dispatch and once to combine, every routed copy of the etp group's tokens (expert
    # tensor parallelism gathers them first: Megatron-Core's dispatchers all-gather over the expert-TP group)
    permute = 2 * ab * x.T_sp * mo.top_k * etp * x.h
    router_logits = Saved(4.0 * x.T_sp * mo.num_experts, (M.MOE,))
    ops = [x.norm("pre_mlp_norm", B),
           Operation("router", GEMM, B, Axis.SP, (M.MOE,), (x.norm_output(), router_logits),
                     precision="fp32" if x.p == "fp32" else "bf16", m=x.T_sp, n=mo.num_experts, k=x.h),
           Operation("router_topk", ELEMENTWISE, B, Axis.SP, (M.MOE,), bytes=4 * x.T_sp * mo.num_experts * 3,
                     kernels=2, memory_bound_kernels=1),
           Operation("dispatch", ELEMENTWISE, B, Axis.SP, (M.MOE,), (Saved(stored_rows * (ab + x.gemm_in) * x.h,
                                                                           (M.MOE,)),),
                     bytes=permute, memory_bound_kernels=0),
           *mlp_ops(model, x, "experts", per_expert, mo.expert_ffn_hidden_size / etp, stored_rows, Axis.EP,
                    (M.MOE,), (M.MOE, M.MOE_ACT), count=local_experts, grouped=True, gemm_tokens=padded),
           Operation("combine", ELEMENTWISE, B, Axis.SP, (M.MOE,), bytes=permute, memory_bound_kernels=0)]
    if mo.shared_experts:
        shared = (M.MOE, M.SHARED_EXPERTS)
        ops += mlp_ops(model, x, "shared_experts", x.T, mo.shared_experts * mo.expert_ffn_hidden_size / x.tp, x.T,
                       Axis.TP, shared, shared, memory_bound=False)
    return ops + [Operation("mlp_residual", ELEMENTWISE, B, Axis.SP, bytes=x.resid_bytes)]


def layer_table(model: ModelSpec, x: Shapes, S: StrategyBatch, moe: bool,
                attention: list[Operation] | None = None) -> OperationTable:
    """One transformer layer's operations (an MoE layer's when ``moe``); ``attention`` reuses an attention
    block already built for the same shapes."""
    attn = attention if attention is not None else attention_ops(model, x)
    mlp = moe_mlp_ops(model, x, S) if moe else dense_mlp_ops(model, x)
    return OperationTable(attn + mlp, len(S))


def embedding_table(x: Shapes, S: StrategyBatch) -> OperationTable:
    """The token embedding's lookup: read the rows, write the activations (backward scatters twice the bytes)."""
    return OperationTable([Operation("embedding", ELEMENTWISE, Block.EMBEDDING, Axis.SP,
                                     bytes=2 * x.ab * x.T_sp * x.h)], len(S))


def head_table(model: ModelSpec, x: Shapes, S: StrategyBatch) -> OperationTable:
    """Final norm, the vocab-parallel LM head GEMM and the cross entropy over fp32-upcast logits: read the bf16
    logits, ~4 passes of 4 bytes."""
    V = float(model.vocab_size)
    return OperationTable([
        Operation("final_norm", ELEMENTWISE, Block.HEAD, Axis.SP, bytes=x.norm_bytes),
        # a tiled loss (vocab_tiles > 1: MaxText's custom_vjp over chunks, utils/vocabulary_tiling.py) re-runs
        # the head's forward chunk by chunk in the backward: one more forward GEMM, 2 of the 6 m n k the
        # forward and backward cost, so the GEMMs count 4/3
        x.gemm("lm_head", Block.HEAD, Axis.VOCAB, x.T, V / x.tp, x.h,
               count=np.where(S.vocab_tiles > 1, 4.0 / 3.0, 1.0)),
        Operation("loss", ELEMENTWISE, Block.HEAD, Axis.VOCAB, bytes=x.T * V / x.tp * (x.ab + 4 * 4), kernels=3)],
        len(S))


def layer_host_ops(model: ModelSpec, host: HostOps, S: StrategyBatch, moe: bool):
    """The tables' host column: (forward, backward) operators the stack's host dispatches for one layer per
    micro-batch (``asap.cost.host``). The stacks' counts are measured per layer kind, not per operation
    (``HostOps``: a dispatch-mode count of the reference trainer, the fused stacks scaled from it), so the
    column is the layer kind's count, plus, in an MoE layer, the routed experts' loop: ``per_local_expert``
    for each of the num_experts / ep experts a rank holds (0 with grouped GEMMs)."""
    if not moe:
        return float(host.dense_layer[0]), float(host.dense_layer[1])
    assert model.moe is not None  # moe=True is passed only for MoE models
    local = model.moe.num_experts / S.ep.astype(float)
    return (host.moe_layer[0] + host.per_local_expert[0] * local, host.moe_layer[1] + host.per_local_expert[1] * local)
