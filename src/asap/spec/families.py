"""The efficiency constants per accelerator family (``FAMILIES``): the few achievable fractions of peak that turn
the catalog's published peaks into rates, each with its reason; none names a model or a run. Every name is also
importable from ``asap.spec.hardware``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

# ----------------------------------------------------------------------------------------------------------
# Efficiency constants per family (the only tuned numbers in the cost model; see docs/cost_model.md).
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Achievable fractions of peak for one accelerator family.

    gemm_efficiency: fraction of peak a large, square bf16 GEMM reaches (cuBLAS/CANN/XLA on big shapes).
    gemm_half_dim: a GEMM dimension at which that efficiency halves; the curve is d / (d + gemm_half_dim) per
        dimension, which reproduces the roll-off of thin GEMMs (tensor parallelism splits n or k; small
        micro-batches shrink m). Tile-quantisation of 128x128-class tensor-core tiles motivates ~100-200.
    attention_efficiency: fraction of peak of fused (flash) attention, whose softmax and masking keep the
        matrix units idle part of the time (FlashAttention-2 reaches ~70% on A100 forward, less backward).
    fp8_gemm_efficiency: fraction of the *fp8* peak reached by fp8 GEMMs, lower than bf16 because of the
        scaling/casting kernels and amax bookkeeping around each GEMM (Transformer Engine, torchao).
    hbm_efficiency: fraction of the HBM peak a streaming elementwise kernel reaches.
    net_efficiency: fraction of the link peak that NCCL/HCCL/ICI collectives reach as bus bandwidth.
    collective_latency_s: fixed cost of one collective or point-to-point call (launch + first hop).
    kernel_overhead_s: launch gap per kernel that the device cannot hide (the host-bound floor).
    hop_latency_s: latency of one step of a ring collective; NCCL runs all-gather and reduce-scatter as rings
        (g-1 steps), all-reduce as a tree at scale (2 log2 g steps) (NCCL tuning docs; nccl-tests latencies).
    overlap_tax: fraction of an overlapped collective's duration added to the computation it hides behind:
        NCCL kernels occupy SMs (16-32 channels of 132 SMs on H100) and HBM bandwidth while they run.
    attention_half_head_dim: the head dimension at which a flash-attention kernel's rate halves: per score
        element the kernel does 4 d matmul FLOPs and a fixed amount of softmax work (exp, max, rescale on the
        special-function units), so its rate goes as d / (d + d_half) (FlashAttention-3, Shah et al. 2024,
        Fig. 5: H100 bf16 forward at 16K, hd 64 / 128 / 256 reach ~0.77 / 1 / 1.17 of hd 128's rate: d_half 54).
    attention_half_kv_len: the key length per kernel call at which its rate halves: every query block pays a
        fixed prologue/epilogue and, causally, a partly masked diagonal tile (FlashAttention-3 Fig. 5, causal:
        seq 512 reaches ~0.45 of the 16K rate, 2K ~0.8; L / (L + 256) with L the mean keys per query).
        ``attention_efficiency`` is the rate at the reference shape (head dim 128, causal 4096 tokens: L 2048).
    matrix_unit_dim: the width of the matrix unit a GEMM dimension is padded to (TPU MXUs: 128 on v4/v5e/v5p,
        256 on v6e Trillium and TPU7x Ironwood; Cloud TPU performance guide, "Matmul shape": dimensions that are
        multiples of the MXU width); 0: no padding beyond the family's saturating curve (GPU tensor-core tiles
        are fine-grained enough that the saturating ``gemm_half_dim`` curve covers them). An accelerator's own
        ``matrix_unit_dim`` wins over its family's.
    grouped_half_k: the reduction depth K at which a low-precision grouped (MoE expert) GEMM's per-tile fixed
        cost halves its efficiency, in bf16 terms (times r = the precision's peak over bf16's;
        ``roofline.gemm_efficiency``); 0: K takes ``gemm_half_dim`` like the other dimensions. Set where a
        published sweep measures it: DeepGEMM's H800 fp8 tables (deepseek-ai/DeepGEMM README) give ~800 at
        fp8, 400 in bf16 terms, on Hopper and (its Hopper-derived first estimate) Blackwell.
    sdpa_attention_rate: the rate of PyTorch SDPA's default flash backend (FlashAttention-2's kernels, vendored in
        torch) relative to the family's fused attention kernel (``attention_efficiency``: Transformer Engine's
        cuDNN or FlashAttention-3 on Hopper), for the stacks that call ``F.scaled_dot_product_attention``
        (``Framework.attention_kernel``). 1 where FlashAttention-2 is the family's own best kernel (Ampere) or
        no figure says otherwise.
    grouped_gemm_efficiency: the rate of the family's grouped (MoE expert) GEMM kernel relative to a dense GEMM
        of the same shape, beyond the shape curves; 1 where the grouped kernel is the dense GEMM's tile loop
        walked over experts (CUTLASS/cuBLAS grouped GEMMs, DeepGEMM: their losses are ``grouped_half_k``'s).
    host_op_s: host time to dispatch one framework operator (PyTorch eager: the Python frame, the dispatcher,
        the launch; ~3-10 us), priced per operator the stack's host runs (``asap.cost.host``).
    dtensor_op_s: the extra host time of an operator on DTensors (sharding propagation and the subclass's
        Python dispatch), for tensor-parallel layers built on DTensor (torchtitan, the reference trainer).
    dtensor_call_s: the extra host time of a collective issued through torch's functional collectives (DTensor's
        redistributes: queued on the process group's thread, then waited on) over a direct call.
    sync_s: the wait of one blocking collective call beyond its transfer and latency: what a rank waits for
        peers that are descheduled when processes outnumber cores; 0 on dedicated devices; measured by
        ``asap calibrate``.
    fp4_power_share: the share of the nominal fp4 (NVFP4/MXFP4) peak the part sustains beside its fp8 rate
        (``fp8_gemm_efficiency`` applies to both). 1 where the fp4 peak is the fp8 tensor path at twice the
        rate for the same energy per cycle (Blackwell: 10 PF fp4 against 5 PF fp8 on GB200). Blackwell Ultra's
        NVFP4 peak is 1.5x its sibling's at the same SMs and the same fp8 peak (GB300 NVL72 datasheet: 15 PF
        dense per GPU against GB200's 10); the denser fp4 math draws that much more energy per cycle, and a part
        that runs power-capped below its boost clock (``ultra_variant``) sustains the rate its power buys:
        1 / 1.5 of the nominal fp4 peak, on top of the board-power gain ``ultra_variant`` already gives.
    tp_overlap: fraction of tensor-parallel communication hidden behind the neighbouring GEMMs by the
        generation's usual stack (Megatron-Core --tp-comm-overlap with Transformer Engine userbuffers and
        torchtitan's async TP on Hopper; none in the 2021-22 Megatron-LM that A100 runs used, Korthikanti 2022
        sec. 6 leaves it as future work).
    """

    name: str
    gemm_efficiency: float
    gemm_half_dim: float
    attention_efficiency: float
    fp8_gemm_efficiency: float
    hbm_efficiency: float
    net_efficiency: float
    collective_latency_s: float
    kernel_overhead_s: float
    hop_latency_s: float = 5e-6
    overlap_tax: float = 0.15
    tp_overlap: float = 0.0
    host_op_s: float = 6e-6
    attention_half_head_dim: float = 54.0
    attention_half_kv_len: float = 256.0
    matrix_unit_dim: float = 0.0
    grouped_half_k: float = 0.0
    grouped_gemm_efficiency: float = 1.0
    sdpa_attention_rate: float = 1.0
    dtensor_op_s: float = 20e-6
    dtensor_call_s: float = 0.0
    sync_s: float = 0.0
    fp4_power_share: float = 1.0
    # the host runs ahead of an accelerator (kernels queue; the host only shows where it is slower than the
    # device); a CPU runs its operators on the host itself, so host and compute add up
    async_host: bool = True


_FAMILY_TABLE = (
    # NVIDIA Ampere (A100). Fitted to the A100 calibration runs (benchmarks/calibrate.py).
    Family(name="ampere",
           gemm_efficiency=0.76,  # large fp16 GEMMs; cuBLAS on A100 measures 0.7-0.8 of peak
           gemm_half_dim=64.0,
           attention_efficiency=0.09,  # the Megatron/NeoX stacks of 2021-22 ran unfused softmax attention:
           # scores written and re-read in HBM, ~hd/3 FLOP/B against a ridge of 150 FLOP/B
           fp8_gemm_efficiency=0.60,  # (A100 has no fp8; unused)
           hbm_efficiency=0.67,  # unfused elementwise kernels of that generation
           net_efficiency=0.80,  # NCCL bus bandwidth on DGX A100 (nccl-tests)
           collective_latency_s=20e-6, kernel_overhead_s=4e-6),
    # NVIDIA Hopper (H100/H800/H200). Fitted to the H100 calibration runs.
    Family(name="hopper",
           gemm_efficiency=0.62,  # power/clock limits under sustained load keep H100 below its boost peak
           gemm_half_dim=64.0,
           attention_efficiency=0.37,  # FlashAttention-2/3 on H100 at hd 128, causal 4K (the reference shape)
           fp8_gemm_efficiency=0.62,  # fp8 tensor cores at 0.6 of the fp8 peak; the input's cast to fp8 is priced
           # apart (roofline.FP8_CAST_BYTES_PER_ELEMENT), fitted on the H100 fp8 runs
           hbm_efficiency=0.95,  # fused elementwise kernels (Transformer Engine, torch.compile)
           net_efficiency=0.90,  # NCCL over NVLink4 / NDR IB, bounded above at 0.9
           collective_latency_s=20e-6, kernel_overhead_s=4e-6,
           grouped_half_k=400.0,  # DeepGEMM's H800 fp8 K sweep (the field's docstring)
           # PyTorch SDPA's flash backend runs FlashAttention-2's kernels, without Hopper's wgmma/TMA: 329 against
           # cuDNN's 631 and FlashAttention-3's 632 TFLOP/s forward at hd 128, 4608 tokens on an H100
           # (pytorch/pytorch#142132, tritonbench), 0.52; FlashAttention-3's backward is 1.5-1.75x
           # FlashAttention-2's at hd 128 (Shah et al. 2024, the backward benchmarks), ~0.6; the forward and the
           # 2.5x backward together ~0.6. cuDNN attention is opt-in in torch 2.5-2.9 (pytorch/pytorch#138522),
           # preferred again once the bundled cuDNN passes 9.15 (sdp_utils.cpp, check_prefer_cudnn_attention): a
           # run on such a torch takes a cluster file's sdpa_attention_rate 1
           sdpa_attention_rate=0.6,
           tp_overlap=0.3),  # Megatron-Core/NeMo recipes enable TE userbuffer TP overlap, torchtitan async TP;
    # not every run uses them, so a part, not all
    # NVIDIA Blackwell (B200/GB200/GB300): bf16 GEMMs at 0.56 from a published sustained-matmul benchmark read
    # against Hopper's: mamf-finder's MSMF (power-saturated, all 8 GPUs of the node busy; stas00/ml-engineering,
    # compute/accelerator/benchmarks/README.md) is 1426 of B200's 2250 TF (0.634) against 699 of H200's 989
    # (0.706), so Hopper's 0.62 x 0.634 / 0.706 = 0.56 (a 1000 W B200 clocks down further below its boost peak
    # than a 700 W Hopper). Fused elementwise at 0.86 of the faster HBM3e (first estimate); fp8 fitted on the Blackwell
    # calibration runs (Megatron-Bridge and MLPerf on B200, GB200, GB300; both shipped files): fp8 GEMMs at 0.53
    # of the fp8 peak, below Hopper's 0.62 of half that peak: the MXFP8 recipes quantise each tensor twice
    # (row- and column-wise block scales) and the tensor cores outrun the casts and scale loads around them.
    # Attention and the TP overlap are Hopper's (FlashAttention-3-class kernels at the reference shape; the NeMo
    # and Megatron-Bridge recipes turn on TE userbuffer TP overlap on Blackwell as on Hopper).
    Family(name="blackwell", gemm_efficiency=0.56, gemm_half_dim=64.0, attention_efficiency=0.37,
           fp8_gemm_efficiency=0.53, hbm_efficiency=0.86, net_efficiency=0.90, collective_latency_s=20e-6,
           kernel_overhead_s=4e-6, tp_overlap=0.3, grouped_half_k=400.0),  # Hopper's DeepGEMM figure
    # AMD CDNA3 (MI300X): hipBLASLt reaches ~0.5-0.6 of the (higher) dense peak on large bf16 GEMMs (ROCm
    # performance guides); CK flash attention ~0.3; RCCL bus bandwidth ~0.75 of the xGMI line rate. fp8 GEMMs at
    # 0.58 of the fp8 peak, fitted on the three AMD runs of published_runs_2024_2026.json (MLPerf v5.1 Llama 3.1
    # 8B on MI350X/MI355X, Primus Qwen3-30B-A3B on MI355X).
    Family(name="cdna3", gemm_efficiency=0.55, gemm_half_dim=128.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.58, hbm_efficiency=0.80, net_efficiency=0.75, collective_latency_s=25e-6,
           kernel_overhead_s=5e-6),
    # AMD CDNA4 (MI350X, MI355X): no calibration runs; CDNA3's constants (the same ROCm stack, hipBLASLt and
    # RCCL), so its bands are extrapolated (asap.cost.bands)
    Family(name="cdna4", gemm_efficiency=0.55, gemm_half_dim=128.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.58, hbm_efficiency=0.80, net_efficiency=0.75, collective_latency_s=25e-6,
           kernel_overhead_s=5e-6),
    # TPU (fitted on the two MaxText v5p runs): XLA matmuls on the 128x128 MXUs reach 0.85 of peak at large
    # shapes (MaxText's 32B run is at 68% MFU end to end); splash (flash) attention at 0.5; XLA fuses
    # elementwise work into the matmuls; ICI collectives run close to link rate, and half of the TP traffic
    # hides behind the matmuls it feeds (XLA's async collective fusion / collective matmul, which MaxText's
    # v5p configurations enable).
    Family(name="tpu", gemm_efficiency=0.85, gemm_half_dim=128.0, attention_efficiency=0.50,
           fp8_gemm_efficiency=0.50, hbm_efficiency=0.85, net_efficiency=0.85, collective_latency_s=15e-6,
           kernel_overhead_s=2e-6, tp_overlap=0.5,
           matrix_unit_dim=256.0,  # the current generations' MXU (v6e, TPU7x); the catalog's v4/v5e/v5p say 128
           # MaxText's expert GEMMs are megablox gmm, a Pallas kernel, not XLA's dot emitter: fixed tiles (512 x
           # 1024 x 1024 in configs/base.yml) whatever the expert's width, each expert's weight tiles streamed for
           # its own rows only, and a backward of a transposed kernel (tgmm) that accumulates every expert's
           # weight gradient over its own row tiles. Fitted (0.6 of the dense rate, beyond the row tiles of
           # Framework.expert_row_tile) on the MaxText MoE runs of published_runs_2024_2026.json (tpu-recipes
           # DeepSeek-V3 on v5p and TPU7x, Qwen3-235B and GPT-OSS-120B on TPU7x, Mixtral on v6e); no published
           # kernel sweep measures it
           grouped_gemm_efficiency=0.6),
    # Ascend (910B/910C; against the Cube peaks of the catalog), every constant from a published figure, none
    # fitted on a run of the shipped files:
    Family(name="ascend",
           # GEMMs at 0.67 of the Cube peak, from a GEMM benchmark read the way Hopper's is: mamf-finder on an
           # Ascend910B2C (gameofdimension/gpu_benchmark README) peaks at 322.5 TF, 0.91 of the Cube peak
           # (limulidae, gameofdimension/limulidae: 328 TF), and the same tool's 0.83 on an H100 SXM against
           # Hopper's 0.62 (sustained clocks and power against a best trial) gives 0.91 x 0.62 / 0.83 = 0.68. As a
           # check, not a fit: MindSpeed-LLM's README (commit 1ea39226) reports GPT-3 175B at MFU 0.538 on 128
           # NPUs of Atlas 900 A2 PoDc (examples/gpt3/pretrain_gpt3_175B_ptd.sh: TP8 PP16 VPP3, SP, MC2, mbs 2,
           # GBS 1024, seq 2048), which this model gives with 0.67
           gemm_efficiency=0.67, gemm_half_dim=128.0,  # Cube tiles are 16x16x16; CANN's L0/L1 tiles ~128-256
           attention_efficiency=0.30,  # npu_fusion_attention: no large-shape published rate; the GPUs' flash tier
           fp8_gemm_efficiency=0.50,  # (the 910B has no fp8; unused)
           # limulidae's torch.exp on a 910B: 642 GB/s counted one way, 1284 read + written, 0.80 of 1.6 TB/s
           hbm_efficiency=0.80,
           # limulidae: an 8-NPU HCCL all_gather at 149 GB/s on the 196 GB/s per direction of HCCS: 0.76
           net_efficiency=0.75, collective_latency_s=30e-6, kernel_overhead_s=6e-6,
           # MC2 (MindSpeed --use-mc2 / --use-ascend-mc2, mindspeed/core/tensor_parallel/ascend_turbo; MindFormers'
           # mc2): torch_npu.npu_all_gather_base_mm / npu_mm_reduce_scatter_base fuse each sequence-parallel
           # all-gather / reduce-scatter with its GEMM, the collective cut into per-rank tiles pipelined under
           # the GEMM's Cube work (docs/features/mc2.md); the backward's reduce-scatter runs async under the
           # weight-gradient GEMM. Hidden is the part the GEMM outlasts: at Llama-2-70B's shapes on TP8 (4096
           # tokens, h 8192; 67 MB per collective at limulidae's 149 GB/s: 0.39 ms) fc1 and fc2 (1.9 and 1.0
           # ms at the rate above) hide theirs whole, QKV (0.34 ms) 0.87 and the output projection (0.27 ms)
           # 0.69 of theirs: 0.9 of the TP traffic; at wider models (GPT-3's h 12288) all of it
           tp_overlap=0.9),
    # A CPU runs BLAS at a fair share of its vector peak; gloo over loopback is memory-copy bound.
    # Its per-operator cost is the host's (``host_op_s``, PyTorch eager on one core: ~3 us), priced per
    # operator the framework dispatches, so the roofline adds no launch gap of its own (kernel_overhead_s 0).
    Family(name="cpu", gemm_efficiency=0.50, gemm_half_dim=32.0, attention_efficiency=0.30,
           fp8_gemm_efficiency=0.50, hbm_efficiency=0.60, net_efficiency=0.50, collective_latency_s=50e-6,
           kernel_overhead_s=0.0, host_op_s=3e-6, async_host=False),
)
# read-only: an accelerator carries its own constants (``Accelerator.efficiency``); a cluster file's
# ``efficiency`` mapping, or ``dataclasses.replace``, makes a variant, never a change to this table
FAMILIES: Mapping[str, Family] = MappingProxyType({f.name: f for f in _FAMILY_TABLE})
EFFICIENCY_KEYS = tuple(k for k in Family.__dataclass_fields__ if k not in ("name", "async_host"))
# constants that may be 0 (the others are positive)
ZERO_ALLOWED_KEYS = ("tp_overlap", "matrix_unit_dim", "grouped_half_k", "overlap_tax", "kernel_overhead_s", "host_op_s", "dtensor_op_s", "dtensor_call_s",
                     "sync_s")


REFERENCE_HEAD_DIM = 128.0  # the head dim ``attention_efficiency`` is quoted at (its shape: roofline.attention_shape_factor)


# NVIDIA Blackwell Ultra (B300, GB300): the same SMs and the same nominal dense bf16/fp8 peaks as its Blackwell
# sibling (HGX B300 4.5 PF fp8 as B200; GB300 NVL72 360 PF fp8 dense / 72 = 5 PF as GB200), two differences:
# - board power: 1100 W (HGX B300) against B200's 1000 W, 1400 W (GB300) against GB200's 1200 W (NVIDIA HGX and
#   GB300 NVL72 datasheets). Under sustained tensor load Blackwell parts run power-capped below the boost clock
#   their nominal peak is quoted at; at the voltage floor the clock, and so the tensor rate, goes as the power.
#   Megatron-Bridge's performance summary (docs/performance-summary-archive.md) bears the ratio out on identical
#   layouts: B300 over B200 1.12 (GPT-OSS-120B BF16, 26.04.01) and 1.11 (DeepSeek-V3 MXFP8, 26.04); GB300 over
#   GB200 1.24 (Llama3-70B FP8 FSDP pretraining, 26.04.01; 1.27 in 26.04) and 1.21 (Llama3-70B FP8 SFT on 8
#   GPUs, 26.06), the doubled SFU below adding its share on the GB300 pair's 8K sequences.
# - the special-function units: twice Blackwell's MUFU.EX2 rate (NVIDIA, "Inside NVIDIA Blackwell Ultra" and
#   "Making Softmax More Efficient with NVIDIA Blackwell Ultra": 10.7 against 5 tera-exponentials/s). In the
#   attention kernel's rate d / (d + d_half) (``attention_half_head_dim``: the softmax work per score in
#   head-dim units) d_half halves, so at the reference head dim 128 the kernel runs (128 + d_half) /
#   (128 + d_half / 2) faster (1.17 at Hopper's d_half 54).
# HBM-bound kernels keep their rate (the same 8 TB/s HBM3e).
def ultra_variant(fam: Family, board_power_w: float, sibling_board_power_w: float,
                  fp4_peak_gain: float = 1.0) -> Family:
    """A Blackwell Ultra part's constants from its Blackwell sibling family's: GEMM and attention rates scaled by
    the board-power ratio, the attention's softmax share halved (the comment above); ``fp4_peak_gain`` its
    nominal fp4 peak over its sibling's, which the power cap does not sustain (``Family.fp4_power_share``)."""
    gain = board_power_w / sibling_board_power_w
    d_half = fam.attention_half_head_dim
    sfu = (REFERENCE_HEAD_DIM + d_half) / (REFERENCE_HEAD_DIM + d_half / 2.0)
    return replace(fam, gemm_efficiency=fam.gemm_efficiency * gain, fp8_gemm_efficiency=fam.fp8_gemm_efficiency * gain,
                   attention_efficiency=fam.attention_efficiency * gain * sfu, attention_half_head_dim=d_half / 2.0,
                   fp4_power_share=fam.fp4_power_share / fp4_peak_gain)

