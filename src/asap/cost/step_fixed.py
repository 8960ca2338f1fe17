"""The fixed costs of a training step outside its micro-batches: what every step pays whatever its batch, and
what weighs most where the batch per device is small (7-8B models on hundreds of devices, one micro-batch per
step: MLPerf's Llama 3.1 8B at 64 sequences on 512 GPUs runs ~0.09 s steps).

On the device's stream, between the last gradient reduction and the next step's first forward (the step
boundary, ``asap.cost.dp_overlap``), each as memory traffic or a collective's latency:

    optimizer = adam + zero_grads + grad_norm + fp8_amax + loss + weight_quantise

- adam: the optimizer over the states the rank steps (``optimizer_step_s``): ADAM_BYTES_PER_PARAM per
  parameter of the sharded share (dense / (dp cp) + experts / edp from ZeRO-1, else the stage), read and
  written by multi-tensor-apply kernels (TE / apex FusedAdam: a launch per chunk of tensors, the gradient
  norm's ``multi_tensor_l2norm`` and the clip's ``multi_tensor_scale`` over the same shard, the fp32 -> bf16
  copy of the updated master weights; ``OPTIMIZER_KERNELS`` launches in all).
- zero_grads: a stack that keeps its gradients in one contiguous buffer clears all of it every step before the
  first backward accumulates into it: Megatron-Core's ``DistributedDataParallel.zero_grad_buffer()`` ->
  ``_ParamAndGradBuffer.reset()``: ``self.grad_data.zero_()`` (megatron/core/distributed/
  param_and_grad_buffer.py), the stage's whole fp32 buffer under ZeRO-0/1 (the rank's shard under Megatron-
  FSDP): a memset of grad_bytes x elements (``Framework.grad_buffer_zeroed``). torch stacks free their
  gradients instead (``optimizer.zero_grad(set_to_none=True)``, torch's default since 2.0: nothing written);
  XLA allocates them inside the step's program.
- grad_norm: clipping needs the global gradient norm: each rank's sum of squares over its shard is all-reduced
  over every rank that holds a distinct part of the model (Megatron-Core ``get_grad_norm_fp32``:
  ``all_reduce(total_norm, group=grad_stats_parallel_group)``, the whole world under the distributed
  optimizer, megatron/core/optimizer/clip_grads.py; torch's ``clip_grad_norm_`` on DTensors the same through
  ``full_tensor()``; DeepSpeed ``get_global_norm``): one scalar, so the latency of a tree all-reduce over the
  devices (``asap.cost.collectives.small_all_reduce_s``), on the critical path between the last
  bucket's reduction and the optimizer.
- fp8_amax: with fp8 primary weights (``fp8_param``: Megatron-Core ``--fp8-param-gather``) each rank quantises
  its shard of the updated fp32 masters into the fp8 weights, and a tensor's scale needs its whole amax: the
  shards' partial amaxes are packed and all-reduced (MAX) over the data-parallel group before the cast
  (Transformer Engine ``_cast_master_weights_to_fp8_current_scaling``, transformer_engine/pytorch/tensor/
  utils.py): one more latency-bound collective over dp x cp.
- loss: a stack that averages the step's loss over the data-parallel group every step (Megatron-LM's
  ``train_step`` all-reduces the summed loss and token count over dp x cp, ``Framework.loss_all_reduce``): two
  fp32 numbers, a small all-reduce's latency. Its host wait is ``asap.cost.host``'s (``LOSS_CALLS_PER_STEP``).
- weight_quantise: an fp8/fp4 run quantises every linear weight once per step, after the optimizer has updated
  it, and reuses the copies over the step's micro-batches (Transformer Engine's ``is_first_microbatch``
  caching; the activations' casts are each GEMM's own, ``asap.cost.roofline.cast_bytes_per_element``): the
  bf16 weight read (2 B), for NVFP4 once more for its tensor amax (the fp32 global scale), and a rowwise and
  a columnwise copy written (the fprop GEMM's W and the dgrad GEMM's W^T; 2 x 1 B in fp8, 2 x 0.5625 B in NVFP4
  with its 2D 16x16 weight blocks), so 4 B per weight in fp8 and 5.125 B in NVFP4. With fp8 primary weights
  (``fp8_param``) the rowwise copy is the parameter itself (quantised on the optimizer's shard, in ``adam``'s
  bytes) and only the columnwise copy is rebuilt after the gather: 1 B read + 1 B written. The vocabulary
  matrices (embedding and LM head) stay in bf16 (Megatron-Core builds them outside Transformer Engine's
  quantised linears).
"""

from __future__ import annotations

import numpy as np

from asap.cost.batch import StrategyBatch
from asap.cost.collectives import small_all_reduce_s
from asap.cost.device_memory import dense_and_expert_shards
from asap.cost.offload import offloaded_optimizer_s
from asap.cost.roofline import BYTES, LOW_PRECISIONS, elementwise_time_s
from asap.spec.framework import Framework
from asap.spec.hardware import Cluster
from asap.spec.placement import Placement
from asap.spec.strategy import Zero

ADAM_BYTES_PER_PARAM = 32.0  # read master, m, v, grad (16 B) + write master, m, v (12 B) + bf16 weight (2 B) + norm (2 B)
OPTIMIZER_KERNELS = 20  # the fused multi-tensor Adam launches a handful of kernels per parameter group
NORM_BYTES = 4.0  # the fp32 partial sum of squares (or amax) a rank contributes per reduced scalar


def optimizer_step_s(cluster: Cluster, S: StrategyBatch, dense_params, expert_params):
    """The optimizer: Adam streams ADAM_BYTES_PER_PARAM per state it holds, states = dense / shard + expert / edp
    (sharded from ZeRO-1, else every parameter of the stage), as memory-bound elementwise kernels; with
    optimizer offload the host steps the device's shard, its transfers overlapped with the CPU's Adam
    (``asap.cost.offload.offloaded_optimizer_s``)."""
    shard_d, edp = dense_and_expert_shards(S)
    sharded = S.zero >= Zero.OPTIMIZER
    states = dense_params / np.where(sharded, shard_d, 1) + expert_params / np.where(sharded, edp, 1)
    optimizer = elementwise_time_s(cluster.accelerator, ADAM_BYTES_PER_PARAM * states, kernels=OPTIMIZER_KERNELS)
    return np.where(S.offload_opt > 0, offloaded_optimizer_s(cluster.accelerator, states), optimizer)


def grad_buffer_zero_s(cluster: Cluster, S: StrategyBatch, fw: Framework, stage_params, grad_bytes):
    """The memset of the stack's gradient buffer each step (module docstring): ``grad_bytes`` per element of
    the stage, of the rank's 1/(dp cp) shard where the stack shards its gradients (ZeRO-2/3); 0 for a stack
    that frees its gradients. E.g. Llama 3.1 8B at tp 2 on a B200: 4.0e9 elements x 4 B = 16 GB at 0.86 of
    8 TB/s, 2.3 ms."""
    if not fw.grad_buffer_zeroed:
        return np.zeros(len(S))
    shard, _ = dense_and_expert_shards(S)
    elements = np.asarray(stage_params, dtype=float) / np.where(S.zero >= Zero.GRADIENTS, np.maximum(shard, 1), 1)
    return elementwise_time_s(cluster.accelerator, np.asarray(grad_bytes) * elements)


def grad_norm_s(cluster: Cluster, S: StrategyBatch):
    """The gradient norm's all-reduce of one scalar over all devices (module docstring): its latency."""
    world = np.asarray(S.dp * S.cp * S.tp * S.pp, dtype=float)
    return np.where(world > 1, small_all_reduce_s(cluster, NORM_BYTES, world, 1), 0.0)


def fp8_param_amax_s(cluster: Cluster, S: StrategyBatch, tensors_on_stage):
    """The packed amax all-reduce of fp8 primary weights (module docstring) over the dp x cp shard group, one
    fp32 per weight tensor of the stage; 0 without ``fp8_param`` or a sharded optimizer."""
    group, stride = Placement.of(S).group("dp_shard")
    packed = NORM_BYTES * np.maximum(np.asarray(tensors_on_stage, dtype=float), 1.0)
    on = (S.fp8_param > 0) & (S.zero >= Zero.OPTIMIZER)
    return np.where(on, small_all_reduce_s(cluster, packed, group, stride), 0.0)


def loss_all_reduce_s(cluster: Cluster, S: StrategyBatch, fw: Framework):
    """The step's loss (sum and token count, 2 fp32) all-reduced over dp x cp where the stack does it every
    step (module docstring); 0 otherwise or on one rank."""
    group, stride = Placement.of(S).group("dp_cp")
    on = fw.loss_all_reduce & (np.asarray(group) > 1)
    return np.where(on, small_all_reduce_s(cluster, 2 * NORM_BYTES, group, stride), 0.0)


def weight_quantise_s(cluster: Cluster, S: StrategyBatch, precision: str, linear_params):
    """The once-per-step quantisation of the stage's ``linear_params`` linear weights in an fp8/fp4 run (module
    docstring): (2 + 2 BYTES[p]) B per weight (+ 2 B for NVFP4's amax pass), 2 BYTES[p] with fp8 primary
    weights; 0 in 16/32-bit runs. Llama 3.1 8B's 6.98e9 linear weights in NVFP4 on a GB200: 35.8 GB, 5.2 ms."""
    if precision not in LOW_PRECISIONS:
        return np.zeros(len(S))
    fresh = 2.0 + 2.0 * BYTES[precision] + (2.0 if precision == "nvfp4" else 0.0)
    per_weight = np.where(S.fp8_param > 0, 2.0 * BYTES[precision], fresh)
    return elementwise_time_s(cluster.accelerator, per_weight * np.maximum(np.asarray(linear_params, dtype=float), 0.0))


def step_fixed_s(cluster: Cluster, S: StrategyBatch, fw: Framework, dense_params, expert_params, grad_bytes,
                 tensors_on_stage, precision: str = "bf16", vocab_params=0.0) -> dict[str, np.ndarray]:
    """The step's fixed terms by name (module docstring); their sum is the step's ``optimizer`` term.
    ``vocab_params``: the bf16 vocabulary matrices among the stage's dense parameters."""
    return {"adam": optimizer_step_s(cluster, S, dense_params, expert_params),
            "zero_grads": grad_buffer_zero_s(cluster, S, fw, np.asarray(dense_params) + expert_params, grad_bytes),
            "grad_norm": grad_norm_s(cluster, S),
            "fp8_amax": fp8_param_amax_s(cluster, S, tensors_on_stage),
            "loss": loss_all_reduce_s(cluster, S, fw),
            "weight_quantise": weight_quantise_s(cluster, S, precision,
                                                 np.asarray(dense_params) + expert_params - vocab_params)}
