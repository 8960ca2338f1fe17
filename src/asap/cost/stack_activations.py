"""Activation terms that depend on how a stack allocates them (issue 46.1), per device and micro-batch, vectorized
over a batch of strategies: what torchtitan's op-level selective checkpointing keeps, and the buffers context
parallelism holds while one layer's attention runs.

torchtitan's op SAC (``torchtitan/distributed/activation_checkpoint.py``, ``_get_custom_policy``; the save list
``_op_sac_save_list`` in ``models/llama3/infra/parallelize.py``, torchtitan 0.2.2): every transformer block is a
non-reentrant checkpoint, so it stores its input, and the outputs of the ops its policy marks MUST_SAVE: those on
the save list (``aten.mm``, the SDPA kernels, ``reduce_scatter_tensor``, ``aten.max``) except every second
``aten.mm`` of the block (the count restarts per block). The block's linears run in the order wq, wk, wv, wo, w1,
w3, w2 (``Attention.forward``: ``self.wq(x), self.wk(x), self.wv(x)``; ``FeedForward.forward``:
``self.w2(F.silu(self.w1(x)) * self.w3(x))``), so the odd ones are saved: Q, V, w1's output and w2's (without a
gate: wq, wv, w1). Per micro-batch of T tokens on a rank (T_sp with sequence parallelism):
    input T_sp h ab + Q T nh d / tp ab + V T kv d / tp ab + SDPA out T nh d / tp ab + its log-sum-exp T nh / tp 4
    + w1 T ffn / tp ab + w2 T h ab (the row-parallel partial sums) + the reduce-scatters' outputs 2 T_sp h ab (tp > 1)
Under fp8 (torchao's float8 linears) the policy's dispatch mode sees the same ``aten.mm`` on the
``Float8TrainingTensor`` operands (a mode runs before the subclass's ``__torch_dispatch__``, which calls
``_scaled_mm``), so the same high-precision outputs are saved. An MoE or MLA layer keeps the generic selective
figure.

Context parallelism's buffers while one layer's attention runs (beside the saved Q, K, V, out and softmax
statistics of its own T = b s / cp tokens, which the layer's stored figure counts), with kv_chunk = T w_kv / tp ab:
- p2p on Transformer Engine (``CpRing.TE``, ``AttnFuncWithCPAndKVP2P``): the forward concatenates the local K,V
  into the ring's first buffer and receives the next chunk into another (``p2p_comm_buffers[i + 1] =
  torch.empty_like(...)``); the backward allocates two buffers of (K,V | dK,dV) each (``torch.empty((2,
  *kv.shape))``, double-buffered): 4 kv_chunk at the backward, the larger.
- p2p on torch's context_parallel (``CpRing.TORCH``, torchtitan; ``torch/distributed/tensor/experimental/
  _attention.py``): its backward all-gathers the whole sequence's K,V (``_AllGatherRotater``) and rings dK,dV in
  fp32 (``grad_key``/``grad_value`` ``zeros_like(..., dtype=float32)``, their concatenation ``next_grad_kv`` and the
  rotater's receive buffer): cp kv_chunk + 3 kv_chunk 4 / ab.
- a2a+p2p (Megatron-Core hierarchical): Ulysses' set (below) and TE's ring buffers over the outer group, whose
  chunk after the inner all-to-all holds the same bytes: T (w_q + w_kv) / tp ab + 4 kv_chunk.
- allgather (TE ``AttnFuncWithCPAndKVAllGather``, torch's ``_AllGatherRotater``): the K,V of the whole sequence,
  and in the backward their gradients before the reduce-scatter: 2 cp kv_chunk.
- a2a (DeepSpeed-Ulysses, TE ``AttnFuncWithCPAndQKVOA2A``): the kernel's inputs after the all-to-all hold the same
  bytes as the local Q, K, V (counted); the backward's dQ, dK, dV in the head layout beside their exchanged copies
  add one set: T (w_q + w_kv) / tp ab.
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.communication import attention_widths
from asap.cost.layer_ops import kv_heads_per_device
from asap.cost.roofline import act_bytes
from asap.spec.framework import CpRing
from asap.spec.knobs import CpComm
from asap.spec.model import ModelSpec
from asap.spec.train import TrainSpec

# the GEMM outputs torchtitan's op SAC keeps in a block (1-based positions of the saved, odd, aten.mm calls):
# gated MLP wq wk wv wo w1 w3 w2 -> wq, wv, w1, w2; without a gate wq wk wv wo w1 w2 -> wq, wv, w1
OP_SAC_SAVED_GEMMS = {True: ("wq", "wv", "w1", "w2"), False: ("wq", "wv", "w1")}


def op_sac_kept_bytes(model: ModelSpec, train: TrainSpec, S: StrategyBatch) -> np.ndarray:
    """[N] what one dense block keeps per micro-batch under torchtitan's op-level SAC (module docstring)."""
    ab = act_bytes(train.precision)
    tp = S.tp.astype(float)
    T = S.mbs * train.seq_len / S.cp
    T_sp = T / np.where(S.sp > 0, tp, 1.0)
    h, d, nh = float(model.hidden_size), float(model.head_dim), float(model.num_attention_heads)
    outputs = {"wq": T * nh * d / tp, "wv": T * kv_heads_per_device(model, tp) * d,
               "w1": T * model.ffn_hidden_size / tp, "w2": T * h}
    gemms = sum(outputs[g] for g in OP_SAC_SAVED_GEMMS[model.gated])
    sdpa = T * nh * d / tp * ab + T * nh / tp * 4.0
    reduce_scattered = np.where(tp > 1, 2.0 * T_sp * h, 0.0)
    return T_sp * h * ab + gemms * ab + sdpa + reduce_scattered * ab


def cp_buffer_bytes(model: ModelSpec, train: TrainSpec, S: StrategyBatch, ring: CpRing = CpRing.TE) -> np.ndarray:
    """[N] the bytes context parallelism's exchange holds beside one layer's attention (module docstring; ``ring``
    the stack's ring attention, ``Framework.cp_ring``); 0 without CP."""
    ab = act_bytes(train.precision)
    tp = S.tp.astype(float)
    T = S.mbs * train.seq_len / S.cp
    q_w, kv_w, _ = attention_widths(model)
    kv_chunk = T * kv_w / tp * ab
    ulysses = T * (q_w + kv_w) / tp * ab
    p2p = S.cp * kv_chunk + 3.0 * kv_chunk * 4.0 / ab if ring == CpRing.TORCH else 4.0 * kv_chunk
    out = np.select([S.cp_comm == CpComm.P2P.code, S.cp_comm == CpComm.ALLGATHER.code,
                     S.cp_comm == CpComm.A2A_P2P.code], [p2p, 2.0 * S.cp * kv_chunk, ulysses + 4.0 * kv_chunk],
                    ulysses)
    return np.where(S.cp > 1, out, 0.0)
