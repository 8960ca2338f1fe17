"""Training-stack semantics (asap.spec.framework) and the cost terms they move, against figures derived by hand.

Every expected number below is worked out in the test from the parameter counts (asap.spec.model's module
shapes), the catalog (hardware.py) and the family constants, never by calling the helper that computes it:
  H100 SXM (hopper): NVLink 450 GB/s, NDR IB 50 GB/s per GPU, 8 GPUs per node (the scale-up domain);
  hopper net_efficiency 0.90, collective_latency_s (launch) 20e-6, hop_latency_s 5e-6.
Bus bandwidth of a group of g ranks with k of them per node (collectives.py): inside a node 0.9 * 450e9 =
405e9 B/s; spanning nodes 0.9 * min(450e9, k * 50e9), which for k = 8 is 0.9 * 400e9 = 360e9 B/s.
Small chunks do not reach the bus bandwidth: a collective moving c = S/g bytes per rank and step (at least
1 byte) runs at busbw * c / (c + 128 KiB) (HALF_BANDWIDTH_CHUNK_BYTES = 131_072).
Ring all-gather / reduce-scatter of an S-byte (full) buffer: (g-1)/g * S / achieved + 20e-6 + (g-1) * 5e-6,
which for c >= 1 B is (g-1) (S/g + 131_072) / busbw + 20e-6 + (g-1) * 5e-6;
tree all-reduce: 2 (g-1)/g * S / achieved + 20e-6 + 2 log2(g) * 5e-6.
Data-parallel traffic (communication.py): gradients are reduce-scattered in fp32 (4 B/param), weights
all-gathered in bf16 (2 B/param); ZeRO-3 issues ``collectives_per_layer`` collectives per layer and pass, the
first priced with its bytes, every other one adding one ring latency.
"""

from __future__ import annotations

import math

import pytest

from asap.cost.collectives import all_gather_s, all_reduce_s, collective_latency_s, reduce_scatter_s
from asap.cost.layer_ops import kv_heads_per_device, qkv_width_per_device
from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.spec.framework import FRAMEWORKS, ZERO3_MODULES_PER_LAYER
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.train import TrainSpec
from asap.spec.job import Job

GIB = float(1 << 30)  # memory is reported in GiB
LAUNCH, HOP = 20e-6, 5e-6  # hopper collective_latency_s, hop_latency_s
INTRA_BUSBW = 0.9 * 450e9  # 405e9 B/s: a group inside one H100 node
INTER_BUSBW = 0.9 * min(450e9, 8 * 50e9)  # 360e9 B/s: a group with 8 members per node spanning nodes
HALF_CHUNK = 128 * 1024  # bytes per rank and step at which a collective reaches half the bus bandwidth

# A small GPT-style dense model: 4 layers, h = 1024, ffn = 4096, 16 heads (MHA, head_dim 64), gelu, V = 1024.
H, FFN, V, L = 1024, 4096, 1024, 4
SMALL = load_model(dict(name="small-gpt", num_layers=L, hidden_size=H, ffn_hidden_size=FFN, num_attention_heads=16,
                        vocab_size=V, activation="gelu"))
# one layer: Q, K, V, O 4 h^2 = 4_194_304; gelu MLP 2 h ffn = 8_388_608; two norms 2 h = 2_048
LAYER = 4 * H * H + 2 * H * FFN + 2 * H
EMBED = V * H  # 1_048_576
HEAD = V * H + H  # untied LM head + final norm: 1_049_600
N_SMALL = EMBED + L * LAYER + HEAD  # 52_438_016 parameters


def achieved_Bps(size_bytes, g, busbw):
    """The bus bandwidth a collective of ``size_bytes`` over g ranks reaches: chunks of size/g bytes per rank
    (at least one byte) at busbw * chunk / (chunk + 128 KiB)."""
    chunk = max(size_bytes / g, 1.0)
    return busbw * chunk / (chunk + HALF_CHUNK)


def ring_s(size_bytes, g, busbw):
    """A ring all-gather / reduce-scatter by hand: bytes term + launch + (g-1) hops."""
    return (g - 1) / g * size_bytes / achieved_Bps(size_bytes, g, busbw) + LAUNCH + (g - 1) * HOP


def test_hand_parameter_counts_match_the_model():
    assert LAYER == 12_584_960
    assert N_SMALL == 52_438_016
    assert SMALL.num_params() == N_SMALL


# ---------------------------------------------------------------------------------------------------------
# 1. When gradients are reduced: ZeRO-1 once per step, ZeRO-2 every micro-batch; DeepSpeed's per-tensor ZeRO-3
# ---------------------------------------------------------------------------------------------------------

# 2 H100 nodes, tp = 1, dp = 16: the DP group (stride 1) holds 8 ranks per node and spans both nodes, so its
# bus bandwidth is 0.9 * min(450, 8 * 50) GB/s = 360e9 B/s and a ring pays 20e-6 + 15 * 5e-6 = 95e-6 s.
# global batch 64 / (dp 16 * mbs 1) = m = 4 micro-batches. pp = 1: the one device holds all N_SMALL params.
DP_CLUSTER = load_cluster("h100-sxm", nodes=2)
DP, M_DP = 16, 4
RING16 = LAUNCH + (DP - 1) * HOP  # 95e-6 s
# gradients 4 B * N = 209_752_064 B, chunks of 13_109_504 B: 15 * (13_109_504 + 131_072) / 360e9 + 95e-6
RS_GRAD = ring_s(4.0 * N_SMALL, DP, INTER_BUSBW)  # = 551.691e-6 + 95e-6 = 646.691e-6 s
# weights 2 B * N = 104_876_032 B, chunks of 6_554_752 B: 15 * (6_554_752 + 131_072) / 360e9 + 95e-6
AG_WEIGHTS = ring_s(2.0 * N_SMALL, DP, INTER_BUSBW)  # = 278.576e-6 + 95e-6 = 373.576e-6 s


def _dp_comm(framework, strategy, cluster=DP_CLUSTER, train=None):
    train = train or TrainSpec(global_batch=64, seq_len=2048, framework=framework)
    return estimate(Job.resolve(SMALL, cluster, train), strategy)


def test_hand_ring_figures_of_the_dp_group():
    assert RING16 == pytest.approx(95e-6)
    assert RS_GRAD == pytest.approx(15 * (4 * N_SMALL / 16 + HALF_CHUNK) / 360e9 + 95e-6, rel=1e-12)
    assert AG_WEIGHTS == pytest.approx(15 * (2 * N_SMALL / 16 + HALF_CHUNK) / 360e9 + 95e-6, rel=1e-12)
    assert RS_GRAD == pytest.approx(646.691e-6, rel=1e-6)
    assert AG_WEIGHTS == pytest.approx(373.576e-6, rel=1e-6)


# Megatron-Core's bucket: max(4e7, 1e6 x 16) = 4e7 parameters: ceil(52_438_016 / 4e7) = 2 buckets, each its own
# reduce-scatter and all-gather of half the bytes (asap.cost.communication.data_parallel_comm); DeepSpeed's 5e8: 1
RS_GRAD_2 = 2 * ring_s(4.0 * N_SMALL / 2, DP, INTER_BUSBW)  # = 747.152e-6 s
AG_WEIGHTS_2 = 2 * ring_s(2.0 * N_SMALL / 2, DP, INTER_BUSBW)  # = 474.037e-6 s


@pytest.mark.parametrize("framework,dp_s", [("megatron", 1221.189e-6), ("deepspeed", 1020.267e-6)])
def test_zero1_reduces_gradients_once_per_step(framework, dp_s):
    """ZeRO-1 (Megatron's distributed optimizer; DeepSpeed at the accumulation boundary): the fp32 gradients
    reduce-scattered and the bf16 weights all-gathered once per step, whatever m, one collective per bucket:
    DeepSpeed one, 646.691e-6 + 373.576e-6 = 1020.267e-6 s; Megatron-Core two, 747.152e-6 + 474.037e-6 =
    1221.189e-6 s (a second launch and ring latency each)."""
    est = _dp_comm(framework, "tp=1,pp=1,zero=1")
    assert est.strategy.dp == DP
    by_hand = RS_GRAD_2 + AG_WEIGHTS_2 if framework == "megatron" else RS_GRAD + AG_WEIGHTS
    assert est.breakdown_s["dp_comm"] == pytest.approx(by_hand, rel=1e-9)
    assert est.breakdown_s["dp_comm"] == pytest.approx(dp_s, rel=1e-6)


def test_megatron_has_no_zero2():
    """Megatron-Core's distributed optimizer reduce-scatters once per step (ZeRO-1 semantics); there is no
    per-micro-batch gradient partitioning to ask for."""
    from asap.errors import AsapError

    with pytest.raises(AsapError, match="zero=2 is not available in megatron"):
        _dp_comm("megatron", "tp=1,pp=1,zero=2")


@pytest.mark.parametrize("framework", ["deepspeed"])
def test_zero2_reduce_scatters_every_micro_batch(framework):
    """ZeRO-2 keeps only its gradient shard, so DeepSpeed (zero2_grad_per_micro_batch) reduce-scatters after
    each of the m = 4 backwards, and gathers the weights once: 4 * 646.691e-6 + 373.576e-6 = 2960.339e-6 s."""
    assert FRAMEWORKS[framework].zero2_grad_per_micro_batch
    z1 = _dp_comm(framework, "tp=1,pp=1,zero=1").breakdown_s["dp_comm"]
    z2 = _dp_comm(framework, "tp=1,pp=1,zero=2").breakdown_s["dp_comm"]
    assert z2 == pytest.approx(M_DP * RS_GRAD + AG_WEIGHTS, rel=1e-9)
    assert z2 == pytest.approx(2960.339e-6, rel=1e-6)
    assert z2 - z1 == pytest.approx((M_DP - 1) * RS_GRAD, rel=1e-9)  # the three extra reduce-scatters


FP32_ZERO3_S = 9191.979e-6  # m = 4 micro-batches of 4 per-layer fp32 reduce-scatters and 8 gathers
TITAN_PP_S = 289.548e-6  # 2 * ring(4 S1 / 2) + 2 * ring(2 S1 / 2) inside a node
MEGATRON_PP_S = 5783.831e-6  # 16 * RS16_UNITS + 32 * AG_UNITS (Megatron-FSDP reduces in bf16)


ONE_NIC_BUSBW = 0.9 * min(450e9, 50e9)  # DeepSpeed's per-parameter gathers: one NIC's rate for the node


def _zero3_by_hand(gathers_per_layer, grad_bytes=4.0, gather_busbw=INTER_BUSBW):
    """ZeRO-3 at pp = 1: per micro-batch a forward and a backward gather, each n = L * gathers_per_layer rings
    of 1/n of the weights, and a reduce-scatter of the gradients a layer at a time (L rings of 1/L), each ring
    with its own latency and its own, smaller, chunks."""
    n = L * gathers_per_layer
    return M_DP * (L * ring_s(grad_bytes * N_SMALL / L, DP, INTER_BUSBW)
                   + 2 * n * ring_s(2.0 * N_SMALL / n, DP, gather_busbw))


def test_deepspeed_zero3_pays_a_latency_per_parameterised_module():
    """Megatron / FSDP: one gather per layer and pass, 4 rings of a quarter of the weights; DeepSpeed: one per
    parameterised submodule, ZERO3_MODULES_PER_LAYER = 6 per layer, 24 rings of a 24th. Both reduce-scatter a
    layer at a time. Each ring pays 95e-6 s of latency, so DeepSpeed pays m * 2 gather passes * (24 - 4) *
    95e-6 = 15.2e-3 s more in latency alone, and its 6x smaller chunks reach less of the bus bandwidth, which is
    one NIC's for the node (its per-parameter gathers into list outputs), and it reduce-scatters in the
    gradients' 16 bits: by hand
    4 * (4 * ring(4N/4) + 8 * ring(2N/4)) = 9191.979e-6 s for FSDP2 (fp32 reduce-scatters). Megatron-FSDP
    reduces in bf16 (``--grad-reduce-in-bf16``, its user guide's setting): 4 * (4 * ring(2N/4) + 8 * ring(2N/4))."""
    assert ZERO3_MODULES_PER_LAYER == 6
    meg = _dp_comm("megatron", "tp=1,pp=1,zero=3").breakdown_s["dp_comm"]
    ds = _dp_comm("deepspeed", "tp=1,pp=1,zero=3").breakdown_s["dp_comm"]
    fsdp = _dp_comm("torchtitan", "tp=1,pp=1,zero=3").breakdown_s["dp_comm"]
    assert fsdp == pytest.approx(_zero3_by_hand(1), rel=1e-9)  # FSDP2 without PP: one collective per block
    assert fsdp == pytest.approx(FP32_ZERO3_S, rel=1e-6)
    assert meg == pytest.approx(_zero3_by_hand(1, grad_bytes=2.0), rel=1e-9)
    assert meg < fsdp
    assert ds == pytest.approx(_zero3_by_hand(ZERO3_MODULES_PER_LAYER, 2.0, ONE_NIC_BUSBW), rel=1e-9)
    assert ds - fsdp > M_DP * 2 * (L * 6 - L) * RING16 == pytest.approx(15.2e-3, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------
# 2. FSDP2 under a pipeline (torchtitan) keeps the stage gathered; Megatron's ZeRO-3 gathers per micro-batch
# ---------------------------------------------------------------------------------------------------------

# 2 H100 nodes, tp = 2, pp = 2, dp = 4 (sp = 1 by default). The DP group is 4 ranks 2 apart, 8 consecutive
# ranks: inside one node, busbw 405e9 B/s, ring latency 20e-6 + 3 * 5e-6 = 35e-6 s. m = 64 / 4 = 16.
# Default split: 2 layers per stage. Stage 0: embedding + 2 layers; stage 1: 2 layers + head + final norm.
# Per device (/ tp = 2): stage 0 (2 * 12_584_960 + 1_048_576) / 2 = 13_109_248; stage 1 adds the final norm:
# (2 * 12_584_960 + 1_048_576 + 1_024) / 2 = 13_109_760.
# The critical (slowest) stage, whose parameters set the DP traffic, is stage 1: its LM head GEMM and loss cost
# more than stage 0's embedding lookup. The memory peak is stage 0: 1F1B keeps pp - 0 = 2 micro-batches of
# activations there against 1 on stage 1 (its 1.5 MiB of logits do not make up the 2 * 4 MiB difference).
PP_TP, PP_DP, PP_M = 2, 4, 16
STAGE0 = (2 * LAYER + EMBED) // PP_TP  # 13_109_248
STAGE1 = (2 * LAYER + HEAD) // PP_TP  # 13_109_760
RING4 = LAUNCH + 3 * HOP  # 35e-6 s
# gradients 4 B * 13_109_760 = 52_439_040 B, chunks of 13_109_760 B: 3 * (13_109_760 + 131_072) / 405e9
RS_STAGE = ring_s(4.0 * STAGE1, PP_DP, INTRA_BUSBW)  # = 98.080e-6 + 35e-6 = 133.080e-6 s
# weights 2 B * 13_109_760 = 26_219_520 B, chunks of 6_554_880 B: 3 * (6_554_880 + 131_072) / 405e9
AG_STAGE = ring_s(2.0 * STAGE1, PP_DP, INTRA_BUSBW)  # = 49.526e-6 + 35e-6 = 84.526e-6 s
# one FSDP unit per layer, 2 layers on the stage: two rings of half the stage each
RS_UNITS = 2 * ring_s(4.0 * STAGE1 / 2, PP_DP, INTRA_BUSBW)
AG_UNITS = 2 * ring_s(2.0 * STAGE1 / 2, PP_DP, INTRA_BUSBW)
RS16_UNITS = 2 * ring_s(2.0 * STAGE1 / 2, PP_DP, INTRA_BUSBW)  # bf16 gradients: the same rings as the gathers


def test_hand_stage_figures():
    assert STAGE0 == 13_109_248 and STAGE1 == 13_109_760
    assert RS_STAGE == pytest.approx(3 * (STAGE1 + HALF_CHUNK) / 405e9 + 35e-6, rel=1e-12)
    assert AG_STAGE == pytest.approx(3 * (STAGE1 / 2 + HALF_CHUNK) / 405e9 + 35e-6, rel=1e-12)
    assert RS_STAGE == pytest.approx(133.080e-6, rel=1e-5)
    assert AG_STAGE == pytest.approx(84.526e-6, rel=1e-5)


def _pp_estimate(framework):
    return estimate(Job.resolve(SMALL, DP_CLUSTER, TrainSpec(global_batch=64, seq_len=2048, framework=framework)),
                    "tp=2,pp=2,zero=3")


def test_fsdp2_under_pp_gathers_and_reduces_once_per_step():
    """torchtitan, zero 3, pp 2: one forward gather and one reduce-scatter per step, each two per-layer rings:
    2 ring(4 S/2) + 2 ring(2 S/2) by hand."""
    assert FRAMEWORKS["torchtitan"].fsdp_keeps_params_under_pp
    est = _pp_estimate("torchtitan")
    assert (est.strategy.tp, est.strategy.pp, est.strategy.dp, est.strategy.zero) == (2, 2, 4, 3)
    assert est.breakdown_s["dp_comm"] == pytest.approx(RS_UNITS + AG_UNITS, rel=1e-9)
    assert est.breakdown_s["dp_comm"] == pytest.approx(TITAN_PP_S, rel=1e-5)


def test_megatron_zero3_under_pp_gathers_twice_and_reduces_every_micro_batch():
    """Megatron zero 3, pp 2: per micro-batch a reduce-scatter (of bf16 gradients) and two gathers (forward,
    backward), each two per-layer rings: 16 * RS16_UNITS + 16 * 2 * AG_UNITS by hand."""
    est = _pp_estimate("megatron")
    by_hand = PP_M * RS16_UNITS + PP_M * 2 * AG_UNITS
    assert est.breakdown_s["dp_comm"] == pytest.approx(by_hand, rel=1e-9)
    assert est.breakdown_s["dp_comm"] == pytest.approx(MEGATRON_PP_S, rel=1e-5)


def test_fsdp2_under_pp_holds_the_stage_unsharded():
    """Peak device (stage 0, 13_109_248 params per device):
    torchtitan keeps the stage gathered: 2 B * 13_109_248 = 26_218_496 B = 0.024418 GiB (no dp sharding);
    Megatron ZeRO-3 shards by dp*cp = 4 and holds two gathered layers (computing + prefetched):
    2 B * 13_109_248 / 4 + 2 * 2 B * 12_584_960 / 2 = 6_554_624 + 25_169_920 = 31_724_544 B = 0.029546 GiB.
    Megatron's gradients are sharded (ZeRO-3) and bf16 (Megatron-FSDP): 2 B * 13_109_248 / 4 = 6_554_624 B."""
    tt = _pp_estimate("torchtitan").memory_gb
    meg = _pp_estimate("megatron").memory_gb
    assert tt["weights"] == pytest.approx(2.0 * STAGE0 / GIB, rel=1e-9)
    assert tt["weights"] == pytest.approx(26_218_496 / GIB, rel=1e-9)
    assert meg["weights"] == pytest.approx((2.0 * STAGE0 / (PP_DP * 1) + 2 * 2.0 * LAYER / PP_TP) / GIB, rel=1e-9)
    assert meg["weights"] == pytest.approx(31_724_544 / GIB, rel=1e-9)
    assert meg["grads"] == pytest.approx(2.0 * STAGE0 / PP_DP / GIB, rel=1e-9)


def test_fsdp2_under_pp_accumulates_unsharded_gradients():
    """torchtitan, zero 3, pp 2, peak device stage 0: the accumulated fp32 gradients of the whole (tp-split)
    stage, 4 B * 13_109_248 = 52_436_992 B = 0.048836 GiB (the code reports 4 B * 13_109_248 / 4)."""
    tt = _pp_estimate("torchtitan").memory_gb
    assert tt["grads"] == pytest.approx(4.0 * STAGE0 / GIB, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------
# 3. Ring latency grows with (g - 1) hops, tree latency with 2 log2 g
# ---------------------------------------------------------------------------------------------------------

BIG = load_cluster("h100-sxm", nodes=64)  # 512 GPUs, 8 per node


@pytest.mark.parametrize("g, busbw, ring_by_hand, tree_by_hand", [
    # inside a node: 405e9 B/s; ring 20 + 7 * 5 = 55 us; tree 20 + 2 * 3 * 5 = 50 us
    (8, INTRA_BUSBW, 55e-6, 50e-6),
    # 8 nodes, 8 per node: 360e9 B/s; ring 20 + 63 * 5 = 335 us; tree 20 + 2 * 6 * 5 = 80 us
    (64, INTER_BUSBW, 335e-6, 80e-6),
    # 64 nodes: 360e9 B/s; ring 20 + 511 * 5 = 2575 us; tree 20 + 2 * 9 * 5 = 110 us
    (512, INTER_BUSBW, 2575e-6, 110e-6),
])
def test_latency_of_a_tiny_collective(g, busbw, ring_by_hand, tree_by_hand):
    """A 1-byte buffer: its chunk (1/g B, floored at 1 B) runs at busbw / 131_073, so the bytes term is
    (g-1)/g * 131_073 / busbw: 0.283e-6 s at g = 8 (405e9), 0.358e-6 at 64 and 0.363e-6 at 512 (360e9) for the
    ring, twice that for the tree; the rest is launch + hops. ``collective_latency_s`` is the hops alone."""
    assert LAUNCH + (g - 1) * HOP == pytest.approx(ring_by_hand)
    assert LAUNCH + 2 * math.log2(g) * HOP == pytest.approx(tree_by_hand)
    bytes_term = (g - 1) / g * (1 + HALF_CHUNK) / busbw
    assert bytes_term == pytest.approx({8: 0.2832e-6, 64: 0.3584e-6, 512: 0.3634e-6}[g], rel=1e-3)
    ag = float(all_gather_s(BIG, 1.0, g, 1))
    assert ag == pytest.approx(bytes_term + ring_by_hand, rel=1e-12)
    assert float(reduce_scatter_s(BIG, 1.0, g, 1)) == pytest.approx(ag, rel=1e-12)
    assert float(collective_latency_s(BIG, g)) == pytest.approx(ring_by_hand, rel=1e-12)
    ar = float(all_reduce_s(BIG, 1.0, g, 1))
    assert ar == pytest.approx(2 * bytes_term + tree_by_hand, rel=1e-12)


def test_ring_latency_grows_linearly_and_tree_logarithmically():
    """From 64 to 512 ranks the ring gains 448 hops = 2.24e-3 s, the tree 2 * (9 - 6) = 6 hops = 30e-6 s; the
    1-byte bytes term barely moves ((511/512 - 63/64) * 131_073 / 360e9 = 5.0e-9 s, twice that for the tree)."""
    lat = {g: float(collective_latency_s(BIG, g)) for g in (8, 64, 512)}
    assert lat[64] - lat[8] == pytest.approx((63 - 7) * HOP, rel=1e-9)  # 56 hops = 280e-6 s
    assert lat[512] - lat[64] == pytest.approx((511 - 63) * HOP, rel=1e-9)
    ag = {g: float(all_gather_s(BIG, 1.0, g, 1)) for g in (64, 512)}
    ar = {g: float(all_reduce_s(BIG, 1.0, g, 1)) for g in (64, 512)}
    drift = (511 / 512 - 63 / 64) * (1 + HALF_CHUNK) / INTER_BUSBW
    assert drift == pytest.approx(4.99e-9, rel=1e-2)
    assert ag[512] - ag[64] == pytest.approx((511 - 63) * HOP + drift, rel=1e-9)
    assert ar[512] - ar[64] == pytest.approx(2 * (9 - 6) * HOP + 2 * drift, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------
# 4. KV heads replicated when tp exceeds them (llama3-70b: 64 heads, 8 KV heads, head_dim 128, h 8192)
# ---------------------------------------------------------------------------------------------------------

LLAMA70 = load_model("llama3-70b")
LH, LV, LL, HD = 8192, 128256, 80, 128
# one layer: Q and O 2 * 8192 * 8192 = 134_217_728; K and V 2 * 8192 * 8 * 128 = 16_777_216;
# swiglu MLP 3 * 8192 * 28672 = 704_643_072; norms 16_384 -> 855_654_400
L70_LAYER = 2 * LH * LH + 2 * LH * 8 * HD + 3 * LH * 28672 + 2 * LH
# embedding 128256 * 8192 = 1_050_673_152, untied head the same + final norm 8192
L70_TOTAL = LV * LH + LL * L70_LAYER + LV * LH + LH  # 70_553_706_496
# tp = 16 > 8 KV heads: each rank holds one whole KV head (8 are replicated twice): 16 ranks * 1 head
# - 8 distinct heads = 8 extra heads of K and V per layer: 2 * 8192 * 128 * 8 = 16_777_216 params
KV_EXTRA_PER_LAYER = 2 * LH * HD * (16 * 1 - 8)


def test_kv_heads_and_qkv_width_per_rank():
    """tp = 16: max(8/16, 1) = 1 KV head, QKV width (64/16 + 2 * 1) * 128 = 768; tp = 8: (8 + 2) * 128 = 1280;
    tp = 4: 2 KV heads, (16 + 4) * 128 = 2560."""
    assert float(kv_heads_per_device(LLAMA70, 16)) == 1.0
    assert float(kv_heads_per_device(LLAMA70, 8)) == 1.0
    assert float(kv_heads_per_device(LLAMA70, 4)) == 2.0
    assert float(qkv_width_per_device(LLAMA70, 16)) == 768.0
    assert float(qkv_width_per_device(LLAMA70, 8)) == 1280.0
    assert float(qkv_width_per_device(LLAMA70, 4)) == 2560.0
    # attention parameters per rank at tp = 16: Q, O split, one K and one V head whole
    attn_per_rank = 2 * LH * LH // 16 + 2 * LH * HD * 1  # 8_388_608 + 2_097_152 = 10_485_760
    assert attn_per_rank == (LLAMA70.attention_params() + KV_EXTRA_PER_LAYER) // 16 == 10_485_760


def test_weights_memory_counts_replicated_kv_heads():
    """pp = 1, zero = 0 (2 B/param weights, not sharded), 16 H100s:
    tp = 8 (dp = 2): 2 B * 70_553_706_496 / 8 = 17_638_426_624 B = 16.4272 GiB;
    tp = 16 (dp = 1): 2 B * (70_553_706_496 + 80 * 16_777_216) / 16 = 8_986_985_472 B = 8.3698 GiB,
    i.e. half of tp = 8 plus the replicated K, V: 2 B * 80 * 16_777_216 / 16 = 167_772_160 B = 0.15625 GiB."""
    assert L70_LAYER == 855_654_400 and L70_TOTAL == 70_553_706_496
    assert LLAMA70.num_params() == L70_TOTAL
    cluster = load_cluster("h100-sxm", nodes=2)
    train = TrainSpec(global_batch=2, seq_len=1024, framework="megatron")
    w8 = estimate(Job.resolve(LLAMA70, cluster, train), "tp=8,pp=1,zero=0").memory_gb["weights"]
    w16 = estimate(Job.resolve(LLAMA70, cluster, train), "tp=16,pp=1,zero=0").memory_gb["weights"]
    assert w8 == pytest.approx(2.0 * L70_TOTAL / 8 / GIB, rel=1e-12)
    assert w8 == pytest.approx(17_638_426_624 / GIB, rel=1e-12)
    assert w16 == pytest.approx(2.0 * (L70_TOTAL + LL * KV_EXTRA_PER_LAYER) / 16 / GIB, rel=1e-12)
    assert w16 == pytest.approx(8_986_985_472 / GIB, rel=1e-12)
    assert w16 - w8 / 2 == pytest.approx(0.15625, rel=1e-9)


# ---------------------------------------------------------------------------------------------------------
# 5. Activation memory under each recompute mode
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recompute, by_hand_mib", [("none", 33.5), ("selective", 21.5), ("full", 10.0)])
def test_activation_memory_by_recompute_mode(recompute, by_hand_mib):
    """SMALL (gelu, MHA, 4 layers, h 1024, ffn 4096, 16 heads of 64), seq 2048, mbs 1, tp 8, sp 1, pp 1, bf16
    (ab = 2 B), one H100 node; T = 2048 tokens; per token of one layer (device_memory.py's docstring, term by term):
      none: 2 norm inputs + QKV input + MLP input 4 ab h / tp = 8 * 1024 / 8 = 1024 B (sequence-parallel);
            Q, K, V ab * (16/8 + 2 * 16/8) * 64 = 2 * 384 = 768 B; attention output ab h / tp = 256 B;
            fc1 output + fc2 input 2 ab ffn / tp = 4 * 512 = 2048 B  -> 4096 B = 32 h / tp (Korthikanti's 34
            without the dropout masks) -> 2048 * 4096 = 8 MiB per layer;
      selective: layer + mid-layer inputs 2 ab h / tp = 512 B; Q, K, V 768 B; attention output 256 B; fc1
            output ab ffn / tp = 1024 B -> 2560 B = 20 h / tp -> 5 MiB per layer;
      full: the layer input ab h / tp = 256 B -> 0.5 MiB per layer, plus one layer re-materialised (8 MiB).
    Logits of the micro-batch on the head's device: T * V / tp * (2 + 4) B = 2048 * 128 * 6 = 1.5 MiB.
    The logits live from the head's forward to the end of its backward, before the last layer is
    re-materialised: the device holds the larger of the two.
    Totals: none 4 * 8 + 1.5 = 33.5 MiB; selective 4 * 5 + 1.5 = 21.5 MiB; full 4 * 0.5 + max(8, 1.5) = 10 MiB."""
    ab, tp, T = 2, 8, 2048
    qkv = (16 / tp + 2 * 16 / tp) * 64
    full_layer = T * (4 * ab * H / tp + ab * qkv + ab * H / tp + 2 * ab * FFN / tp)
    selective_layer = T * (2 * ab * H / tp + ab * qkv + ab * H / tp + ab * FFN / tp)
    input_layer = T * ab * H / tp
    logits = T * V / tp * (ab + 4)
    assert full_layer == 8 * 2**20 and selective_layer == 5 * 2**20 and input_layer == 2**19
    assert logits == 1.5 * 2**20
    by_hand = {"none": L * full_layer + logits, "selective": L * selective_layer + logits,
               "full": L * input_layer + max(full_layer, logits)}[recompute]
    assert by_hand == by_hand_mib * 2**20
    train = TrainSpec(global_batch=1, seq_len=2048, framework="megatron")
    est = estimate(Job.resolve(SMALL, load_cluster("h100-sxm", nodes=1), train), f"tp=8,sp=1,pp=1,mbs=1,recompute={recompute}")
    assert est.memory_gb["activations"] == pytest.approx(by_hand / GIB, rel=1e-12)
    assert est.memory_gb["activations"] == pytest.approx(by_hand_mib / 1024, rel=1e-12)


def test_deepspeed_zero3_gathers_per_parameter_at_one_nic_and_again_for_recompute():
    """DeepSpeed's per-parameter ZeRO-3 gathers cross nodes at one NIC's rate for the node (not the node's
    aggregate, as FSDP's flat per-block gathers do), and full recompute fetches the weights a third time."""
    from asap.cost.estimate import estimate_spelled as price

    model, cluster = load_model("llama3-70b"), load_cluster("a100-80gb", nodes=16)
    train = TrainSpec(256, 2048, framework="deepspeed")
    none = price(Job.resolve(model, cluster, train), "tp=1,pp=1,zero=3,mbs=1,recompute=none")
    full = price(Job.resolve(model, cluster, train), "tp=1,pp=1,zero=3,mbs=1,recompute=full")
    fsdp = price(Job.resolve(model, cluster, TrainSpec(256, 2048, framework="torchtitan")), "tp=1,pp=1,zero=3,mbs=1,recompute=full")
    assert full.breakdown_s["dp_comm"] > 1.2 * none.breakdown_s["dp_comm"]
    assert full.breakdown_s["dp_comm"] > 3 * fsdp.breakdown_s["dp_comm"]


def _tp_shard_params(tp):
    """Parameters on one device of a tp group (pp = 1): N / tp (the device's count splits the norms too, 0.02%
    of N, where Megatron keeps them whole)."""
    return N_SMALL / tp


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_deepspeed_zero3_gathers_per_step_do_not_grow_with_tp(tp):
    """16 H100 over 2 nodes, global batch 64, mbs 1: tp = 1, 2, 4 gives dp = 16/tp ranks tp apart, k = 8/tp of
    them per node, and m = 4 tp micro-batches. DeepSpeed partitions each tp shard (N_tp parameters) over its dp
    group and gathers it per micro-batch (forward and backward, 24 per-parameter rings each); such a gather
    crosses a node on one channel, one NIC (0.9 * 50e9 B/s), per dp group: the node's tp groups use their own
    GPUs' NICs. So a rank's gathers per step, m * 2 * 24 rings of 2 N_tp / 24 bytes, cost about the same at any
    tp (N_tp ~ N / tp, m ~ tp), where a per-node NIC shared by the node's tp groups made them tp times dearer.
    The bf16 gradients are reduce-scattered a layer at a time at the ring's k NICs, 0.9 * min(450, k 50) GB/s:
    those grow with tp as the node's members of a group share fewer of them (Megatron-FSDP's grow alike)."""
    dp, m, k = DP // tp, M_DP * tp, 8 // tp
    n_tp, n = _tp_shard_params(tp), L * ZERO3_MODULES_PER_LAYER
    ring_grad = ring_s(2.0 * n_tp / L, dp, 0.9 * min(450e9, k * 50e9))
    gathers = m * 2 * n * ring_s(2.0 * n_tp / n, dp, ONE_NIC_BUSBW)
    est = _dp_comm("deepspeed", f"tp={tp},pp=1,zero=3,mbs=1,recompute=none")
    assert (est.strategy.dp, est.strategy.tp) == (dp, tp)
    assert est.breakdown_s["dp_comm"] == pytest.approx(m * L * ring_grad + gathers, rel=1e-9)
    tp1_gathers = M_DP * 2 * n * ring_s(2.0 * _tp_shard_params(1) / n, DP, ONE_NIC_BUSBW)
    assert gathers < 1.1 * tp1_gathers  # the rings' hops and chunks differ a little; the bytes do not
