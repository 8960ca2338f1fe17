"""Forward times of a transformer layer's parts, per device and micro-batch, derived from the operation tables
(``asap.cost.layer_ops``: every operator's shape, FLOPs, bytes, shard axis and recompute module, with the
citations; ``asap.cost.operations``: the roofline pricing and the backward factors).

``LayerCompute`` is what the rest of the cost model reads: block times, the attention kernel alone (what CP's
ring hides behind and selective recompute redoes), the memory-bound share (the bottleneck's ``mem``), what
re-running each recompute module costs, the GEMMs alone (torchtitan's op-level SAC) and the routed experts alone
(what the dispatch can overlap).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.layer_ops import (Shapes, embedding_table, head_table,
                                 layer_table)
from asap.cost.operations import Axis, Block, OpKind
from asap.cost.remat import remat_figures
from asap.spec.framework import AttentionKernel, Framework, get_framework
from asap.spec.hardware import Accelerator
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec


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
    attn_backward_s: np.ndarray  # the attention block's backward: each operation's forward times its factor
    # MaxText remat policies (``asap.cost.remat``): what each layer kind re-runs, per row ("dense", "moe")
    remat: dict = field(default_factory=dict)

    def attn_bwd_s(self):
        return self.attn_backward_s


def layer_compute(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch,
                  fused_elementwise: bool | None = None, framework: Framework | None = None) -> LayerCompute:
    """fused_elementwise: price the norms, RoPE, activations and residuals as fused kernels (True) or eager
    ones (False); None: the job's choice (``TrainSpec.fused_elementwise``), else the stack's default
    (``Framework.fused_elementwise``). framework: the job's stack (``Job.framework``); None: the one
    ``train`` names, else the accelerator family's default."""
    fw = framework if framework is not None else get_framework(train.framework, acc.family)
    fused = train.fused_elementwise if fused_elementwise is None else fused_elementwise
    traffic = fw.elementwise_traffic_for(fused)
    x = Shapes.of(model, train, S, traffic, fw.expert_row_tile, fw.attention_kernel == AttentionKernel.SDPA)
    dense = layer_table(model, x, S, moe=False)
    attention = dense.select(block=Block.ATTENTION)
    zero = np.zeros(len(S))
    dense_modules = dense.module_fwd_s(acc)
    if model.moe is not None:
        moe = layer_table(model, x, S, moe=True, attention=attention)
        moe_mlp_fwd, expert = moe.fwd_s(acc, moe.select(block=Block.MLP)), moe.fwd_s(acc, moe.select(axis=Axis.EP))
        moe_modules, moe_gemm = moe.module_fwd_s(acc), moe.fwd_s(acc, moe.select(kind=OpKind.GEMM))
        memory_bound = moe.memory_bound_s(acc)
    else:
        moe_mlp_fwd, expert, moe_modules, moe_gemm = zero, zero, dense_modules, zero
        memory_bound = dense.memory_bound_s(acc)
    return LayerCompute(attn_fwd_s=dense.fwd_s(acc, attention),
                        attn_core_fwd_s=dense.fwd_s(acc, dense.select(kind=OpKind.ATTENTION)),
                        dense_mlp_fwd_s=dense.fwd_s(acc, dense.select(block=Block.MLP)), moe_mlp_fwd_s=moe_mlp_fwd,
                        memory_bound_fwd_s=memory_bound, head_fwd_s=head_table(model, x, S).fwd_s(acc),
                        embed_fwd_s=embedding_table(x, S).fwd_s(acc), expert_fwd_s=expert,
                        dense_module_fwd_s=dense_modules, moe_module_fwd_s=moe_modules,
                        dense_gemm_fwd_s=dense.fwd_s(acc, dense.select(kind=OpKind.GEMM)), moe_gemm_fwd_s=moe_gemm,
                        attn_backward_s=dense.bwd_s(acc, attention),
                        remat={"dense": remat_figures(dense, x, model, S.recompute, False, acc),
                               "moe": remat_figures(moe, x, model, S.recompute, True, acc) if model.moe else None})
