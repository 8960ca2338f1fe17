"""The operation tables (asap.cost.layer_ops): one description of a layer from which time, stored bytes,
recompute and host figures are derived; checked against hand counts and against the derived figures."""

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.compute import layer_compute
from asap.cost.layer_ops import Shapes, attention_flops_fwd, layer_host_ops, layer_table
from asap.cost.operations import Axis, Block, OpKind
from asap.spec.framework import EAGER_HOST_OPS
from asap.spec.hardware import load_cluster
from asap.spec.knobs import RecomputeModule as M
from asap.spec.loader import load_model
from asap.spec.strategy import resolve_strategy
from asap.spec.train import TrainSpec

TRAIN = TrainSpec(global_batch=8, seq_len=4096, precision="bf16")


def first(value) -> float:
    return float(np.ravel(value)[0])


def table(name, text, devices, moe):
    model = load_model(name)
    S = StrategyBatch.from_strategies([resolve_strategy(text, model, TRAIN, devices)])
    return model, S, layer_table(model, Shapes.of(model, TRAIN, S), S, moe=moe)


def test_gemm_flops_are_twice_the_layer_matrices_per_token():
    """Every GEMM of a dense layer at tp = 1: 2 FLOPs per weight per token forward (norm weights aside), twice
    that backward; the attention kernel is the causal count."""
    model, S, t = table("llama3-8b", "tp=1", 1, moe=False)
    gemms = t.select(kind=OpKind.GEMM)
    fwd = sum(op.flops_fwd for op in gemms)[0]
    assert fwd / TRAIN.seq_len == pytest.approx(2 * model.dense_layer_params(), rel=1e-3)
    assert sum(op.flops_bwd for op in gemms)[0] == pytest.approx(2 * fwd)
    (core,) = t.select(kind=OpKind.ATTENTION)
    assert core.flops_fwd == pytest.approx(attention_flops_fwd(model, 1.0, TRAIN.seq_len, 1.0, 1.0))
    assert core.flops_bwd == pytest.approx(2.5 * core.flops_fwd)


def test_tensor_parallel_operations_split_by_tp():
    """Operations on the tp axis do 1/tp of the work; those on the sp axis move 1/tp of the bytes with SP."""
    _, _, one = table("llama3-70b", "tp=1", 1, moe=False)
    _, _, eight = table("llama3-70b", "tp=8,sp=1", 8, moe=False)
    for a, b in zip(one.operations, eight.operations, strict=True):
        assert a.name == b.name
        if a.axis == Axis.TP and a.kind != OpKind.ELEMENTWISE:
            assert first(b.flops_fwd) == pytest.approx(first(a.flops_fwd) / 8)
        if a.axis == Axis.SP and a.kind == OpKind.ELEMENTWISE:
            assert first(b.bytes) == pytest.approx(first(a.bytes) / 8)


def test_modules_own_their_operations():
    """layernorm re-runs the two norms; mlp the dense MLP's three operations; moe covers the routed and shared
    experts (moe_act and shared_experts nest inside it); mla_up_proj the up-projections and RoPE."""
    _, _, dense = table("llama3-8b", "tp=1", 1, moe=False)
    assert [op.name for op in dense.select(module=M.LAYERNORM)] == ["input_norm", "pre_mlp_norm"]
    assert [op.name for op in dense.select(module=M.MLP)] == ["mlp_fc1", "mlp_act", "mlp_fc2"]
    _, _, moe = table("deepseek-v3", "tp=1,ep=8", 8, moe=True)
    inner = {op.name for op in moe.select(module=M.MOE_ACT)} | {op.name for op in moe.select(module=M.SHARED_EXPERTS)}
    assert inner < {op.name for op in moe.select(module=M.MOE)}
    assert {op.name for op in moe.select(module=M.MLA_UP_PROJ)} == {"q_up_proj", "kv_up_proj", "rope"}
    assert {op.name for op in moe.select(axis=Axis.EP)} == {"experts_fc1", "experts_act", "experts_fc2"}
    assert all(op.block == Block.MLP for op in moe.select(module=M.MOE))


def test_derived_figures_are_sums_over_the_table():
    """layer_compute's module, block and GEMM times are sums of the operations' roofline times."""
    model = load_model("deepseek-v3")
    cluster = load_cluster("dgx-h100-1")
    S = StrategyBatch.from_strategies([resolve_strategy("tp=1,ep=8", model, TRAIN, 8)])
    lc = layer_compute(model, cluster.accelerator, TRAIN, S)
    t = layer_table(model, Shapes.of(model, TRAIN, S), S, moe=True)
    acc = cluster.accelerator
    for m in (M.MOE, M.MOE_ACT, M.LAYERNORM, M.MLA_UP_PROJ):
        assert lc.moe_module_fwd_s[m.label][0] == pytest.approx(sum(op.fwd_s(acc) for op in t.select(module=m))[0])
    assert lc.moe_mlp_fwd_s[0] == pytest.approx(t.fwd_s(acc, t.select(block=Block.MLP))[0])
    assert lc.attn_core_fwd_s[0] == pytest.approx(t.fwd_s(acc, t.select(kind=OpKind.ATTENTION))[0])


def test_saved_tensors_under_recompute_modules():
    """A module set keeps everything but what its modules drop; layernorm drops the two norm outputs."""
    model, S, t = table("llama3-8b", "tp=1", 1, moe=False)
    codes = np.array([8 + (1 << M.LAYERNORM.value)])
    h, T = model.hidden_size, TRAIN.seq_len
    assert (t.stored_bytes() - t.module_kept_bytes(codes))[0] == pytest.approx(2 * 2 * T * h)
    assert t.input_bytes()[0] == pytest.approx(2 * T * h)


def test_host_column_counts_the_expert_loop():
    """The eager stack's MoE layer adds its per-expert operators for each local expert."""
    model = load_model("tiny-moe")
    S = StrategyBatch.from_strategies([resolve_strategy("ep=1", model, TRAIN, 1)])
    fwd, bwd = layer_host_ops(model, EAGER_HOST_OPS, S, moe=True)
    E = model.moe.num_experts
    assert fwd[0] == EAGER_HOST_OPS.moe_layer[0] + E * EAGER_HOST_OPS.per_local_expert[0]
    assert bwd[0] == EAGER_HOST_OPS.moe_layer[1] + E * EAGER_HOST_OPS.per_local_expert[1]
    assert layer_host_ops(model, EAGER_HOST_OPS, S, moe=False) == EAGER_HOST_OPS.dense_layer
