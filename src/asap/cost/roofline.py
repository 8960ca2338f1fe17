"""Roofline timing of one operator on one device (Williams, Waterman, Patterson, CACM 2009).

An fp8 GEMM first quantises its activation input (Transformer Engine's cast, torchao's float8 conversion):
a memory-bound pass of 2 B read and 1 B written per input element, priced beside the GEMM; weights are cast
once per step and are left out.

time = max(FLOPs / achievable FLOP/s, bytes / achievable bytes/s) + a launch gap per kernel.

Achievable FLOP/s of a GEMM (m x k) @ (k x n) falls for thin shapes: tensor cores work on fixed tiles, so a
dimension d fills them with efficiency ~ d / (d + d_half) (a saturating curve; d_half is the family's
``gemm_half_dim``). The efficiency of the whole GEMM is the product over its three dimensions times the
family's large-GEMM efficiency. All functions accept numpy arrays and broadcast.

Grouped (MoE expert) GEMMs pay a fixed cost per output tile beyond its math: the tile scheduler walks expert
boundaries and, in low precision, every expert's GEMM loads its own scaling factors and casts its own input
(Transformer Engine's GroupedLinear quantises and launches per expert). A tile of low-precision math finishes
in 1/r of the bf16 time (r = the precision's peak over bf16's: 2 for fp8 on Hopper), so the same fixed cost
weighs r times more: the dimension at which a grouped GEMM's efficiency halves is r times the family's
(``grouped_half_dim_scale``). Small experts (thin n, k) therefore lose the most, and more so in fp8.

That fixed cost per output tile is amortised over the tile's reduction loop, so it is the reduction dimension
K (an expert's hidden size in fc1, its width in fc2) that sets it, not m or n (those set the number of tiles):
a tile takes K / k_rate + c, efficiency K / (K + K_half). DeepGEMM's published H800 fp8 tables
(deepseek-ai/DeepGEMM README, "Normal GEMMs for dense models" at M = 4096, N = 7168: 1358 TFLOPS at K = 16384,
1025 at K = 2048, and 590 at K = 512, N = 32768) give K_half ~ 800 at fp8 (r = 2), i.e. 400 in bf16 terms (the
family's ``grouped_half_k``), scaled by r as above; its grouped contiguous table agrees
within 5% (N 7168 / K 2048 at 1099 TFLOPS against N 4096 / K 7168 at 1297, M = 8192 per group: 0.85 measured,
0.81 here). The m curve needs no new constant: the masked-layout table (M per group 512 / 1024 / 4096-8192:
1040 / 1233 / 1297 TFLOPS, 0.80 / 0.95 / 1.0) is what ``gemm_half_dim`` x r already gives (0.81 / 0.90 / 0.99
on Hopper fp8). The K curve is applied where it was measured, low-precision grouped GEMMs on NVIDIA tensor
cores (Hopper; Blackwell takes Hopper's figure as its other first estimates do): a bf16 grouped GEMM, a dense
GEMM (whose small-K loss sits inside its fitted ``gemm_efficiency``; K is h or ffn/tp, mostly >= 4K) and the
families with no published grouped K sweep (TPU megablox GMM, CDNA, Ascend) keep ``gemm_half_dim`` on K.
"""

from __future__ import annotations

import numpy as np

from asap.spec.families import REFERENCE_HEAD_DIM
from asap.spec.hardware import Accelerator

# bytes per GEMM operand element; the block-scaled 4-bit formats carry their scales: NVFP4 one fp8 scale per 16
# elements (0.5 + 1/16 B), MXFP4 one e8m0 scale per 32 (0.5 + 1/32 B)
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "nvfp4": 0.5 + 1 / 16, "mxfp4": 0.5 + 1 / 32}
LOW_PRECISIONS = ("fp8", "nvfp4", "mxfp4")  # quantised GEMMs (asap.spec.train.LOW_PRECISIONS)
FP8_CAST_BYTES_PER_ELEMENT = 3.0  # an fp8 GEMM's activation input, cast from bf16 (2 B read, 1 B written)


FP4_PRECISIONS = ("nvfp4", "mxfp4")


def cast_bytes_per_element(precision: str) -> float:
    """HBM bytes per element of a quantised GEMM's input, cast from bf16 (one cast per GEMM call; the backward's
    two GEMMs cast theirs at the backward factor).

    fp8 (tensorwise / current scaling, as fitted): 2 B read, 1 B written. NVFP4 (Transformer Engine's
    ``NVFP4BlockScaling``, docs/features/low_precision_training/nvfp4: 1x16 blocks for activations and
    gradients with an E4M3 scale per block and one fp32 global scale from the tensor's amax): an amax pass
    (2 B read) before the cast, then a rowwise copy for the fprop/dgrad GEMM and a columnwise copy for the
    wgrad GEMM, the latter through the 16x16 random Hadamard transform (applied "only for wgrad GEMM") with
    stochastic rounding on gradients (Blackwell's hardware instruction: no extra pass), each its own read of
    the bf16 input (2 B) and write of the format (0.5 + 1/16 B): 6 + 2 x 0.5625 = 7.125 B. MXFP4 (E8M0 scales
    per 32, no global amax, no transform): one read, both copies written: 2 + 2 x 0.53125 B."""
    if precision == "nvfp4":
        return 3 * 2.0 + 2 * BYTES[precision]
    if precision == "mxfp4":
        return 2.0 + 2 * BYTES[precision]
    return 2.0 + BYTES[precision]


def fp4_rate_share(acc: Accelerator, k):
    """The share of its fp8-calibrated rate (``fp8_gemm_efficiency`` at the fp4 peak) a dense fp4 GEMM keeps,
    beyond the power cap (``Family.fp4_power_share``): a tile's fixed cost (scale-factor loads, the epilogue)
    weighs r times more where the math runs r = peak / bf16 peak times faster (the module docstring's grouped
    argument), so over the reduction depth k the efficiency halves at ``grouped_half_k`` x r (bf16 terms:
    Blackwell 400, from DeepGEMM's fp8 K sweep); ``fp8_gemm_efficiency`` was fitted where r is fp8's, so fp4
    keeps (k / (k + K0 r4)) / (k / (k + K0 r8)). Llama 3.1 405B's fc1 on GB200 (k 16384, r4 4, r8 2): 0.955."""
    fam = acc.family_constants
    k0 = max(fam.grouped_half_k, fam.gemm_half_dim)
    bf16 = acc.peak_flops("bf16")
    r4 = acc.peak_flops("fp4") * fam.fp4_power_share / bf16
    r8 = acc.peak_flops("fp8") / bf16
    k = np.maximum(k, 1.0)
    return fam.fp4_power_share * (k + k0 * r8) / (k + k0 * r4)


def act_bytes(precision: str) -> int:
    """Bytes per activation element: fp8 training keeps activations in bf16 (Transformer Engine, torchao)."""
    return 4 if precision == "fp32" else 2


def gemm_efficiency(acc: Accelerator, m, n, k, half_dim_scale=1.0, grouped=False):
    """The fraction of peak a GEMM reaches: the family's large-GEMM efficiency times a saturating curve per
    dimension and the matrix unit's padding; a low-precision ``grouped`` GEMM (an expert GEMM, ``half_dim_scale``
    r > 1): K's curve halves at the family's ``grouped_half_k`` x r where it has one (the module docstring)."""
    fam = acc.family_constants
    d0 = fam.gemm_half_dim * half_dim_scale
    k_measured = grouped and half_dim_scale > 1.0 and fam.grouped_half_k > 0
    k0 = max(fam.grouped_half_k, fam.gemm_half_dim) * half_dim_scale if k_measured else d0
    shape = (m / (m + d0)) * (n / (n + d0)) * (k / (k + k0))
    return fam.gemm_efficiency * shape * matrix_fill(acc, n) * matrix_fill(acc, k) * matrix_fill(acc, m)


def grouped_half_dim_scale(acc: Accelerator, precision: str) -> float:
    """How much later a grouped GEMM's efficiency halves than a plain one's: the precision's peak over bf16's
    (1 for bf16/fp16/fp32; the module docstring)."""
    if precision not in LOW_PRECISIONS:
        return 1.0
    return max(acc.peak_flops(precision) / acc.peak_flops("bf16"), 1.0)


def gemm_time_s(acc: Accelerator, precision: str, m, n, k, count=1.0, grouped=False):
    """``count`` GEMMs of (m, k) x (k, n): 2mnk FLOPs each, operands and result read/written once;
    ``grouped``: the experts of one grouped GEMM (its efficiency halves later: ``grouped_half_dim_scale``)."""
    fam = acc.family_constants
    m = np.maximum(m, 1.0)
    n = np.maximum(n, 1.0)
    k = np.maximum(k, 1.0)
    flops = 2.0 * m * n * k
    if precision in LOW_PRECISIONS:  # fp4 GEMMs take fp8's fraction of their own peak (block scales in hardware)
        peak = acc.peak_flops(precision) * fam.fp8_gemm_efficiency / fam.gemm_efficiency
        if precision in FP4_PRECISIONS and not grouped:
            peak = peak * fp4_rate_share(acc, k)
        elif precision in FP4_PRECISIONS:  # the grouped K curve already scales by the fp4 peak's r
            peak = peak * fam.fp4_power_share
        elem = BYTES[precision]
    else:
        peak = acc.peak_flops(precision)
        elem = BYTES[precision]
    rate = peak * gemm_efficiency(acc, m, n, k, grouped_half_dim_scale(acc, precision) if grouped else 1.0,
                                 grouped)
    if grouped:
        rate = rate * fam.grouped_gemm_efficiency
    bytes_moved = elem * (m * k + k * n) + act_bytes(precision) * m * n
    t = np.maximum(flops / rate, bytes_moved / (acc.hbm_gbps * 1e9 * fam.hbm_efficiency))
    if precision in LOW_PRECISIONS:  # the input is quantised first: read bf16, write fp8/fp4 (TE, torchao)
        t = t + elementwise_time_s(acc, cast_bytes_per_element(precision) * m * k)
    return count * (t + fam.kernel_overhead_s)


# the shape ``attention_efficiency`` is the rate of: head dim 128 (spec.families.REFERENCE_HEAD_DIM), causal 4096 tokens
REFERENCE_KV_LEN = 2048.0  # (each query against 2048 keys on average)


def matrix_fill(acc: Accelerator, d):
    """The fraction of a matrix unit a dimension d fills: d over d padded to the unit's width (1 where the
    accelerator pads nothing: ``matrix_unit_dim`` 0)."""
    w = acc.matrix_unit_dim or acc.family_constants.matrix_unit_dim
    if not w:
        return 1.0
    d = np.maximum(d, 1.0)
    return d / (np.ceil(d / w) * w)


def attention_shape_factor(acc: Accelerator, d_qk, d_v, kv_len):
    """A flash-attention kernel's rate at head dims (d_qk, d_v) and ``kv_len`` keys per query on average,
    relative to the reference shape (families.Family: ``attention_half_head_dim``, ``attention_half_kv_len``):
    softmax work per score weighs more at small head dims, fixed work per query block more at short keys; and
    where the matrix unit pads (``head_dim_fill``), the matmuls that contract over a head dim run at its fill."""
    fam = acc.family_constants
    d0, l0 = fam.attention_half_head_dim, fam.attention_half_kv_len
    d = (np.asarray(d_qk, dtype=float) + d_v) / 2.0
    head = (d / (d + d0)) / (REFERENCE_HEAD_DIM / (REFERENCE_HEAD_DIM + d0))
    kv = np.maximum(kv_len, 1.0)
    length = (kv / (kv + l0)) / (REFERENCE_KV_LEN / (REFERENCE_KV_LEN + l0))
    return head * length * head_dim_fill(acc, d_qk, d_v)


# Of flash attention's seven matmuls per score block (forward S = Q K^T and O = P V; backward the recomputed
# S = Q K^T, dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q; FlashAttention-2 sec. 3.1), three contract over a
# head dim (two over d_qk, one over d_v); the other four contract over a block of queries or keys, and a
# kernel that lays its operands out sequence-minor (Splash attention's ``sa_q_layout``/``sa_k_layout``
# SEQ_MINOR options in MaxText's tpu-recipes) keeps the head dim off the MXU's stationary side for them.
HEAD_DIM_CONTRACTIONS = (2.0, 1.0)  # (over d_qk, over d_v)
ATTENTION_MATMULS = 7.0


def head_dim_fill(acc: Accelerator, d_qk, d_v):
    """The rate of flash attention's matmuls where the matrix unit pads a contraction over a head dim: a
    systolic MXU w deep (``matrix_fill``: 128 on TPU v4/v5e/v5p, 256 on v6e and TPU7x) runs a contraction over
    d at d / (ceil(d / w) w) of its rate (hd 128 on a 256-deep MXU: half; hd 64: a quarter), the other matmuls
    at full rate: 7 / (2 / fill(d_qk) + 1 / fill(d_v) + 4). 1 where nothing pads (GPUs: ``matrix_unit_dim`` 0;
    their small-head-dim loss is ``attention_half_head_dim``'s)."""
    n_qk, n_v = HEAD_DIM_CONTRACTIONS
    rest = ATTENTION_MATMULS - n_qk - n_v
    return ATTENTION_MATMULS / (n_qk / matrix_fill(acc, d_qk) + n_v / matrix_fill(acc, d_v) + rest)


def attention_time_s(acc: Accelerator, precision: str, flops, count=1.0, d_qk=REFERENCE_HEAD_DIM,
                     d_v=REFERENCE_HEAD_DIM, kv_len=REFERENCE_KV_LEN, sdpa=False, calls=1.0):
    """Fused (flash) attention: compute-bound at the family's attention efficiency times the shape factor
    (``attention_shape_factor``), in bf16 even for fp8 runs; ``sdpa``: PyTorch SDPA's default backend, at the
    family's ``sdpa_attention_rate`` of that; ``calls``: kernel launches the ``flops`` are split over (a ring's
    cp steps), each paying the launch gap."""
    fam = acc.family_constants
    p = "fp32" if precision == "fp32" else "bf16"
    kernel = fam.sdpa_attention_rate if sdpa else 1.0
    rate = acc.peak_flops(p) * fam.attention_efficiency * kernel * attention_shape_factor(acc, d_qk, d_v, kv_len)
    return count * (flops / rate + calls * fam.kernel_overhead_s)


def elementwise_time_s(acc: Accelerator, bytes_moved, kernels=1.0):
    """Memory-bound kernels (norms, activations, residual adds, permutes, the loss): bytes over HBM bandwidth."""
    fam = acc.family_constants
    return bytes_moved / (acc.hbm_gbps * 1e9 * fam.hbm_efficiency) + kernels * fam.kernel_overhead_s
