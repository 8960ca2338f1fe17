"""Recompute granularity as the stacks offer it: Megatron-Core's recompute modules (``recompute=layernorm+moe_act``)
and torchtitan's op-level selective AC, against figures derived by hand.

The model: 4 MoE layers, h = 1024, 16 heads of 64 (MHA), SwiGLU experts: 8 experts of ffn 512, top-2, no shared
expert; bf16, one micro-batch of one 2048-token sequence on one H100 (tp = cp = ep = 1, T = 2048 tokens).
Stored bytes of one layer (device_memory.py's accounting, ab = 2):
  norm inputs (layer input, mid-layer residual)  2 * 2 * T * h          = 8_388_608
  norm outputs (QKV input, MLP input)            2 * 2 * T * h          = 8_388_608
  Q, K, V                                        2 * T * 3 * h          = 12_582_912
  attention output                               2 * T * h              = 4_194_304
  routed copies (rows = top_k * T = 4096):
    permuted tokens and the fc1 input            rows * (2 + 2) * h     = 16_777_216
    fc1 outputs (gate and up)                    rows * 2 * 2 * 512     = 8_388_608
    fc2 inputs (the activation's output)         rows * 2 * 512         = 4_194_304
  router logits (fp32)                           4 * T * 8              = 65_536
  total                                                                 = 62_980_096
``layernorm`` drops the norm outputs (8_388_608 per layer), ``moe_act`` the fc2 inputs (4_194_304), ``moe`` the
whole MoE block's (16_777_216 + 8_388_608 + 4_194_304 + 65_536 = 29_425_664), ``core_attn`` nothing (flash
attention keeps only Q, K, V, which are its checkpoint's inputs anyway).
"""

from __future__ import annotations

import pytest

from asap.cost.estimate import estimate_spelled as estimate  # text is parsed at this edge
from asap.errors import AsapError
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import parse_strategy, recompute_code, recompute_label
from asap.spec.train import TrainSpec
from asap.spec.job import Job

GIB = float(1 << 30)
L, H, T = 4, 1024, 2048
MOE = load_model(dict(name="small-moe", num_layers=L, hidden_size=H, ffn_hidden_size=4096, num_attention_heads=16,
                      vocab_size=1024, activation="swiglu",
                      moe=dict(num_experts=8, top_k=2, expert_ffn_hidden_size=512)))
ONE_H100 = load_cluster("h100-sxm", devices=1)
TRAIN = TrainSpec(global_batch=1, seq_len=T)
NORM_OUTPUTS = 2 * 2 * T * H
FC2_INPUTS = 4096 * 2 * 512
MOE_BLOCK = 16_777_216 + 8_388_608 + 4_194_304 + 65_536
# H100 (hopper): HBM 3350e9 B/s at 0.95, 4e-6 s per kernel launch
HBM_BPS = 3350e9 * 0.95
KERNEL_S = 4e-6


def _estimate(recompute: str):
    return estimate(Job.resolve(MOE, ONE_H100, TRAIN), f"recompute={recompute}")


def test_hand_sums():
    assert 2 * 8_388_608 + 12_582_912 + 4_194_304 + 16_777_216 + 8_388_608 + 4_194_304 + 65_536 == 62_980_096
    assert NORM_OUTPUTS == 8_388_608 and FC2_INPUTS == 4_194_304 and MOE_BLOCK == 29_425_664


@pytest.mark.parametrize("modules, saved_per_layer", [
    ("layernorm", NORM_OUTPUTS),
    ("moe_act", FC2_INPUTS),
    ("layernorm+moe_act", NORM_OUTPUTS + FC2_INPUTS),
    ("moe", MOE_BLOCK),
    ("core_attn", 0),
])
def test_a_module_stops_storing_its_activations(modules, saved_per_layer):
    """One micro-batch in flight (pp = 1): the activations fall by L times what the modules drop."""
    none = _estimate("none").memory_gb["activations"]
    with_modules = _estimate(modules).memory_gb["activations"]
    assert none - with_modules == pytest.approx(L * saved_per_layer / GIB, rel=1e-9)


def test_the_kernels_selective_policy_is_norms_and_activations_for_moe_layers():
    """Megatron's ``selective`` (the kernels policy) keeps what layernorm+moe_act keeps in a layer without shared
    experts: both drop the norm outputs and the fc2 inputs."""
    assert _estimate("selective").memory_gb["activations"] == pytest.approx(
        _estimate("layernorm+moe_act").memory_gb["activations"], rel=1e-12)


def test_layernorm_recompute_reruns_the_two_norms():
    """Re-running both norms of a layer reads and writes 2 * (2 * 2 * T * h) = 16_777_216 B in 2 kernels:
    16_777_216 / (3350e9 * 0.95) + 2 * 4e-6 = 13.272e-6 s per layer, 53.09e-6 s for the 4 layers."""
    per_layer = 2 * NORM_OUTPUTS / HBM_BPS + 2 * KERNEL_S
    assert per_layer == pytest.approx(13.272e-6, rel=1e-4)
    delta = _estimate("layernorm").breakdown_s["compute"] - _estimate("none").breakdown_s["compute"]
    assert delta == pytest.approx(L * per_layer, rel=1e-9)


def test_moe_recompute_repeats_the_dispatch():
    """Recomputing the MoE block re-runs its dispatch and combine: expert traffic goes from 2 passes to 3 (with
    ep = 2 on two H100s so that there is traffic)."""
    two = load_cluster("h100-sxm", devices=2)
    train = TrainSpec(global_batch=2, seq_len=T)
    base = estimate(Job.resolve(MOE, two, train), "ep=2,recompute=none").breakdown_s["ep_comm"]
    moe = estimate(Job.resolve(MOE, two, train), "ep=2,recompute=moe").breakdown_s["ep_comm"]
    assert base > 0 and moe == pytest.approx(1.5 * base, rel=1e-9)


def test_torchtitan_selective_is_op_level_sac():
    """torchtitan's ``selective`` (op SAC) re-runs every second GEMM as well as the memory-bound ops, so it
    costs more compute than Megatron's kernels policy on the same strategy; its stack offers no module sets."""
    titan = TrainSpec(global_batch=1, seq_len=T, framework="torchtitan")
    meg = TrainSpec(global_batch=1, seq_len=T, framework="megatron")
    sel = {n: estimate(Job.resolve(MOE, ONE_H100, t), "recompute=selective,zero=0") for n, t in (("titan", titan), ("meg", meg))}
    none = {n: estimate(Job.resolve(MOE, ONE_H100, t), "recompute=none,zero=0") for n, t in (("titan", titan), ("meg", meg))}
    extra = {n: sel[n].breakdown_s["compute"] - none[n].breakdown_s["compute"] for n in sel}
    assert extra["titan"] > extra["meg"] > 0
    with pytest.raises(AsapError, match="recompute"):
        estimate(Job.resolve(MOE, ONE_H100, titan), "recompute=layernorm,zero=0")


def test_module_sets_parse_to_one_canonical_spelling():
    assert parse_strategy("recompute=moe_act+layernorm")["recompute"] == "layernorm+moe_act"
    assert recompute_label(recompute_code("full")) == "full"
    with pytest.raises(AsapError, match="strategy.recompute"):
        parse_strategy("recompute=layernorm+mystery")
