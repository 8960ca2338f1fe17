"""MaxText remat policies (asap.spec.remat, asap.cost.remat) against hand figures.

Llama 3 8B at 8K, one micro-batch of one sequence on one device, bf16 (tp = cp = 1, T = 8192 tokens, h = 4096,
32 query heads and 8 KV heads of 128, SwiGLU ffn 14336). Per layer:
  layer input (decoder_layer_input)          2 * T * h                 =  67_108_864
  Q, K, V after RoPE (query/key/value_proj)  2 * T * (4096 + 2 * 1024) = 100_663_296
  out projection output (out_proj)           2 * T * h                 =  67_108_864
  fc1 outputs (mlpwi_0, mlpwi_1)             2 * T * 2 * 14336         = 469_762_048
  attention output + fp32 lse (context)      2 * T * 4096 + 4 * T * 32 =  68_157_440
full keeps the input alone; save_qkv_proj keeps Q, K and V besides: 100_663_296 B (96 MiB) more per layer, and
its backward does not re-run the QKV projection and RoPE. minimal keeps the input, Q/K/V, out_proj and the fc1
outputs (mlpwo is read by no backward). The dense layer's fc2 output is never re-run (no backward reads it).
"""

import numpy as np
import pytest

from asap.cost.batch import StrategyBatch
from asap.cost.layer_ops import Shapes, layer_table
from asap.cost.remat import remat_figures
from asap.errors import AsapError
from asap.spec.hardware import load_cluster
from asap.spec.loader import load_model
from asap.spec.strategy import parse_strategy, resolve_strategy
from asap.spec.train import TrainSpec

T, H = 8192, 4096
INPUT = 2 * T * H
QKV = 2 * T * (4096 + 2 * 1024)
OUT_PROJ = 2 * T * H
FC1 = 2 * T * 2 * 14336
CONTEXT = 2 * T * 4096 + 4 * T * 32
MODEL = load_model("llama3-8b")
TRAIN = TrainSpec(global_batch=1, seq_len=T, precision="bf16")
ACC = load_cluster("tpu-v5p", devices=1).accelerator


def figures(*recompute):
    S = StrategyBatch.from_strategies([resolve_strategy(f"recompute={r}", MODEL, TRAIN, 1) for r in recompute])
    x = Shapes.of(MODEL, TRAIN, S)
    table = layer_table(MODEL, x, S, moe=False)
    return table, remat_figures(table, x, MODEL, S.recompute, False, ACC)


def test_hand_sums():
    assert (INPUT, QKV, FC1, CONTEXT) == (67_108_864, 100_663_296, 469_762_048, 68_157_440)


@pytest.mark.parametrize("policy, device, offload", [
    ("custom", INPUT, 0),
    ("save_qkv_proj", INPUT + QKV, 0),
    ("save_out_proj", INPUT + OUT_PROJ, 0),
    ("save_dot_except_mlp", INPUT + QKV + OUT_PROJ, 0),
    ("minimal", INPUT + QKV + OUT_PROJ + FC1, 0),
    ("minimal_with_context", INPUT + QKV + OUT_PROJ + FC1 + CONTEXT, 0),
    ("qkv_proj_offloaded", INPUT, QKV),
    ("minimal_offloaded", INPUT, QKV + OUT_PROJ + FC1),
    ("custom:decoder_layer_input=offload", 0, INPUT),
    ("custom:mlpwi_0=device+mlpwi_1=offload", INPUT + FC1 / 2, FC1 / 2),
])
def test_bytes_per_layer(policy, device, offload):
    _, f = figures(policy)
    assert f.device_bytes[0] == pytest.approx(device) and f.offload_bytes[0] == pytest.approx(offload)


def test_save_qkv_proj_against_full():
    table, f = figures("custom", "save_qkv_proj")
    assert f.device_bytes[1] - f.device_bytes[0] == pytest.approx(QKV)  # 96 MiB per layer
    by_name = {op.name: op for op in table.operations}
    skipped = by_name["qkv_proj"].fwd_s(ACC) + by_name["rope"].fwd_s(ACC)
    assert f.recompute_s[0] - f.recompute_s[1] == pytest.approx(float(np.ravel(skipped)[0]))
    never = {"mlp_fc2", "mlp_residual"}  # read by no backward
    rerun = sum(np.ravel(op.fwd_s(ACC))[0] for op in table.operations if op.name not in never)
    assert f.recompute_s[0] == pytest.approx(rerun)


def test_unknown_policy_and_tensor_are_one_line():
    for text, needle in (("recompute=save_all", "MaxText remat policy"), ("recompute=custom:mlpwx=device", "mlpwx"),
                         ("recompute=custom:context=host", "context")):
        with pytest.raises(AsapError, match=needle) as e:
            parse_strategy(text)
        assert e.value.field == "strategy.recompute" and "\n" not in str(e.value)


def test_estimate_memory_follows_the_policy():
    from asap.cost.estimate import estimate_spelled as estimate
    from asap.spec.job import Job

    from dataclasses import replace

    job = Job.resolve(MODEL, load_cluster("tpu-v5p", devices=1), replace(TRAIN, framework="maxtext"))
    full, qkv = (estimate(job, f"zero=3,recompute={r}") for r in ("full", "save_qkv_proj"))
    gib = float(1 << 30)
    assert qkv.memory_gb["activations"] - full.memory_gb["activations"] == pytest.approx(32 * QKV / gib, rel=1e-6)
