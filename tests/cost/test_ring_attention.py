"""Ring attention step by step (``asap.cost.ring_attention``): each step's overlap, the stacks' two rings, the
kernel's calls and keys per step, the merges, and the K,V width under tensor parallelism, against hand figures
(Llama 3 8B: 32 query heads, 8 KV heads, head dim 128)."""

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.collectives import p2p_s, spans_domains
from asap.cost.communication import kv_width_per_device, layer_comm, ring_links_s
from asap.cost.compute import layer_compute
from asap.cost.layer_ops import Shapes, attention_kv_len, layer_table
from asap.cost.operations import BWD_ATTENTION, BWD_ELEMENTWISE, OpKind
from asap.cost.ring_attention import merge_bytes, ring_exposed_s, ring_traffic_s
from asap.cost.roofline import attention_time_s
from asap.cost.units import unit_times
from asap.spec.framework import FRAMEWORKS, CpRing
from asap.spec.job import Job
from asap.spec.layout import Unit
from asap.spec.placement import Placement
from asap.spec.strategy import Strategy


def job(seq=32768, framework="megatron", nodes=1, gbs=8):
    return Job.from_names("llama3-8b", "dgx-h100-8node", gbs, seq, "bf16", framework=framework, nodes=nodes)


def batch(**kw):
    return StrategyBatch.from_strategies([Strategy(**kw)])


def test_te_steps_hide_one_send_each():
    """TE, cp 4, one chunk's send x = 1, forward kernel f = 2 (0.5 a step), backward b = 5 (1.25 a step):
    forward 3 sends each against its step, 3 x (1 - 0.5) = 1.5 (the aggregate max(0, 3 - 2) = 1 hid the last
    step's compute behind nothing); backward K,V (step 0) and dK,dV (step 3) alone hide, the two middle steps
    send both (2 > 1.25): 2 x 0.75 = 1.5."""
    fwd, bwd = ring_exposed_s(CpRing.TE, np.array([4]), 1.0, 0.0, 2.0, 5.0)
    assert fwd[0] == pytest.approx(1.5) and bwd[0] == pytest.approx(1.5)
    # a compute-bound ring hides everything; cp 1 has no ring
    assert ring_exposed_s(CpRing.TE, np.array([4]), 1.0, 0.0, 40.0, 100.0)[0][0] == 0.0
    assert ring_exposed_s(CpRing.TE, np.array([1]), 1.0, 0.0, 0.0, 0.0)[1][0] == 0.0
    # traffic: cp-1 chunks forward, twice that backward
    traffic = ring_traffic_s(CpRing.TE, np.array([4]), 1.0, 0.0)
    assert traffic[0][0] == 3.0 and traffic[1][0] == 6.0


def test_torch_gathers_behind_the_diagonal_step():
    """torch, cp 4, gather g = 3, chunk x = 1 (fp32 dK,dV: y = 2), f = 2, b = 5: forward max(0, 3 - 0.5) = 2.5;
    backward the gather again (3 - 1.25), three dK,dV sends under the next step (3 x 0.75) and the last one
    received after the loop (2): 1.75 + 2.25 + 2 = 6."""
    fwd, bwd = ring_exposed_s(CpRing.TORCH, np.array([4]), 1.0, 3.0, 2.0, 5.0)
    assert fwd[0] == pytest.approx(2.5) and bwd[0] == pytest.approx(6.0)
    traffic = ring_traffic_s(CpRing.TORCH, np.array([4]), 1.0, 3.0)
    assert traffic[0][0] == 3.0 and traffic[1][0] == pytest.approx(3.0 + 4 * 2.0)
    assert FRAMEWORKS["torchtitan"].cp_ring == CpRing.TORCH and FRAMEWORKS["megatron"].cp_ring == CpRing.TE


def test_keys_per_call_by_exchange():
    """s = 32768, cp 4: a ring step sees c = s / (2 cp) = 4096 keys (the slowest rank's lower triangles); one
    call over the whole sequence (no CP, Ulysses, the all-gather's two calls by FLOPs) s / 2 = 16384."""
    assert attention_kv_len(32768, 4, True) == 4096
    assert attention_kv_len(32768, 4, False) == 16384 and attention_kv_len(32768, 1, True) == 16384


def test_ring_calls_the_kernel_once_a_step():
    """The core attention operation of a cp 4 ring has 4 launches at 4096 keys; each launch pays the gap."""
    j = job()
    S = batch(dp=2, cp=4)
    ops = {op.name: op for op in layer_table(j.model, Shapes.of(j.model, j.train, S), S, moe=False).operations}
    core = ops["core_attn"]
    assert core.kernels[0] == 4 and core.kv_len[0] == 4096
    acc = j.cluster.accelerator
    one, four = (attention_time_s(acc, "bf16", 1e12, calls=n) for n in (1.0, 4.0))
    assert four - one == pytest.approx(3 * acc.family_constants.kernel_overhead_s)
    # no ring (Ulysses), no merge and one call over the sequence
    S2 = batch(dp=2, cp=4, cp_comm="a2a")
    ops2 = {op.name: op for op in layer_table(j.model, Shapes.of(j.model, j.train, S2), S2, moe=False).operations}
    assert "cp_merge" not in ops2 and ops2["core_attn"].kernels[0] == 1 and ops2["core_attn"].kv_len[0] == 16384


def test_merge_hand_figure():
    """TE, s = 32768, cp 4, tp 1: T = 8192 tokens; forward 6 B x 4 steps x 8192 x 4096 (32 heads x 128) =
    805306368 B; backward 6 B x 4 x 8192 x (4096 dQ + 2048 dK,dV) = 1207959552 B; the operation carries
    (F + B) / (1 + 2) so that its forward and its backward (2x, the elementwise factor) add up to F + B.
    torch's fp32 merges: 10 B."""
    fwd, bwd = merge_bytes(CpRing.TE, np.array([4]), 8192, 4096, 4096, 2048)
    assert fwd[0] == 805306368 and bwd[0] == 1207959552
    j = job()
    S = batch(dp=2, cp=4)
    ops = {op.name: op for op in layer_table(j.model, Shapes.of(j.model, j.train, S), S, moe=False).operations}
    merge = ops["cp_merge"]
    assert merge.kind == OpKind.ELEMENTWISE
    assert merge.bytes[0] * (1 + BWD_ELEMENTWISE) == pytest.approx(805306368 + 1207959552)
    torch_fwd = merge_bytes(CpRing.TORCH, np.array([4]), 8192, 4096, 4096, 2048)[0]
    assert torch_fwd[0] == pytest.approx(805306368 * 10 / 6)


def test_kv_width_with_replicated_heads():
    """8 KV heads: tp 2 holds 4 (2 x 4 x 128 = 1024 wide), tp 16 one replicated head (256, not 128)."""
    model = job().model
    assert kv_width_per_device(model, 2) == 1024 and kv_width_per_device(model, 16) == 256


def test_step_overlap_in_the_layer():
    """s = 8192, tp 8, cp 8 over 8 nodes (cp ranks stride 8: every hop crosses nodes): a chunk is T = 1024
    tokens x one KV head (tp 8) x 256 x 2 B = 512 KiB on the scale-out link; the layer's exposed ring is the
    per-step formula on that send and the kernel's time, and exceeds the aggregate max(0, sends - kernel)."""
    j = job(8192, nodes=8, gbs=8)
    S = batch(dp=1, tp=8, cp=8)
    place = Placement.of(S)
    send, gather = ring_links_s(j, S, S.mbs * 8192 / S.cp, place)
    hand = p2p_s(j.cluster, 1024 * 256 * 2.0, spans_domains(j.cluster, *place.group("cp")))
    assert send[0] == pytest.approx(float(np.asarray(hand).reshape(-1)[0]))
    ut = unit_times(j, S)
    lc = layer_compute(j.model, j.cluster.accelerator, j.train, S, framework=j.framework)
    core = lc.attn_core_fwd_s
    fwd, bwd = ring_exposed_s(CpRing.TE, S.cp, send, gather, core, core * BWD_ATTENTION)
    assert ut.parts["cp"][0, Unit.DENSE] == pytest.approx(fwd[0] + bwd[0])
    aggregate = max(0.0, 7 * send[0] - core[0]) + max(0.0, 14 * send[0] - BWD_ATTENTION * core[0])
    assert fwd[0] + bwd[0] > aggregate
    cm = layer_comm(j, S)
    assert cm.cp_send_s[0] == send[0]


def test_hierarchical_cp():
    """a2a+p2p, cp 8 = Ulysses over 4 x a ring over 2 (Megatron --hierarchical-context-parallel-sizes 4 2): the
    inner all-to-alls are Ulysses' over a group of 4 (exposed), the ring has 2 ranks, its kernel calls see
    s / (2 x 2) keys; with cp_a2a = cp it is Ulysses exactly; the head rule and the divisor rule refuse."""
    from asap.cost.communication import cp_exchange_s, ulysses_s
    from asap.cost.estimate import estimate_spelled
    from asap.cost.ring_attention import ring_ranks
    from asap.errors import AsapError

    j = job()
    S = batch(dp=1, cp=8, cp_comm="a2a+p2p", cp_a2a=4)
    place = Placement.of(S)
    T = S.mbs * 32768 / S.cp
    _, fwd, bwd = cp_exchange_s(j, S, T, place)
    token = (4096 * 2.0, 2048 * 2.0, 4096 * 2.0)  # q, k+v, o bytes per token (tp 1, bf16)
    inner = ulysses_s(j.cluster, T, token, (np.array([4]), place.group("cp")[1]))
    assert fwd[0] == pytest.approx(inner[0]) and bwd[0] == pytest.approx(inner[0])
    assert ring_ranks(S)[0] == 2
    ops = {op.name: op for op in layer_table(j.model, Shapes.of(j.model, j.train, S), S, moe=False).operations}
    assert ops["core_attn"].kernels[0] == 2 and ops["core_attn"].kv_len[0] == 32768 / 4
    whole = estimate_spelled(j, "dp=1,cp=8,cp_comm=a2a+p2p,cp_a2a=8")
    assert whole.step_time_s == pytest.approx(estimate_spelled(j, "dp=1,cp=8,cp_comm=a2a").step_time_s)
    for bad in ("dp=1,cp=8,cp_comm=a2a+p2p,cp_a2a=3", "dp=1,cp=8,cp_a2a=2", "dp=1,cp=8,cp_comm=a2a+p2p"):
        with pytest.raises(AsapError, match="cp_a2a|cp_comm"):
            estimate_spelled(j, bad)


def test_batch_rows_keep_their_exchange():
    """Rows differing only in cp_comm (and cp_a2a) are priced apart in one batch, as one by one."""
    from asap.cost.estimate import estimate_batch, estimate_spelled

    j = job()
    spelled = ["dp=2,cp=4", "dp=2,cp=4,cp_comm=a2a", "dp=2,cp=4,cp_comm=allgather",
               "dp=2,cp=4,cp_comm=a2a+p2p,cp_a2a=2"]
    one = [estimate_spelled(j, s).step_time_s for s in spelled]
    S = StrategyBatch.from_strategies([estimate_spelled(j, s).strategy for s in spelled])
    assert list(estimate_batch(j, S).step_time_s) == pytest.approx(one)
    assert len(set(one)) == 4


def test_long_key_rate_against_flashattention3():
    """The kernel's rate at long keys against FlashAttention-3's published H100 figures (Shah et al. 2024,
    Fig. 5, hd 128, causal forward: 579 / 602 / 616 TFLOP/s at 4K / 8K / 16K tokens, i.e. 2048 / 4096 / 8192
    mean keys): the shape factor's ratios to the reference (L 2048) stay within 3% of the kernel's."""
    from asap.cost.roofline import attention_shape_factor
    from asap.spec.catalog import get_accelerator

    acc = get_accelerator("h100-sxm")
    ref = attention_shape_factor(acc, 128, 128, 2048)
    for keys, tflops in ((4096, 602.0), (8192, 616.0)):
        model = attention_shape_factor(acc, 128, 128, keys) / ref
        assert model / (tflops / 579.0) == pytest.approx(1.0, abs=0.03)
