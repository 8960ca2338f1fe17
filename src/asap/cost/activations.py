"""Stored activation bytes of one transformer layer for one micro-batch on one device, term by term.

The accounting (Korthikanti et al. 2022 and what each recompute policy keeps) is ``asap.cost.memory``'s module
docstring; ``asap.cost.units`` prices every unit with these terms and ``asap.cost.memory`` adds the in-flight
micro-batches and the model states. A module of its own so that both read it and neither imports the other's
reader (units -> activations <- memory -> units).
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.compute import qkv_width_per_device
from asap.cost.roofline import BYTES, LOW_PRECISIONS, act_bytes
from asap.spec.layout import Unit
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

LAYER_UNITS = (Unit.DENSE, Unit.MOE, Unit.MTP)  # the units that are transformer blocks


def activation_terms(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool) -> dict[str, np.ndarray]:
    """The stored activation bytes of one layer for one micro-batch on one device, term by term (the module
    docstring's accounting): what each recompute policy keeps is a sum of these."""
    ab = act_bytes(train.precision)
    h = model.hidden_size
    tp = S.tp.astype(float)
    T = S.mbs * train.seq_len / S.cp
    sp_div = np.where(S.sp > 0, tp, 1.0)
    nh = model.num_attention_heads
    if model.mla is not None:
        m = model.mla
        qkv_per_device = nh * (2 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + m.v_head_dim) / tp
        out_width = nh * m.v_head_dim
        latents = ab * ((m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim)
    else:
        qkv_per_device = qkv_width_per_device(model, tp)  # KV heads replicated when tp exceeds them
        out_width = nh * model.head_dim
        latents = 0.0
    mult = 2.0 if model.gated else 1.0
    # quantised GEMMs save their inputs quantised (Transformer Engine: fp8, NVFP4/MXFP4 recipes)
    gemm_in = BYTES[train.precision] if train.precision in LOW_PRECISIONS else ab
    zero = np.zeros(len(S))
    t = dict(norm_inputs=T * 2 * ab * h / sp_div,  # the layer input and the mid-layer residual
             norm_outputs=T * 2 * gemm_in * h / sp_div,  # the QKV and MLP inputs
             qkv=T * ab * qkv_per_device, attn_out=T * gemm_in * out_width / tp, latents=T * latents + zero,
             mlp_fc1=zero, mlp_fc2_in=zero, routed_in=zero, routed_fc1=zero, routed_fc2_in=zero,
             shared_fc1=zero, shared_fc2_in=zero, router=zero)
    if not moe:
        t.update(mlp_fc1=T * ab * mult * model.ffn_hidden_size / tp,
                 mlp_fc2_in=T * gemm_in * model.ffn_hidden_size / tp)
        return t
    mo = model.moe
    etp = S.etp.astype(float)
    rows = T * mo.top_k * etp / tp  # routed copies this device stores
    t.update(routed_in=rows * (ab + gemm_in) * h, routed_fc1=rows * ab * mult * mo.expert_ffn_hidden_size / etp,
             routed_fc2_in=rows * gemm_in * mo.expert_ffn_hidden_size / etp,
             shared_fc1=T * ab * mult * mo.shared_experts * mo.expert_ffn_hidden_size / tp,
             shared_fc2_in=T * gemm_in * mo.shared_experts * mo.expert_ffn_hidden_size / tp,
             router=4.0 * T / sp_div * mo.num_experts)
    return t


# what each recompute module stops storing (``RecomputeModule`` label -> activation terms); core_attn saves
# nothing with flash attention (its inputs Q, K, V are kept as its checkpoint's inputs, its output as the
# out-projection's input); mla_up_proj keeps the latents and drops the up-projected Q, K, V
MODULE_SAVES = {"core_attn": (), "layernorm": ("norm_outputs",), "mlp": ("mlp_fc1", "mlp_fc2_in"),
                "moe_act": ("routed_fc2_in",), "moe": ("routed_in", "routed_fc1", "routed_fc2_in", "shared_fc1", "shared_fc2_in", "router"),
                "shared_experts": ("shared_fc1", "shared_fc2_in"), "mla_up_proj": ("qkv",)}
# selective recompute (the kernels policy) stops storing the norm outputs and the activation outputs
SELECTIVE_SAVES = ("norm_outputs", "mlp_fc2_in", "routed_fc2_in", "shared_fc2_in")


def activation_bytes_per_layer(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool, selective=False):
    """Stored activation bytes of one layer for one micro-batch on one device, without recompute, or under
    selective recompute (the norm outputs and the activation functions' outputs are recomputed)."""
    t = activation_terms(model, train, S, moe)
    dropped = SELECTIVE_SAVES if selective else ()
    return sum(v for k, v in t.items() if k not in dropped)


def module_kept_bytes(model: ModelSpec, train: TrainSpec, S: StrategyBatch, moe: bool):
    """Per row: what a layer stores when its recompute value is a module set (the other rows: everything)."""
    from asap.spec.strategy import RecomputeModule, module_recomputed

    t = activation_terms(model, train, S, moe)
    dropped = {k: np.zeros(len(S), dtype=bool) for k in t}
    for m in RecomputeModule:
        on = module_recomputed(S.recompute, m)
        for k in MODULE_SAVES[m.label]:
            dropped[k] = dropped[k] | on
    return sum(np.where(dropped[k], 0.0, v) for k, v in t.items())
