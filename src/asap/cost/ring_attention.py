"""Ring attention (context parallelism, ``cp_comm=p2p``) step by step, as the stacks run it.

Both ring implementations the stacks call split each sequence into 2 cp chunks and give rank r chunks r and
2cp-1-r (the causal load balance: Megatron-Core ``get_batch_on_this_cp_rank``; torch's ``_HeadTailLoadBalancer``,
torchtitan ``context_parallel_load_balancer = "headtail"`` by default; MaxText ``context_parallel_load_balance:
true`` in configs/base.yml does the same for its all-gather), so every rank does the same causal work, and run cp
steps, one attention kernel call each, on the K,V chunk held at that step (Transformer Engine
``AttnFuncWithCPAndKVP2P``, transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py; torch
``_templated_ring_attention``, torch/distributed/tensor/experimental/_context_parallel/_attention.py). With c =
s / (2 cp) tokens per half chunk, the steps of rank r are:

    step 0 ("diagonal"): both local query halves against both local K,V halves, causal: 2 c^2 pairs;
    step i <= r ("lower-triangle"): both query halves (2c) against the first K,V half (c), unmasked: 2 c^2;
    step i > r ("upper-triangle"): the second query half (c) against both K,V halves (2c), unmasked: 2 c^2.

Every step has 1/cp of the rank's work; the slowest rank (r = cp-1, every step a lower triangle) calls the
kernel on c keys per query each time, so the kernel's rate is the one at c keys
(``attention_kv_len``), and it pays cp launches per pass.

What travels and what hides it (``ring_exposed_s``; x = one K,V chunk's send, f and b one pass's forward and
backward kernel time, so one step computes f / cp or b / cp):

- Transformer Engine: forward, step i < cp-1 sends the chunk it holds while it computes on it (two CUDA
  streams; the next step waits on the receive): (cp-1) max(0, x - f/cp). Backward, step 0 sends K,V, steps 1 to
  cp-2 send K,V and the partial dK,dV (2x, ``p2p_comm_buffers[i % 2]`` holds both), the last step dK,dV alone,
  each under its step's backward: 2 max(0, x - b/cp) + (cp-2) max(0, 2x - b/cp). The partial outputs merge in
  the activation dtype after the loop (``flash_attn_fwd_out_correction``: read the step's output, read and write
  the output: 6 B per element per step), dQ, dK, dV accumulate per step (``dq.add_(dq_)`` and the same for dk,
  dv: 6 B per element).
- torch (torchtitan, asap's reference trainer; ``_cp_options.rotate_method`` default ``ALL_GATHER``): K,V are
  all-gathered once per pass, issued at step 0 and waited on at step 1, so the gather hides behind the diagonal
  step only: max(0, g - f/cp) forward, again in backward; dK,dV pass around the ring in fp32
  (``convert_to_f32``: accumulators ``torch.float32``, ``_AllToAllRotater``), each step's partial sent during
  the next step and the last received after the loop: (cp-1) max(0, y - b/cp) + y with y = 2x. The outputs
  merge in fp32 (``_SDPAMerger``: read the step's output, read and write the fp32 output: 10 B per element per
  step), the gradients accumulate in fp32 (10 B).

The merges are memory-bound kernels beside the attention kernel (``merge_bytes``: a term the single-kernel
attention of cp = 1 does not pay).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.spec.framework import CpRing
from asap.spec.knobs import CpComm


@dataclass(frozen=True)
class RingAlgorithm:
    """How one stack's ring attention moves K,V and merges the steps (the module docstring)."""

    kv_allgather: bool  # K,V all-gathered once per pass (torch) instead of passed chunk by chunk (TE)
    dkv_bytes: float  # bytes per element of the dK,dV partials on the ring (TE: the activation dtype)
    merge_bytes: float  # HBM bytes per output element per forward step of the partial-output merge
    grad_bytes: float  # HBM bytes per gradient element per backward step of the dQ, dK, dV accumulation


RING_ALGORITHMS = {
    CpRing.TE: RingAlgorithm(kv_allgather=False, dkv_bytes=2.0, merge_bytes=6.0, grad_bytes=6.0),
    CpRing.TORCH: RingAlgorithm(kv_allgather=True, dkv_bytes=4.0, merge_bytes=10.0, grad_bytes=10.0),
}


def ring_exposed_s(ring: CpRing, cp, send_s, gather_s, fwd_s, bwd_s):
    """(forward, backward) exposed seconds of one layer's ring per micro-batch: ``send_s`` one K,V chunk's p2p
    send (activation dtype), ``gather_s`` the all-gather of K,V over the cp group, ``fwd_s`` / ``bwd_s`` the
    attention kernel's forward / backward time of the whole pass (the module docstring's formulas; 0 where
    cp = 1). E.g. TE, cp 4, x = 1, f = 2: forward 3 max(0, 1 - 0.5) = 1.5 (the aggregate max(0, 3 - 2) = 1
    missed the last step, which has nothing to send under it)."""
    cp = np.asarray(cp, dtype=float)
    on = cp > 1
    n = np.maximum(cp, 1.0)
    fwd_step, bwd_step = fwd_s / n, bwd_s / n
    algo = RING_ALGORITHMS[ring]
    if algo.kv_allgather:
        dkv = send_s * algo.dkv_bytes / 2.0
        fwd = np.maximum(0.0, gather_s - fwd_step)
        bwd = np.maximum(0.0, gather_s - bwd_step) + (n - 1) * np.maximum(0.0, dkv - bwd_step) + dkv
    else:
        fwd = (n - 1) * np.maximum(0.0, send_s - fwd_step)
        both = send_s * (1.0 + algo.dkv_bytes / 2.0)  # K,V and the partial dK,dV in one step's messages
        bwd = 2 * np.maximum(0.0, send_s - bwd_step) + np.maximum(n - 2, 0.0) * np.maximum(0.0, both - bwd_step)
    return np.where(on, fwd, 0.0), np.where(on, bwd, 0.0)


def ring_traffic_s(ring: CpRing, cp, send_s, gather_s):
    """(forward, backward) seconds of the ring's traffic, hidden or not (the breakdown's total): TE sends cp-1
    chunks forward and 2 (cp-1) chunk-equivalents backward; torch gathers once a pass and passes cp fp32 dK,dV
    partials backward."""
    cp = np.asarray(cp, dtype=float)
    on = cp > 1
    algo = RING_ALGORITHMS[ring]
    if algo.kv_allgather:
        fwd, bwd = gather_s, gather_s + cp * send_s * algo.dkv_bytes / 2.0
    else:
        fwd, bwd = (cp - 1) * send_s, 2 * (cp - 1) * send_s
    return np.where(on, fwd, 0.0), np.where(on, bwd, 0.0)


def merge_bytes(ring: CpRing, cp, tokens, q_width, o_width, kv_width):
    """HBM bytes of one layer's ring merges per micro-batch, (forward, backward), on the slowest rank (every step
    on its full ``tokens``): cp partial outputs of ``o_width`` per token merged at ``merge_bytes`` each; cp
    accumulations of dQ (``q_width``) and dK,dV (``kv_width``) at ``grad_bytes``. Widths per device (heads
    over tp). E.g. TE, cp 2, 4096 tokens, o 2048: 6 x 2 x 4096 x 2048 = 100.7 MB forward."""
    cp = np.asarray(cp, dtype=float)
    algo = RING_ALGORITHMS[ring]
    fwd = algo.merge_bytes * cp * tokens * o_width
    bwd = algo.grad_bytes * cp * tokens * (q_width + kv_width)
    on = cp > 1
    return np.where(on, fwd, 0.0), np.where(on, bwd, 0.0)


def ring_ranks(S):
    """The ranks a ring passes K,V around, per row: cp under p2p, cp / cp_a2a under a2a+p2p (the outer p2p group
    of the hierarchy), 1 where no ring runs (cp = 1, a2a, allgather)."""
    cp = np.asarray(S.cp, dtype=float)
    ranks = np.select([S.cp_comm == CpComm.P2P.code, S.cp_comm == CpComm.A2A_P2P.code],
                      [cp, cp / np.maximum(np.asarray(S.cp_a2a, dtype=float), 1.0)], 1.0)
    return np.where(cp > 1, ranks, 1.0)
