"""Peak device memory: model states, activations of the in-flight micro-batches, and an allowance.

Model states per parameter under mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, sec. 3.1, K = 12):
half-precision weights 2 B, fp32 gradients 4 B (Megatron accumulates fp32 main grads for bf16 runs; FSDP2 in
torchtitan reduces in fp32), fp32 master weights + Adam m and v 12 B. ZeRO-1 shards the 12 B over the data-
parallel group d, ZeRO-2 also the gradients, ZeRO-3 everything:
    zero0: 2 + 4 + 12        zero1: 2 + 4 + 12/d        zero2: 2 + (4 + 12)/d        zero3: (2 + 4 + 12)/d
d is dp*cp for dense parameters (context-parallel ranks hold the same weights) and the expert-data-parallel
size edp for expert parameters (Megatron-Core parallel folding); under hybrid sharding (``dp_replicate`` = r)
the shard group is a replica's, dp/r * cp and edp/r (torchtitan FSDP2 HSDP shards over ``dp_shard``,
Megatron-Core's distributed optimizer over its instance's ``intra_partial_data_parallel_group``). fp8 runs keep a 1 B fp8 copy of each weight.

Activations per layer per micro-batch (Korthikanti et al. 2022, "Reducing Activation Recomputation", sec. 4,
eq. 1-2: 34 s b h + 5 a s^2 b bytes for GPT with 2-byte activations), generalised term by term:
    replicated unless sequence-parallel: 2 layer-norm inputs, QKV input, MLP input (ab h each) -> 4 ab h
                     (Korthikanti's two 1-byte dropout masks are gone: modern LLM pretraining runs without
                     dropout, as the Llama, Qwen, DeepSeek and Mixtral configs set it to 0)
    tensor-parallel: Q, K, V and the attention output -> ab (qkv_width + out_width) / tp
                     MLP: first linear output(s) and the second linear's input -> ab (1|2) ffn + ab ffn / tp
    fp8 (Transformer Engine): the inputs of fp8 GEMMs (QKV, MLP, out-projection and fc2 inputs) are 1 B.
    attention scores: 0, because flash attention stores only the output and the log-sum-exp
For GPT (gelu, ffn = 4h, MHA) this is (8 + 24/tp) s b h: Korthikanti's eq. 2 without the attention-score
term (5as/h) and without dropout masks (2).
Selective recompute (Megatron-Core --recompute-modules core_attn/layernorm/moe_act; torchtitan op-level SAC)
keeps the GEMM outputs (Q, K, V, the attention output, fc1 outputs) and the layer and mid-layer inputs, and
recomputes norms, activation functions and the attention kernel: 20 s b h / tp for GPT instead of 32.
Full recompute keeps only each layer's input (2 s b h / tp with SP) plus one layer's activations while it
is recomputed; MoE layers store the routed token copies, their expert activations, and the router logits.

In-flight micro-batches (Narayanan 2021 sec. 2.2; Korthikanti sec. 4.2.3): stage d of 1F1B keeps min(m, pp - d)
micro-batches of its layers; interleaved 1F1B keeps ((pp-d-1) 2 + (v-1) pp + 1) / v, which on the first stage is
pp (1 + (pp-1)/(pp v)); GPipe all m. Every device of the pipeline is priced with the units the layout puts on it
(``asap.cost.units``: one device per distinct unit count, the one with most micro-batches in flight; the last
also holds the fp32 logits of one micro-batch); the fullest one is the peak.

Allowance: the allocator's reserve beyond the live tensors (``asap.cost.allocator``, from PyTorch's caching
allocator's rules: one fenced segment of the step's largest transient tensor, the fp32 logits, a gathered or
reduce-scatter block, a layer's largest activation, where the stack frees its gradients every step; two 20 MiB
pages with expandable segments (torchtitan) or a grad buffer allocated once (Megatron-Core); nothing under XLA's
static plan or on a CPU), plus a fixed 1 GiB for the CUDA/driver context, NCCL buffers and GEMM workspaces
(0.5 GiB for a TPU runtime, 0.355 GiB on CPU: torch's resident set, measured). A strategy fits when the peak is
at most ``usable_hbm_gb``.

Which figure is which: ``peak_memory_gb`` is the device memory the job holds at its peak, the caching
allocator's reserve plus the context (what ``torch.cuda.max_memory_reserved`` plus the context, and
nvidia-smi, show; what has to fit in HBM); ``memory_gb["allocated"]`` is the tensors alone (what
``torch.cuda.max_memory_allocated`` reports, Megatron's "max allocated"): the peak less the allowance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asap.cost.allocator import allocator_on, layer_tensor_bytes, logits_tensor_bytes, reserve_bytes
from asap.cost.batch import StrategyBatch
from asap.cost.ep_buffers import ep_comm_buffer_bytes
from asap.cost.offload import offloaded_activations
from asap.cost.roofline import BYTES, LOW_PRECISIONS, act_bytes
from asap.cost.stack_activations import cp_buffer_bytes
from asap.spec.framework import Allocator
from asap.spec.hardware import Accelerator
from asap.spec.model import ModelSpec
from asap.spec.placement import Placement
from asap.spec.remat import is_maxtext
from asap.spec.strategy import Schedule, Zero
from asap.spec.train import TrainSpec

GB = float(2**30)  # memory is reported in GiB, as nvidia-smi and torch.cuda do; "80 GB" HBM is 80 GiB
# the runtime's own share of the device: a CPU process's resident set after importing torch and joining a gloo
# group, before its tensors (benchmarks/memory_cpu.py: the tiny-dense model's peak RSS, 0.355 GiB with a few MB of
# tensors, torch 2.13 on this project's CPU machine, the workers forked by ``asap.runners.torch.elastic``; 0.398
# GiB when each worker was a fresh interpreter)
FIXED_ALLOWANCE_GB = {"cpu": 0.355, "tpu": 0.5}
DEFAULT_FIXED_ALLOWANCE_GB = 1.0


def usable_hbm_gb(acc: Accelerator, train: TrainSpec | None = None) -> float:
    """The peak a strategy may reach and still fit, GiB: the device memory the driver reports
    (``Accelerator.usable_hbm_gb``: nvidia-smi's total, 79.65 GiB on an "80 GB" H100) less the job's
    ``--memory-margin``. The runtime's own share (CUDA context, NCCL buffers, workspaces; the TPU runtime's
    reservation) is in the peak already, as the stack's fixed allowance (``fixed_allowance_bytes``)."""
    margin = train.memory_margin_gb if train is not None else 0.0
    return acc.usable_hbm_gb - margin


# The headroom a plan keeps below the device memory by default (``asap plan`` without --memory-margin): the
# share of the device the stacks' users leave free for what no static count sees, on top of the allocator
# reserve and the runtime's 1 GiB already in the peak: the PyTorch caching allocator's "reserved but
# unallocated" blocks grow with the step's churn (PyTorch's own OOM report, e.g. 1.83 GiB reserved but
# unallocated beside 75.3 GiB allocated on a 79.2 GiB H100, vllm-project/compressed-tensors#587, which then
# reserves 5% of the model's memory), NCCL grows its buffers per communicator and channel as new groups form
# (nccl-tests keeps 1 GiB and found it too small, NVIDIA/nccl-tests#220), and vLLM caps its own use at
# gpu_memory_utilization = 0.9 by default for the same allocator fragmentation (vllm-project/vllm#153). 8%
# (6.4 GiB of an 80 GB part) is the "usable 92%" that ``asap.cost.classes`` names: a plan stays under it.
# ``estimate`` and ``validate`` judge ``fits`` against the whole device memory (the published runs trained
# there) and report ``fits_with_headroom`` beside it.
HEADROOM_SHARE = 0.08


def default_headroom_gb(acc: Accelerator) -> float:
    """GiB per device a plan keeps free by default (``HEADROOM_SHARE`` of the reported device memory)."""
    return HEADROOM_SHARE * acc.usable_hbm_gb


def fits_with_headroom(peak_gb, acc: Accelerator):
    """Whether a peak stays under the device memory less the default headroom (what a plan admits)."""
    return np.asarray(peak_gb) <= acc.usable_hbm_gb - default_headroom_gb(acc)


HOST_MEM_USABLE = 0.8  # the share of a device's host memory offload may pin (the OS, data loaders keep the rest)


def fits_memory(mem: MemoryBreakdown, acc: Accelerator, train: TrainSpec | None = None):
    """Whether each row fits: the device peak within ``usable_hbm_gb`` and what host offload keeps within the
    device's share of host memory (``Accelerator.host_mem_capacity_gb`` at ``HOST_MEM_USABLE``)."""
    return (mem.peak_gb <= usable_hbm_gb(acc, train)) & (mem.host_gb <= HOST_MEM_USABLE * acc.host_mem_capacity_gb)


def fixed_allowance_bytes(acc: Accelerator) -> float:
    return FIXED_ALLOWANCE_GB.get(acc.family, DEFAULT_FIXED_ALLOWANCE_GB) * GB


# estimate --explain's words for the parts of a memory term (``Estimate.memory_detail_gb``)
MEMORY_DETAIL_WORDS = {"weights_gathered": "gathered by FSDP / ZeRO-3 (the blocks computing and prefetched)",
                       "grads_reduce_buffers": "FSDP2's gradient reduction buffers",
                       "activations_logits": "the logits of one micro-batch (the loss)",
                       "activations_cp_buffers": "context parallelism's K/V exchange buffers (one layer's attention)",
                       "allowance_allocator_reserve": "the allocator's reserve (a fenced segment of the largest "
                                                      "transient; 40 MiB at most with expandable segments)",
                       "allowance_largest_transient": "(for reference, not in the allowance: that largest "
                                                      "transient tensor)",
                       "allowance_tp_comm_buffers": "Transformer Engine's TP-overlap userbuffers (12 of mbs x "
                                                    "seq / cp tokens x hidden; cuBLAS workspaces)",
                       "allowance_ep_comm_buffers": "DeepEP's NVLink and RDMA buffers (the dedup dispatcher's, "
                                                    "sized by its configs for the expert group)"}


@dataclass
class MemoryBreakdown:
    weights_gb: np.ndarray  # half-precision weights (and fp8 copies, and ZeRO-3's gathered layers)
    grads_gb: np.ndarray
    optimizer_gb: np.ndarray  # master weights + Adam moments
    activations_gb: np.ndarray
    allowance_gb: np.ndarray
    peak_gb: np.ndarray
    host_gb: np.ndarray | float = 0.0  # what host offload keeps in host memory per device (not in peak_gb)
    # parts of the terms above, listed by ``estimate --explain`` (``memory_detail_gb``): the weights FSDP/ZeRO-3
    # holds gathered (in weights_gb), FSDP2's gradient reduction buffers (in grads_gb), the loss's logits of one
    # micro-batch where the head sits (in activations_gb when they are the larger transient)
    gathered_gb: np.ndarray | float = 0.0
    reduce_buffers_gb: np.ndarray | float = 0.0
    logits_gb: np.ndarray | float = 0.0
    cp_buffers_gb: np.ndarray | float = 0.0  # context parallelism's exchange buffers (in activations_gb, where
    # the layer's transient outweighs the logits)
    reserve_gb: np.ndarray | float = 0.0  # the allocator's reserve (in allowance_gb; the rest is the runtime's)
    largest_transient_gb: np.ndarray | float = 0.0  # the tensor the reserve is a segment of (not in the peak)
    tp_comm_buffers_gb: np.ndarray | float = 0.0  # Transformer Engine's userbuffers (in allowance_gb)
    ep_comm_buffers_gb: np.ndarray | float = 0.0  # DeepEP's buffers (in allowance_gb; ``asap.cost.ep_buffers``)

    def detail_gb(self) -> dict:
        """The parts ``estimate --explain`` lists (``Estimate.memory_detail_gb``), keyed term_part."""
        return {"weights_gathered": self.gathered_gb, "grads_reduce_buffers": self.reduce_buffers_gb,
                "activations_logits": self.logits_gb, "activations_cp_buffers": self.cp_buffers_gb,
                "allowance_allocator_reserve": self.reserve_gb,
                "allowance_largest_transient": self.largest_transient_gb,
                "allowance_tp_comm_buffers": self.tp_comm_buffers_gb,
                "allowance_ep_comm_buffers": self.ep_comm_buffers_gb}

    @classmethod
    def concatenate(cls, parts: list["MemoryBreakdown"]) -> "MemoryBreakdown":
        """Join breakdowns of consecutive chunks of one batch."""
        out = {}
        for name in cls.__dataclass_fields__:
            cols = [np.broadcast_to(getattr(p, name), np.shape(p.peak_gb)) for p in parts]
            out[name] = np.concatenate(cols)
        return cls(**out)


def quantised_weight_copies(framework, acc: Accelerator, precision: str) -> float:
    """How many quantised copies of each weight a low-precision run holds (``state_bytes_per_param``): Transformer
    Engine (``Framework.te_columnwise_weights``) quantises a weight rowwise for the forward GEMM and columnwise for
    the backward's data-gradient GEMM, and keeps both from the forward to the weight's backward (cached across
    micro-batches as the Linear's fp8 workspace, ``is_first_microbatch``): on Hopper, whose fp8 tensor cores take
    only the TN layout, the columnwise copy is the fp8 transpose (``Float8Tensor._transpose``); NVFP4 and MXFP4
    scale along the other dimension for it on every part. Blackwell's fp8 GEMMs take any layout, so TE's tensor-
    scaled fp8 keeps one copy there. 1 elsewhere (and for stacks that quantise on the fly)."""
    if framework is None or not framework.te_columnwise_weights or precision not in LOW_PRECISIONS:
        return 1.0
    return 2.0 if precision != "fp8" or acc.family == "hopper" else 1.0


def state_bytes_per_param(precision: str, zero, shard, grad_bytes=4.0, fp8_param=0, offload_opt=0,
                          half_weights=True, quant_copies=1.0):
    """Bytes per parameter for weights, gradients (``grad_bytes``: the stack's ``Framework.grad_bytes``) and
    optimizer states under ZeRO stage ``zero``. ``fp8_param``: the compute weight exists only in fp8 (1 B;
    Megatron-Core's --fp8-param-gather keeps no bf16 copy, the fp32 master stays in the optimizer);
    ``offload_opt``: the optimizer states live in host memory (0 B on the device); ``half_weights`` False: the
    stack keeps no 16-bit copy of the weights beside the fp32 master, casting for compute on the fly
    (``Framework.half_weight_copy``: FSDP2, autocast, MaxText's fp32 ``weight_dtype``), so only the master
    (in the optimizer's 12 B) is held (a bool, or one per row); ``quant_copies``: quantised copies of each weight
    (``quantised_weight_copies``: Transformer Engine's rowwise and columnwise)."""
    w: float | np.ndarray = 4.0 if precision == "fp32" else np.where(half_weights, 2.0, 0.0)
    g = grad_bytes
    o = np.where(np.asarray(offload_opt) > 0, 0.0, 8.0 if precision == "fp32" else 12.0)
    if precision in LOW_PRECISIONS:  # bf16 weights and their quantised copy (fp8: 1 B, fp4: 0.5 B + scales)
        q = quant_copies * BYTES[precision]
        w = np.where(half_weights, np.where(np.asarray(fp8_param) > 0, quant_copies * 1.0, w + q), 0.0)
    shard = np.maximum(shard, 1)
    w_b = np.where(zero >= Zero.PARAMETERS, w / shard, w)
    g_b = np.where(zero >= Zero.GRADIENTS, g / shard, g)
    o_b = np.where(zero >= Zero.OPTIMIZER, o / shard, o)
    return w_b, g_b, o_b


def dense_and_expert_shards(S: StrategyBatch):
    """Data-parallel groups that shard model states: dp*cp for dense parameters (context-parallel ranks hold
    the same weights), the expert-data-parallel size edp for routed experts; under hybrid sharding one
    replica's shard group of each, dp/dp_replicate * cp and edp/dp_replicate (``Placement.group``)."""
    place = Placement.of(S)
    return place.group("dp_shard").size, place.group("edp_shard").size


def micro_batches_in_flight(m, pp, vpp, schedule, device):
    """Micro-batches' worth of its own activations pipeline stage ``device`` holds at its peak (arrays
    broadcast): 1F1B (and ZB-H1) keeps pp - d micro-batches; interleaved 1F1B runs (pp - d - 1) 2 + (v - 1) pp
    warm-up chunks plus one (Megatron-Core's schedule), 1/v of a stage each, which for d = 0 is
    pp (1 + (pp-1)/(pp v)); GPipe all m; without a pipeline one."""
    m, pp, vpp = (np.asarray(x, dtype=float) for x in (m, pp, vpp))
    schedule = np.asarray(schedule)
    # the same operations in the same order as min(m, max(pp - d, 1)) and min(max((pp - d - 1) 2 + (v - 1) pp
    # + 1, 1) / v, m), written in place into arrays of the broadcast shape (fewer [N, K] temporaries)
    shape = np.broadcast_shapes(m.shape, pp.shape, vpp.shape, schedule.shape, np.shape(device))
    out = np.subtract(pp, device, out=np.empty(shape))
    interleaved = schedule == Schedule.INTERLEAVED
    if interleaved.any():
        chunks = out - 1
        chunks *= 2
        chunks += (vpp - 1) * pp
        chunks += 1
        np.maximum(chunks, 1, out=chunks)
        chunks /= vpp
        np.minimum(chunks, m, out=chunks)
    np.maximum(out, 1, out=out)
    np.minimum(m, out, out=out)  # 1F1B (and ZB-H1)
    if interleaved.any():
        np.copyto(out, chunks, where=interleaved)
    np.copyto(out, m, where=schedule == Schedule.GPIPE)
    return np.where(pp > 1, out, 1.0)


def in_flight_by_layout(train: TrainSpec, S: StrategyBatch, f) -> np.ndarray:
    """``micro_batches_in_flight`` at every representative device ([N, K]) of the device figures ``f``, computed
    once per distinct (micro-batches, pp, vpp, schedule, layout), then copied to the rows: the same figures
    (elementwise), without the [N, K] arithmetic for every row."""
    m = (train.global_batch // (S.dp * S.mbs)).astype(np.int64)
    layout = f.rows(f.layout_id).astype(np.int64)
    code = (((m * 256 + S.pp) * 256 + S.vpp) * 16 + S.schedule) * (len(f.layouts) + 1) + layout
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    cols = (m.take(first)[:, None], S.pp.take(first)[:, None], S.vpp.take(first)[:, None],
            S.schedule.take(first)[:, None])
    per_combination = micro_batches_in_flight(*cols, f.device.take(f.row.take(first), axis=0))
    return per_combination.take(inverse.reshape(-1), axis=0)


# DeepSpeed ZeRO-3 (deepspeed/runtime/zero/config.py defaults): stage3_prefetch_bucket_size = 5e7 parameters
# are fetched ahead of the submodule computing; the largest submodule of a GPT block is an MLP linear, 4h^2 of
# the block's 12h^2 (a third)
ZERO3_PREFETCH_BUCKET_PARAMS = 5e7
LARGEST_SUBMODULE_SHARE = 1.0 / 3.0


def zero3_gathered_bytes(largest_layer_params, framework=None, bytes_per_param=2.0):
    """The weights ZeRO-3 holds gathered at once, ``bytes_per_param`` each (bf16; fp32 runs gather fp32): FSDP
    (one unit per block, the next block prefetched) two whole layers; a stack that gathers submodule by
    submodule (DeepSpeed's per-module hooks, ``Framework.collectives_per_layer`` > 1) the largest submodule
    plus its prefetch bucket."""
    whole = 2.0 * bytes_per_param * largest_layer_params
    if framework is None or framework.collectives_per_layer <= 1:
        return whole
    part = bytes_per_param * (LARGEST_SUBMODULE_SHARE * largest_layer_params + ZERO3_PREFETCH_BUCKET_PARAMS)
    return np.minimum(whole, part)


def fsdp2_reduce_buffer_bytes(largest_layer_params, framework, zero, dp_shard, unsharded_bytes, reduce_bytes,
                              layer_activations=0.0):
    """Bytes FSDP2 holds for gradient reduction beyond the sharded gradients at the device's peak
    (``Framework.fsdp2_reduce_buffers``). A block's backward accumulates its unsharded gradient in the all-gather
    dtype (``unsharded_bytes``: 2 B under a bf16 ``param_dtype``, 4 B in fp32); its post-backward copies it into a
    flat reduce-scatter input in ``reduce_dtype`` (``reduce_bytes``, 4 B; ``foreach_reduce_scatter_copy_in``)
    while the unsharded gradient still lives, and that input is retained until the next block's post-backward
    (``reduce_scatter_states``, ``reduce_scatter_max_input_buffers`` = 1). The first block's backward starts at
    the activations' peak with no input retained yet; from its post-backward on, that block's activations
    (``layer_activations``, one layer's) are freed. So the peak holds
        L u + max(0, L r - layer_activations)        (L = largest_layer_params)
    on rows that shard with FSDP2 (``zero >= fsdp_zero``) over more than one rank; 0 elsewhere."""
    z = np.asarray(zero)
    if framework is None or not framework.fsdp2_reduce_buffers:
        return np.zeros((len(z), 1))
    on = ((z >= framework.fsdp_zero) & (np.asarray(dp_shard) > 1))[:, None]
    L = np.asarray(largest_layer_params)[:, None]
    held = L * unsharded_bytes + np.maximum(0.0, L * reduce_bytes - layer_activations)
    return np.where(on, held, 0.0)


def fsdp_unresharded_params(framework, f, zero, dp_shard):
    """[N, K] parameters of each device that FSDP2 keeps gathered through the step under ZeRO-3 over more than
    one rank although they sit outside the transformer blocks (``Framework.fsdp_unresharded_units``: the root
    unit never reshards after forward; torchtitan's ``[norm, output]`` unit is wrapped with ``reshard_after_forward``
    False). Under ZeRO-2 FSDP every unit stays gathered anyway (``fsdp_holds_gathered``)."""
    z = np.asarray(zero)
    units = framework.fsdp_unresharded_units if framework is not None else ()
    if not units:
        return None
    out = sum(f.rows(f.embedding_params if u == "embedding" else f.head_params) for u in units)
    return np.where(((z >= Zero.PARAMETERS) & (np.asarray(dp_shard) > 1))[:, None], out, 0.0)


def fsdp2_terms(f, S: StrategyBatch, framework, kept, dense_shard, wide: float, g):
    """([N, K] or [N, 1] FSDP2's gradient reduction buffers at each device's peak, [N, K] the bytes of the units
    outside the blocks its root keeps gathered under ZeRO-3 or None for a stack without), none where ``kept`` holds everything unsharded
    (``fsdp2_reduce_buffer_bytes``, ``fsdp_unresharded_params``); ``wide`` the gathered dtype's bytes, ``g`` the
    reduce dtype's per row. (None, None) for a stack without FSDP2's terms: nothing added on the planner's path."""
    if framework is None or not (framework.fsdp2_reduce_buffers or framework.fsdp_unresharded_units):
        return None, None
    layers = f.rows(f.layers)
    one_layer = np.divide(f.rows(f.kept_bytes), layers, out=np.zeros_like(layers, dtype=float), where=layers > 0)
    reduce_buf = np.where(kept[:, None], 0.0, fsdp2_reduce_buffer_bytes(
        f.rows(f.largest_layer_params), framework, S.zero, dense_shard, np.asarray(wide)[..., None],
        np.asarray(g)[..., None], one_layer))
    unresharded = fsdp_unresharded_params(framework, f, np.where(kept, Zero.OPTIMIZER, S.zero), dense_shard)
    return reduce_buf, None if unresharded is None else unresharded * wide


def logits_bytes_per_device(f, S: StrategyBatch, framework) -> np.ndarray:
    """[N, K] the logits of one micro-batch where the head sits: at each rank's vocabulary shard (T V / tp), or
    whole (T V) on every tensor-parallel rank of a stack whose loss is not vocabulary-parallel
    (``Framework.loss_parallel`` False: the head all-gathers them)."""
    once = f.rows(f.once_bytes)
    if framework is not None and not framework.loss_parallel:
        once = once * S.tp[:, None]
    return once


def ddp_bucket_rows(framework, S: StrategyBatch) -> np.ndarray:
    """Rows whose gradients torch's DDP holds twice (``Framework.ddp_bucket_copy``): zero 0 or 1 over more than
    one data-parallel rank, without pipeline or tensor parallelism (the reference trainer's ``apply_dp``
    all-reduces by hand there; torchtitan's ``replicate`` refuses other parallelism)."""
    if framework is None or not framework.ddp_bucket_copy:
        return np.zeros(len(S.dp), dtype=bool)
    return (S.zero <= Zero.OPTIMIZER) & (S.dp > 1) & (S.pp == 1) & (S.tp == 1)


def fsdp_holds_gathered(framework, zero) -> np.ndarray:
    """Rows whose ZeRO-2 is FSDP without resharding after forward (a stack with ``Framework.fsdp_zero`` 2:
    torchtitan's ``fsdp_reshard_after_forward = "never"``, the reference trainer's
    ``fully_shard(reshard_after_forward=False)``): FSDP2 all-gathers each block's parameters in its forward
    and frees them only after that block's backward (``FSDPParamGroup.post_forward`` reshards only when
    ``reshard_after_forward``; ``post_backward`` always does), so at the end of the forward every block's
    unsharded ``param_dtype`` weights are live: the stage's parameters x 2 B (70.6B parameters: 131.5 GiB).
    They are allocated and freed every step, so the allocator's reserve counts them (``memory``'s transient).
    DeepSpeed's ZeRO-2 (``stage_1_and_2.py``) keeps its 16-bit parameters whole anyway (``half_weight_copy``),
    Megatron-Core has no zero 2."""
    z = np.asarray(zero)
    if framework is None or framework.fsdp_zero > Zero.GRADIENTS:
        return np.zeros(z.shape, dtype=bool)
    return z == Zero.GRADIENTS


def stored_under_remat(f, S: StrategyBatch, stored: np.ndarray) -> np.ndarray:
    """The activations a device keeps ([N, K]) under a MaxText remat policy that offloads tensors
    (``asap.cost.remat``): its device-saved tensors for every micro-batch in flight, of the offloaded ones a
    window of layers (``asap.cost.offload.offloaded_activations``)."""
    rows = np.flatnonzero(is_maxtext(S.recompute))
    if not len(rows):
        return stored
    out = stored.copy()
    fr = f.row.take(rows)
    one = f.offloaded_bytes.take(fr, axis=0)  # one micro-batch's offloaded bytes
    in_flight = stored[rows] * np.divide(one, f.kept_bytes.take(fr, axis=0),
                                         out=np.zeros_like(one), where=f.kept_bytes.take(fr, axis=0) > 0)
    out[rows] = stored[rows] - in_flight + offloaded_activations(one, f.layers.take(fr, axis=0), in_flight)
    return out


def stored_under_offload(f, S: StrategyBatch, stored: np.ndarray) -> np.ndarray:
    """The activations a device keeps ([N, K], ``stored`` without offload): under activation offload a window
    of layers (``asap.cost.offload.offloaded_activations``), priced only on the rows that offload (it is
    elementwise per row, so the figures are those of pricing every row and keeping these)."""
    out = stored_under_remat(f, S, stored)
    off = np.flatnonzero(S.offload_act > 0)
    if not len(off):
        return out
    out = out.copy()
    rows = f.row.take(off)
    out[off] = offloaded_activations(f.kept_bytes.take(rows, axis=0), f.layers.take(rows, axis=0), stored[off],
                                     S.offload_layers[off, None])
    return out


def transient_activations(f, S: StrategyBatch, framework, model: ModelSpec, train: TrainSpec):
    """([N, K] the larger of a device's two transients, [N, K] the logits, [N] the layer's, [N] of it context
    parallelism's exchange buffers): the logits live from the head's forward to the end of its backward, before
    the last layer's backward re-materialises it (``working``, under full recompute) beside its attention's CP
    buffers (``stack_activations.cp_buffer_bytes`` with the stack's ring), so the two are never live at once and
    the device holds the larger."""
    from asap.spec.framework import CpRing

    cp = cp_buffer_bytes(model, train, S, framework.cp_ring if framework is not None else CpRing.TE)
    logits, working = logits_bytes_per_device(f, S, framework), f.rows(f.working_bytes) + cp
    return np.maximum(working[:, None], logits), logits, working, cp


def largest_transient_tensor_bytes(model: ModelSpec, train: TrainSpec, S: StrategyBatch, framework, logits_at,
                                   gathered, block_gathered, reduce_input):
    """[N] the step's largest single transient tensor at each row's fullest device (``asap.cost.allocator``: the
    one whose fenced segment the caching allocator keeps): the larger of the fp32 logits of one micro-batch where
    the head sits (``logits_at`` > 0; ``allocator.logits_tensor_bytes``), one of the blocks ZeRO-3 holds gathered
    (``gathered`` / 2: FSDP all-gathers a block into one flat buffer, the next block prefetched into another),
    one block's gathered weights where FSDP keeps them through the step (``block_gathered``), FSDP2's flat
    reduce-scatter input of one block (``reduce_input``), and a layer's largest activation
    (``allocator.layer_tensor_bytes``)."""
    loss_parallel = framework.loss_parallel if framework is not None else True
    logits = logits_tensor_bytes(S.mbs, train.seq_len, S.cp, model.vocab_size, S.tp, S.vocab_tiles, loss_parallel)
    logits = np.where(np.asarray(logits_at) > 0, logits, 0.0)
    return np.maximum.reduce([logits, np.broadcast_to(np.asarray(gathered) / 2.0, logits.shape),
                              np.broadcast_to(block_gathered, logits.shape),
                              np.broadcast_to(reduce_input, logits.shape), layer_tensor_bytes(model, train, S)])


def stack_reserve_bytes(framework, acc: Accelerator, train: TrainSpec, largest):
    """[N] the allocator's reserve of the stack on the accelerator (``allocator.reserve_bytes``): its allocator
    (``Framework.allocator``, the job's ``train.allocator``, host malloc on a CPU), fenced unless the stack keeps its
    gradients in a buffer allocated once (``Framework.grad_buffer_zeroed``)."""
    own = framework.allocator if framework is not None else Allocator.CACHING
    fenced = not (framework is not None and framework.grad_buffer_zeroed)
    return reserve_bytes(allocator_on(own, acc.family, train.allocator), largest, fenced=fenced)


# Transformer Engine's userbuffers (``initialize_ub``, transformer_engine/pytorch/module/base.py, TE 2.x): one
# communication buffer per overlapped GEMM of a layer, each of the shape Megatron-Core passes
# (``_initialize_tp_communicators``: [seq_length x micro_batch_size / cp, hidden_size], the tensor-parallel group's
# whole sequence): the all-gather ones (ring exchange qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; bulk qkv_dgrad,
# fc1_dgrad; external proj_wgrad, fc2_wgrad) hold fp8 bytes under an fp8 recipe (``fp8_buf``), the reduce-scatter
# ones (pipelined proj_fprop, fc2_fprop; bulk qkv_wgrad, fc1_wgrad) the activation dtype; and the cuBLAS workspace
# is repeated for ``_NUM_MAX_UB_STREAMS`` streams (32 MiB each from Hopper on, 4 MiB before:
# ``get_cublas_workspace_size_bytes``), two more than the runtime's own (in ``fixed_allowance_bytes``).
UB_ALL_GATHER_BUFFERS = 8
UB_REDUCE_SCATTER_BUFFERS = 4
UB_STREAMS = 3
CUBLAS_WORKSPACE_BYTES = {"hopper": 32 * 2**20, "blackwell": 32 * 2**20}  # (4 MiB before Hopper)


def tp_comm_buffer_bytes(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch, framework):
    """[N] the userbuffers of Transformer Engine's tensor-parallel overlap (the table above) where the stack
    registers them (``Framework.te_userbuffers``) and overlaps TP there (``Framework.tp_overlap_share``: the
    family's ``tp_overlap``, 0 on Ampere, whose Megatron-LM runs of 2021-22 predate the userbuffers), for rows
    with tp > 1; 0 elsewhere: T h (8 a + 4 b) + 2 w bytes, with T = mbs x seq / cp tokens, a the all-gather
    buffers' bytes per element (1 under fp8, else b), b the activation's, w the cuBLAS workspace."""
    tp = np.asarray(S.tp)
    workspace = CUBLAS_WORKSPACE_BYTES.get(acc.family)
    if (framework is None or not framework.te_userbuffers or workspace is None
            or framework.tp_overlap_share(acc.family_constants) <= 0):
        return np.zeros(np.shape(tp), dtype=float)
    b = float(act_bytes(train.precision))
    a = 1.0 if train.precision == "fp8" else b
    tokens = np.asarray(S.mbs) * train.seq_len / np.asarray(S.cp)
    per_rank = tokens * model.hidden_size * (UB_ALL_GATHER_BUFFERS * a + UB_REDUCE_SCATTER_BUFFERS * b)
    return np.where(tp > 1, per_rank + (UB_STREAMS - 1) * workspace, 0.0)


def comm_buffer_bytes(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch, framework):
    """[N] (Transformer Engine's userbuffers, DeepEP's buffers): what the stack's communication registers outside
    PyTorch's allocator (``tp_comm_buffer_bytes``, ``asap.cost.ep_buffers``), in the allowance beside the runtime."""
    return tp_comm_buffer_bytes(model, acc, train, S, framework), ep_comm_buffer_bytes(model, acc.family, S)


def held_at(term, which):
    """[N] a term of [N, K] or [N, 1] bytes at each row's fullest device (``which``); 0 where the stack holds
    none (None)."""
    from asap.cost.units import at

    if term is None:
        return 0.0
    return term[:, 0] if term.shape[1] == 1 else at(term, which)


def stack_device_figures(model: ModelSpec, train: TrainSpec, S: StrategyBatch, framework, ut=None):
    """``units.device_figures`` (with the units' times ``ut`` where given) under the stack's activation semantics
    (``units.stack_activation_semantics``; the defaults without a stack)."""
    from asap.cost.units import device_figures, stack_activation_semantics
    from asap.spec.framework import SelectivePolicy

    if framework is None:
        return device_figures(model, train, S, ut, selective=SelectivePolicy.KERNELS)
    return device_figures(model, train, S, ut, **stack_activation_semantics(framework, train))


def memory(model: ModelSpec, acc: Accelerator, train: TrainSpec, S: StrategyBatch, figures=None,
           framework=None) -> MemoryBreakdown:
    """Peak memory per device: every representative device of the layout priced (``cost.units``), the fullest
    reported. ``figures`` passes the device figures when the caller has them. A framework whose FSDP keeps a
    pipeline stage's gathered weights through its micro-batches (torchtitan) holds them, and the gradients
    it accumulates until the step's one reduce-scatter, unsharded."""
    from asap.cost.units import at

    f = figures if figures is not None else stack_device_figures(model, train, S, framework)
    dense_shard, edp = dense_and_expert_shards(S)
    kept = (S.zero >= Zero.PARAMETERS) & (S.pp > 1) & bool(framework and framework.fsdp_keeps_params_under_pp)
    # kept: the weights stay unsharded through the step, and the gradients accumulate unsharded until the one
    # reduce-scatter (FSDP2 with gradient sync off for all but the last micro-batch: unsharded_accumulated_grad)
    zero = np.where(kept, Zero.OPTIMIZER, S.zero)
    g = (framework.grad_bytes(train.precision, S.zero, S.grad_bf16) if framework is not None
         else np.where((S.grad_bf16 > 0) & (train.precision != "fp32"), 2.0, 4.0))
    g = g * (1.0 + ddp_bucket_rows(framework, S))  # torch DDP's buckets: a second copy of the gradients
    # a stack without a 16-bit copy still holds one where FSDP keeps a stage's gathered weights (``kept``), and
    # where its zero 2 is FSDP without resharding (``held``: every block's gathered weights from forward to
    # backward)
    held = fsdp_holds_gathered(framework, S.zero)
    half = kept | held | (framework.half_weight_copy if framework is not None else True)
    copies = quantised_weight_copies(framework, acc, train.precision)
    (wd, gd, od), (we, ge, oe) = (state_bytes_per_param(train.precision, zero, sh, g, S.fp8_param, S.offload_opt, half,
                                                        copies) for sh in (dense_shard, edp))
    # weights, gradients and optimizer states of each device: dense and expert parameters, each sharded over
    # its own data-parallel group; ZeRO-3 gathers a layer's full weights for compute and prefetches the next
    # (two of the model's largest layers, the one computing and the one prefetched)
    dense_p, expert_p = f.rows(f.dense_params), f.rows(f.expert_params)
    # in place where the order of the operations is the same (these are the [N, K] arrays the pricing's time
    # goes to: fewer temporaries, the same figures)
    states = dense_p * (wd + gd + od)[:, None]
    states += expert_p * (we + ge + oe)[:, None]
    wide = 4.0 if train.precision == "fp32" else 2.0
    layer_p = f.rows(f.largest_layer_params)  # the model's largest transformer layer on each row's device
    gathered = np.where(zero >= Zero.PARAMETERS, zero3_gathered_bytes(layer_p, framework, wide), 0.0)
    # an fp32 run's FSDP2 zero 2 keeps its fp32 shards beside the gathered fp32 weights (in 16-bit runs the
    # shards are the optimizer's master, in its 12 B)
    shard_w = np.where(held & (train.precision == "fp32"), 4.0 / np.maximum(dense_shard, 1), 0.0)
    states += shard_w[:, None] * dense_p
    reduce_buf, edges = fsdp2_terms(f, S, framework, kept, dense_shard, wide, g)
    if edges is not None:
        states += edges
    # activations: the device's in-flight micro-batches of its layers, the largest layer re-materialised under
    # full recompute, and the logits of one micro-batch where the head sits
    stored = in_flight_by_layout(train, S, f)
    stored *= f.rows(f.kept_bytes)
    stored_on_device = stored_under_offload(f, S, stored)
    a, logits, working, cp = transient_activations(f, S, framework, model, train)
    a += stored_on_device  # addition commutes exactly: stored_on_device + the larger, as before
    body = states
    body += gathered[:, None]
    if reduce_buf is not None:
        body += reduce_buf
    body += a
    which = np.argmax(body, axis=1)
    dense_at, expert_at = at(dense_p, which), at(expert_p, which)
    peak_body = at(body, which)
    edges_at, reduce_buf, logits_at = held_at(edges, which), held_at(reduce_buf, which), at(logits, which)
    # the allocator's reserve: a segment of the step's largest transient tensor (``asap.cost.allocator``)
    largest = largest_transient_tensor_bytes(model, train, S, framework, logits_at, gathered,
                                             (held | kept) * wide * layer_p, (reduce_buf > 0) * g * layer_p)
    reserve = stack_reserve_bytes(framework, acc, train, largest)
    userbuffers, deepep = comm_buffer_bytes(model, acc, train, S, framework)
    fixed = fixed_allowance_bytes(acc) + userbuffers + deepep  # what the allocator does not hold
    od_all, oe_all = (state_bytes_per_param(train.precision, zero, sh, g)[2] for sh in (dense_shard, edp))
    host = (at(stored - stored_on_device, which)
            + np.where(S.offload_opt > 0, dense_at * od_all + expert_at * oe_all, 0.0))
    return MemoryBreakdown(host_gb=host / GB,
                           weights_gb=(dense_at * (wd + shard_w) + expert_at * we + gathered + edges_at) / GB,
                           grads_gb=(dense_at * gd + expert_at * ge + reduce_buf) / GB,
                           optimizer_gb=(dense_at * od + expert_at * oe) / GB,
                           activations_gb=at(a, which) / GB, allowance_gb=(reserve + fixed) / GB,
                           peak_gb=(peak_body + reserve + fixed) / GB, gathered_gb=(gathered + edges_at) / GB,
                           reduce_buffers_gb=reduce_buf / GB,
                           logits_gb=np.where(logits_at >= working, logits_at, 0.0) / GB,
                           cp_buffers_gb=np.where(logits_at >= working, 0.0, cp) / GB,
                           reserve_gb=reserve / GB, largest_transient_gb=largest / GB,
                           tp_comm_buffers_gb=userbuffers / GB, ep_comm_buffers_gb=deepep / GB)
