"""Host time of a training step: the operators the stack's host dispatches, the DTensor dispatch of
tensor-parallel layers, and the wait of every blocking collective call.

Small steps pay it: tiny micro-batches, MoE experts with few tokens, deep pipelines of thin chunks, and any
run with more processes than cores. Figures per family in ``asap.spec.hardware.Family`` (``host_op_s``,
``dtensor_op_s``, ``dtensor_call_s``, ``sync_s``; ``asap calibrate`` measures them on the machine it runs
on), operator counts per stack in ``asap.spec.framework.HostOps``, per layer kind the operation tables' host
column (``asap.cost.layer_ops.layer_host_ops``).

Per unit and micro-batch (a time part of ``asap.cost.units``, beside compute):

    host_u = ops_u * host_op_s + dtensor_share * ops_u * dtensor_op_s + calls_u * sync_s
             + tp_calls_u * dtensor_call_s   (stacks whose TP runs on DTensor)

- ops_u: the stack's operators for the unit, forward + backward, the forward again under full recompute; an
  MoE layer adds ``per_local_expert`` for each of the num_experts / ep experts a rank holds; the head carries
  the embedding, final norm, head and loss (``HostOps.ends``).
- dtensor_share: with tp > 1, the share of them that run on DTensors (``HostOps.dtensor_share``, by sp).
- calls_u: the collective calls the unit blocks on: tensor parallelism 2 per pass without sequence
  parallelism (the all-reduces after the attention and MLP blocks, and their transposes in backward), 4 with it
  (all-gather + reduce-scatter pairs), for each of the 2 passes (3 under full recompute); expert parallelism 3
  in forward (token counts, dispatch, combine) and 2 in backward (+3 under full recompute); context
  parallelism cp - 1 ring steps forward and 2 (cp - 1) backward; the embedding and the head one TP exchange each
  (2 calls with SP, 1 without).

On an accelerator the host runs ahead of the device (kernels queue): a unit shows only the host time beyond
its device time, max(0, host_u - device_u). A CPU runs the operators on the host itself: host_u adds up.

The MoE dispatcher's token-count sync is the exception: a stack that sizes its all-to-all from the routed
token counts copies them to the host and waits (Megatron-Core's MoEAlltoAllTokenDispatcher synchronises at
``cuda_sync_point = "before_ep_alltoall"`` whenever ep > 1, token_dispatcher.py; DeepEP's normal kernels
busy-wait on the host for the received-token counter; torchtitan's all-to-all calls ``.tolist()`` on its
splits), once per MoE layer forward (again under full recompute; backward reuses the counts). The device's
queue drains there, so each sync costs ``D2H_SYNC_S`` (the device-to-host copy and the event wait) plus one
operator's dispatch before the device has work again, whatever the host's lead (``Framework.moe_host_sync``;
XLA's static shapes need none).

Per step (``step_host_s``): the optimizer's operators (``optimizer_per_tensor`` per parameter tensor the
device steps: every tensor, or its 1/dp share under ZeRO-1), and the blocking calls of data parallelism (the
gradient reduction, ZeRO-1's weight gathers, per block and micro-batch ZeRO-2/3's gather(s) and
reduce-scatter), of the pipeline (a send and a receive per micro-batch, chunk and direction), and the loss's
all-reduce, each waiting ``sync_s``.
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.layer_ops import layer_host_ops
from asap.spec.framework import Framework
from asap.spec.hardware import Cluster
from asap.spec.layout import UNITS, Unit
from asap.spec.model import ModelSpec
from asap.spec.strategy import Zero
from asap.spec.knobs import Recompute

CALLS_PER_TP_PASS = {0: 2, 1: 4}  # by sp
EP_CALLS_FORWARD, EP_CALLS_BACKWARD = 3, 2
PP_CALLS_PER_MICRO_BATCH_AND_CHUNK = 4  # send and receive, forward and backward
# a device-to-host copy of a few hundred bytes and the event wait on it: ~10 us over PCIe (CUDA's
# cudaMemcpyAsync + cudaEventSynchronize round trip; the same order as a kernel launch and its completion)
D2H_SYNC_S = 10e-6
LOSS_CALLS_PER_STEP = 1


def unit_ops(model: ModelSpec, fw: Framework, S: StrategyBatch) -> np.ndarray:
    """[n, len(Unit)] operators the host dispatches per unit and micro-batch: each layer kind's host column
    (``asap.cost.layer_ops.layer_host_ops``), forward again under full recompute; the head carries the ends."""
    full = (S.recompute == Recompute.FULL).astype(float)
    out = np.zeros((len(S), len(UNITS)))
    fwd, bwd = layer_host_ops(model, fw.host_ops, S, moe=False)
    out[:, Unit.DENSE] = out[:, Unit.MTP] = fwd * (1.0 + full) + bwd
    if model.moe is not None:
        fwd, bwd = layer_host_ops(model, fw.host_ops, S, moe=True)
        out[:, Unit.MOE] = out[:, Unit.MTP] = fwd * (1.0 + full) + bwd
    out[:, Unit.HEAD] = fw.host_ops.ends[0] + fw.host_ops.ends[1]
    return out


def tp_calls(model: ModelSpec, S: StrategyBatch) -> np.ndarray:
    """[n, len(Unit)] tensor-parallel collective calls per unit and micro-batch."""
    full = S.recompute == Recompute.FULL
    n_pass = np.where(full, 3.0, 2.0)
    tp = np.where(S.tp > 1, np.where(S.sp > 0, CALLS_PER_TP_PASS[1], CALLS_PER_TP_PASS[0]) * n_pass, 0.0)
    vocab = np.where(S.tp > 1, np.where(S.sp > 0, 2.0, 1.0), 0.0)  # the embedding's and the head's exchange
    out = np.zeros((len(S), len(UNITS)))
    out[:, Unit.DENSE] = out[:, Unit.MOE] = out[:, Unit.MTP] = tp
    out[:, Unit.EMBEDDING] = out[:, Unit.HEAD] = vocab
    return out


def unit_calls(model: ModelSpec, S: StrategyBatch) -> np.ndarray:
    """[n, len(Unit)] blocking collective calls per unit and micro-batch: TP's (``tp_calls``), EP's, CP's."""
    full = S.recompute == Recompute.FULL
    cp = np.where(S.cp > 1, 3.0 * (S.cp - 1), 0.0)
    ep = np.where(S.ep > 1, EP_CALLS_FORWARD * (1.0 + full) + EP_CALLS_BACKWARD, 0.0)
    out = tp_calls(model, S)
    out[:, Unit.DENSE] += cp
    out[:, Unit.MOE] += cp + (ep if model.moe is not None else 0.0)
    out[:, Unit.MTP] += cp + (ep if model.moe is not None else 0.0)
    return out


def unit_host_work_s(model: ModelSpec, cluster: Cluster, fw: Framework, S: StrategyBatch) -> np.ndarray:
    """[n, len(Unit)] host_u: the seconds the host spends on a unit's micro-batch (the module docstring)."""
    fam = cluster.accelerator.family_constants
    ops = unit_ops(model, fw, S)
    share = np.where(S.tp > 1, np.where(S.sp > 0, fw.host_ops.dtensor_share[1], fw.host_ops.dtensor_share[0]), 0.0)
    calls = unit_calls(model, S)
    # a stack whose TP runs on DTensor issues its TP collectives through functional collectives
    dtensor_calls = tp_calls(model, S) * (fw.host_ops.dtensor_share[0] > 0)
    return (ops * fam.host_op_s + share[:, None] * ops * fam.dtensor_op_s + calls * fam.sync_s
            + dtensor_calls * fam.dtensor_call_s)


def unit_host_s(model: ModelSpec, cluster: Cluster, fw: Framework, S: StrategyBatch, device_s: np.ndarray):
    """[n, len(Unit)] host seconds per unit and micro-batch that the step waits for; ``device_s`` the units'
    device time (compute and in-layer communication)."""
    fam = cluster.accelerator.family_constants
    host = unit_host_work_s(model, cluster, fw, S)
    hidden = np.maximum(0.0, host - device_s) if fam.async_host else host
    return hidden + moe_syncs(model, fw, S) * (D2H_SYNC_S + fam.host_op_s)


def moe_syncs(model: ModelSpec, fw: Framework, S: StrategyBatch) -> np.ndarray:
    """[n, len(Unit)] host-device syncs per unit and micro-batch: the dispatcher's token counts, once per MoE
    layer forward with ep > 1 (twice under full recompute)."""
    out = np.zeros((len(S), len(UNITS)))
    if model.moe is None or not fw.moe_host_sync:
        return out
    per = np.where(S.ep > 1, 1.0 + (S.recompute == Recompute.FULL), 0.0)
    out[:, Unit.MOE] = out[:, Unit.MTP] = per
    return out


def step_calls(S: StrategyBatch, fw: Framework, layers, tensors, m, has_experts) -> np.ndarray:
    """Blocking collective calls per step outside the layers: data parallelism, the pipeline, the loss."""
    zero = S.zero
    blocks = np.asarray(layers, dtype=float) + 1.0  # an FSDP unit per block and the root module
    grad_reduce = np.where(zero <= Zero.OPTIMIZER, 1.0 + has_experts, 0.0)
    gather1 = np.where(zero == Zero.OPTIMIZER, np.where(fw.zero1_gather_per_tensor, tensors, 1.0), 0.0)
    per_mb = np.select([zero == Zero.GRADIENTS, zero == Zero.PARAMETERS], [2.0, 3.0], 0.0) * blocks * m
    dp = np.where(S.dp * S.cp > 1, grad_reduce + gather1 + per_mb, 0.0)
    pp = np.where(S.pp > 1, PP_CALLS_PER_MICRO_BATCH_AND_CHUNK * S.vpp * m, 0.0)
    return dp + pp + LOSS_CALLS_PER_STEP


def step_host_s(cluster: Cluster, S: StrategyBatch, fw: Framework, layers, tensors, m, has_experts,
                optimizer_s) -> np.ndarray:
    """Host seconds per step outside the micro-batches that the step waits for."""
    fam = cluster.accelerator.family_constants
    stepped = np.where(S.zero == Zero.OPTIMIZER, tensors / np.maximum(S.dp * S.cp, 1), tensors)
    host = (stepped * fw.host_ops.optimizer_per_tensor * fam.host_op_s
            + step_calls(S, fw, layers, tensors, m, has_experts) * fam.sync_s)
    return np.maximum(0.0, host - optimizer_s) if fam.async_host else host
