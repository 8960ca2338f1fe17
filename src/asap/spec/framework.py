"""The training stacks whose semantics the cost model follows (``--framework``), one small table.

A strategy's degrees mean the same in every stack; what differs is when gradients are reduced, which
communication overlaps exist, how finely ZeRO-3 gathers, the MoE dispatcher a run gets by default, and which
options the stack offers at all (so that the planner never completes a run with a knob its stack did not have).

Sources, per entry:
- Megatron-LM / Megatron-Core (``megatron/core/distributed``, ``megatron/training/arguments.py``): the
  distributed optimizer keeps one contiguous gradient buffer and reduce-scatters it once per step, bucket by
  bucket, as the last micro-batch's backward completes (``--overlap-grad-reduce``; the other micro-batches
  run under ``no_sync``), and all-gathers the updated weights during the next forward
  (``--overlap-param-gather``). It has no ZeRO-2 (zero 0, 1, and Megatron-FSDP's 3): a per-micro-batch
  reduce-scatter of partitioned gradients is DeepSpeed's. TP communication overlap (``--tp-comm-overlap``, Transformer Engine
  userbuffers); MoE dispatchers ``--moe-token-dispatcher-type`` allgather | alltoall | flex (DeepEP, node-
  deduplicated); the expert all-to-all overlap ``--overlap-moe-expert-parallel-comm`` is off by default.
  Recipes set the alltoall dispatcher for expert parallelism, which is the default taken here.
- DeepSpeed (``deepspeed/runtime/zero/stage_1_and_2.py``, ``stage3.py``, ``pipe/engine.py``): ZeRO-1 reduces
  gradients at the gradient-accumulation boundary (once per step); ZeRO-2 partitions gradients and
  reduce-scatters them in every micro-batch's backward (``overlap_comm``); ZeRO-3 fetches parameters module by
  module with a prefetch bucket (``stage3_prefetch_bucket_size``) and re-fetches them for backward, and
  reduce-scatters each micro-batch's gradients; every parameter tensor is its own collective (about
  ``ZERO3_TENSORS_PER_LAYER`` per transformer layer). The pipeline engine runs 1F1B (``TrainSchedule``) with
  ZeRO-1 at most; activation checkpointing is whole-layer; no sequence or context parallelism (Megatron-
  DeepSpeed of 2021-22).
- torchtitan (``torchtitan/models/llama3/infra/parallelize.py: apply_fsdp``; ``torch.distributed.pipelining``):
  FSDP2 per transformer block; ``reshard_after_forward`` is off when pipeline parallelism is on (the
  "default" policy), so a stage keeps its gathered parameters through all its micro-batches, and the pipeline
  schedule disables gradient sync for all but the last micro-batch: one gather and one reduce-scatter per
  step. Without PP, FSDP2 gathers per micro-batch for forward and backward and reduce-scatters each
  backward. Data parallelism is DDP (zero 0), FSDP2 without resharding (zero 2) or FSDP2 (zero 3); no
  distributed optimizer (zero 1). Async TP is optional; MoE with the all-to-all dispatcher, or DeepEP's
  node-deduplicated dispatch (``expert_parallel_comm_backend = "deepep"``: dedup).
  Its forced load balance (``_debug_force_load_balance``; NeMo AutoModel's ``fake_balanced_gate``) routes
  round-robin: a token's experts are consecutive, on one or two neighbouring ranks (``round_robin_balance``).
- MaxText (``MaxText/configs/base.yml``): XLA SPMD over named mesh axes; the latency-hiding scheduler issues
  collectives asynchronously, so FSDP weight gathers and gradient reduce-scatters overlap the neighbouring
  layers' compute; remat policies (none, a selective policy such as ``minimal``/``save_qkv_proj``, full);
  ``data`` (zero 0) or ``fsdp`` (zero 3) sharding; MoE all-to-all (ragged dispatch).
- MindSpore / MindFormers (``parallel_config``: data/model/pipeline/context/expert parallel, ``pp_interleave``
  , ``optimizer_shard``): Megatron-like semantics; the Ascend MoE training report exchanges tokens by a
  hierarchical (node-deduplicated) all-to-all overlapped with expert computation.
- Host offload (``offload_act``, ``offload_opt``): Megatron-Core offers both (``--cpu-offloading`` with
  ``--cpu-offloading-activations``, Transformer Engine's CPU offload context; ``--optimizer-cpu-offload``, its
  HybridDeviceOptimizer) and ``--fp8-param-gather`` (``fp8_param``), activation offload without a pipeline
  and without recompute (TransformerConfig refuses both); DeepSpeed the optimizer (``offload_optimizer``,
  ZeRO-Offload; its ``cpu_checkpointing`` moves full-recompute checkpoints, not priced here); torchtitan offloads the
  optimizer with FSDP2's ``CPUOffloadPolicy`` (``training.enable_cpu_offload``) and no activations; MaxText both
  (the offloading ``remat_policy`` variants, ``optimizer_memory_host_offload``); MindFormers none here.
- Hybrid sharding (``dp_replicate`` > 1, ``Framework.hsdp_zero``: the ZeRO stages a stack combines it with):
  Megatron-Core ``--num-distributed-optimizer-instances`` (``DistributedDataParallelConfig.
  num_distributed_optimizer_instances``: the distributed optimizer, zero 1, sharded within an instance and the
  gradient shard all-reduced across instances, ``param_and_grad_buffer.py``; Megatron-FSDP, zero 3, turns HSDP
  on with it, ``mcore_fsdp_adapter.py`` ``enable_hsdp``, ``outer_dp_sharding_strategy`` 'no_shard');
  torchtitan ``data_parallel_replicate_degree`` x ``data_parallel_shard_degree`` (FSDP2 HSDP, zero 2 and 3);
  MaxText ``dcn_data_parallelism`` x ``ici_fsdp_parallelism`` (zero 3); DeepSpeed MiCS ``mics_shard_size``
  (ZeRO-3; its groups are runs of global ranks, ``mics_utils.create_mics_comm_groups``, so no tensor or
  pipeline parallelism: ``asap.spec.stack_rules``); MindSpore's parallel optimizer
  ``parallel_optimizer_config.optimizer_weight_shard_size`` (zero 1). The reference trainer has none.
- asap, the reference trainer (``asap.runners.torch``; the CPU default, what ``asap run`` measures): DDP with
  ``no_sync`` (or one all-reduce after the backward under pp or DTensor TP), torch's ZeroRedundancyOptimizer
  for ZeRO-1 (a broadcast per parameter tensor after the step), FSDP2 per block for ZeRO-2/3, DTensor TP,
  ``torch.distributed.pipelining``, eager kernels, experts in a loop; none of its data-parallel collectives
  overlaps compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from types import MappingProxyType
from typing import Mapping

import numpy as np

from asap.errors import AsapError

# the submodules with parameters of a Megatron-DeepSpeed GPT block, each fetched on its own pre-forward hook:
# input norm, fused QKV, attention output, post-attention norm, MLP in, MLP out
ZERO3_MODULES_PER_LAYER = 6
# torchtitan runs eager unless compiled (``compile = false`` by default): RMSNorm as pow, mean, rsqrt and two
# multiplies, RoPE as several complex-number ops, SwiGLU as silu then multiply, each a kernel reading and
# writing its tensors, about twice the HBM traffic of the fused kernels Transformer Engine, Megatron-Core and
# XLA run (RMSNorm alone: ~5 passes against 2). ``asap diagnose --fusion`` measures the same on the reference
# trainer's CPU traces: its eager RMSNorm moves 7 tensor passes where the fused kernel's lower-bound saving
# (intermediates written and read once, asap.profile.fusion) leaves 3, SwiGLU's silu-then-multiply 5 against
# a fused kernel's 3: about 2x over a layer's norms, RoPE and activations.
EAGER_ELEMENTWISE_TRAFFIC = 2.0
# The allocator each stack runs (``asap.cost.allocator``: the reserve beyond the live tensors is one fenced
# segment of the step's largest transient tensor under PyTorch's caching allocator where the stack frees its
# gradients every step, two 20 MiB pages with expandable segments or a grad buffer allocated once, nothing under
# XLA's static buffer plan). torchtitan's run_train.sh sets PYTORCH_ALLOC_CONF="expandable_segments:True", as every
# recipe of Megatron-Bridge's perf_recipes does (e.g. gpt_oss/b200/gpt_oss.py); Megatron-LM leaves the default
# segments (its performance guide lists expandable segments as an option), unfenced by its contiguous grad buffer
# (``grad_buffer_zeroed``), so either prices the same. DeepSpeed, MindSpore's memory pool and the reference
# trainer run the default segments.
# How the LM head's logits are held for the loss, bytes per logit (``asap.cost.units``): PyTorch stacks keep
# the head's output in the activation dtype and the loss's fp32 copy, whose softmax buffer becomes the
# gradient in place (Megatron-Core's vocab_parallel_cross_entropy casts ``vocab_parallel_logits.float()``;
# torchtitan's cross_entropy_loss ``pred.float()``): act_bytes + 4 (``None``). MaxText casts the logits to fp32
# (base.yml ``cast_logits_to_fp32: true``, ``logits_dot_in_fp32: false``) and XLA fuses the cast into the head's
# dot and reuses the buffer for the logits' gradient: 4 B.
XLA_LOGITS_BYTES = 4.0
LogitsBytes = float | tuple[float, float] | None
# Eager PyTorch's unfused loss (torchtitan's ``cross_entropy_loss``: ``F.cross_entropy(pred.flatten(0, 1).float(),
# ...)``, the reference trainer's the same): log_softmax saves its fp32 output; the backward's first node,
# nll_loss_backward, writes a dense fp32 gradient of that shape (``zeros_like`` then a scatter), and
# _log_softmax_backward_data a third fp32 tensor while both live: 3 x 4 B per logit at the start of the backward,
# when every stored activation is still held (the forward's peak, the half logits + their fp32 copy + the
# output, is 2 + 4 + 4 = 10 B; torchtitan ``del pred`` and the reference trainer's one expression free the half
# logits before the backward). Measured on this machine's CPU (4096 x 32768 logits, peak RSS with glibc's mmap
# threshold pinned): 10.0 B forward, 12.05 B through the backward in bf16, 8.1 / 12.1 B in fp32.
EAGER_LOGITS_BYTES = 12.0
# torchtitan's loss under tensor parallelism (``loss_parallel``: torch/distributed/tensor/parallel/loss.py) at the
# rank's vocabulary shard: its backward ``_nll_loss_and_log_softmax_backward`` holds the saved fp32 log-softmax
# output x, ``grad_input = torch.zeros_like(x)``, ``torch.exp(x)``, their sum and the product with grad_output,
# four fp32 tensors live at once (16 B); its forward (``_log_softmax``) the half logits, the fp32 copy, ``shifted``
# and ``torch.exp(shifted)``, 2 + 3 x 4 = 14 B. (non-TP, vocabulary-parallel under TP) bytes per logit:
TORCHTITAN_LOGITS_BYTES = (EAGER_LOGITS_BYTES, 16.0)
# The same loss under torch.compile (torchtitan compiles it with the model: CompileConfig.components defaults to
# ["model", "loss"], components/loss.py ``_maybe_compile``): Inductor keeps a row's max and log-sum-exp, saves the
# half logits and writes their gradient in their dtype, 2 x the activation bytes; measured on this CPU
# (benchmarks/loss_memory_cpu.py): bf16 2.02 B forward, 4.00 B through the backward, fp32 4.00 / 8.00 B.
COMPILED_LOGITS_PER_ACT_BYTE = 2.0


class Dispatcher(str, Enum):
    """How MoE tokens reach their experts."""

    ALLTOALL = "alltoall"  # every routed copy travels on its own (Megatron-Core alltoall)
    ALLGATHER = "allgather"  # every rank gathers all tokens of its EP group and keeps its experts' (Megatron)
    DEDUP = "dedup"  # a token crosses the network once per remote domain, then fans out (DeepEP, Ascend)

    @classmethod
    def parse(cls, text, field: str = "strategy.dispatcher") -> "Dispatcher":
        if isinstance(text, Dispatcher):
            return text
        if str(text) not in DISPATCHERS:
            raise AsapError(field, f"must be one of {', '.join(DISPATCHERS)}, got {text!r}")
        return cls(str(text))

    @property
    def code(self) -> int:
        """The batch code (the index in ``DISPATCHERS``)."""
        return DISPATCHERS.index(self.value)

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


DISPATCHERS = tuple(d.value for d in Dispatcher)
BEST_DISPATCHER = len(DISPATCHERS)  # a planner row whose dispatcher is free: the cost model prices the fastest


class CpRing(str, Enum):
    """Whose ring attention a stack runs under ``cp_comm=p2p`` (``asap.cost.ring_attention``)."""

    TE = "te"  # Transformer Engine AttnFuncWithCPAndKVP2P: K,V chunk by chunk, bf16 merges (Megatron, MindSpeed)
    TORCH = "torch"  # torch context_parallel: K,V all-gathered per pass, fp32 dK,dV ring and merges (torchtitan)


class Allocator(str, Enum):
    """How a stack's device memory is allocated, as far as the reserve beyond the live tensors goes
    (``asap.cost.allocator``)."""

    CACHING = "caching"  # PyTorch's CUDA caching allocator with its default fixed segments
    EXPANDABLE = "expandable"  # the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    STATIC = "static"  # a compiler's buffer plan (XLA)
    HOST = "host"  # host memory through malloc (the stacks on a CPU)


class AttentionKernel(str, Enum):
    """Which attention kernel a stack calls."""

    FUSED = "fused"  # its own fused kernel: Transformer Engine's cuDNN/FlashAttention-3, Splash, npu_fusion_attention
    SDPA = "sdpa"  # PyTorch's F.scaled_dot_product_attention, default backend (Family.sdpa_attention_rate)


class SelectivePolicy(str, Enum):
    """What ``recompute=selective`` means in a stack."""

    # Megatron-Core ``--recompute-granularity selective``: the attention kernel, with the norms and activation
    # functions its recipes checkpoint alongside (``--recompute-modules core_attn layernorm moe_act``)
    KERNELS = "kernels"
    # torchtitan ``selective_ac_option = "op"``: saves the outputs of the ops on its save list (matmuls,
    # attention, reduce-scatters) except every second matmul of a block, and recomputes everything else
    OP_SAC = "op_sac"
    # the attention kernel alone (Korthikanti et al. 2022's definition; the reference trainer)
    CORE_ATTN = "core_attn"


@dataclass(frozen=True)
class HostOps:
    """Operators a stack's host dispatches per micro-batch (forward, backward), and per step in its optimizer.

    ``dense_layer`` / ``moe_layer`` / ``ends`` (embedding, final norm, head and loss): (forward, backward)
    operator counts; ``per_local_expert``: what each expert a rank holds adds to an MoE layer (a loop over
    experts; 0 with grouped GEMMs); ``optimizer_per_tensor``: the optimizer's operators per parameter tensor it
    steps; ``dtensor_share``: the share of a tensor-parallel layer's operators that run on DTensors, without
    and with sequence parallelism (0 where TP is built on plain tensors)."""

    dense_layer: tuple[float, float]
    moe_layer: tuple[float, float]
    per_local_expert: tuple[float, float]
    ends: tuple[float, float]
    optimizer_per_tensor: float
    dtensor_share: tuple[float, float] = (0.0, 0.0)


# The reference trainer (asap.runners.torch.model), counted by a dispatch mode over one forward and one backward
# (tests/cost/test_host_overhead.py recounts them): a dense block 97 + 156 operators; an MoE block 126 + 193 plus 8 +
# 23 per local expert (its experts run in a loop); embedding, final norm, head and cross-entropy 13 + 18; AdamW
# (torch's single-tensor path on CPU) 13 per tensor. Under tensor parallelism (DTensor, torch's
# parallelize_module) 34% of a layer's operators run on DTensors, 55% with sequence parallelism.
EAGER_HOST_OPS = HostOps(dense_layer=(97, 156), moe_layer=(126, 193), per_local_expert=(8, 23), ends=(13, 18),
                         optimizer_per_tensor=13, dtensor_share=(0.34, 0.55))
# torchtitan: the same eager module structure (the reference trainer follows it), grouped-GEMM experts
TORCHTITAN_HOST_OPS = replace(EAGER_HOST_OPS, per_local_expert=(0, 0), optimizer_per_tensor=0.1)
# Transformer Engine stacks (Megatron-Core, MindSpeed): fused norm+linear, fused attention, fused RoPE and
# bias-activation kernels, grouped expert GEMMs, a multi-tensor fused Adam: about a third of the eager count
FUSED_HOST_OPS = HostOps(dense_layer=(35, 55), moe_layer=(60, 90), per_local_expert=(0, 0), ends=(8, 12),
                         optimizer_per_tensor=0.1)
# Megatron-Core's MoE layer on the host: its router (top-k, score function, aux loss), the token dispatcher's
# preprocessing (token counts, splits, the permutes, the dispatch and combine calls) and Transformer Engine's
# GroupedLinear (torch.split, output allocations per expert, then one cuBLAS GEMM per local expert over a few
# streams: TransformerEngine#853, #1499 "It's the CPU overheads of PyTorch ops ... not trivial to eliminate"),
# forward and backward, behind the dispatcher's token-count sync that leaves the host no lead (asap.cost.host).
# Megatron-Core's MoE README names the bottleneck ("CPU Overhead Bottleneck: gaps between GPU kernels where CPU
# cannot launch kernels fast enough"; remedies: CUDA graphs of attn/moe_router/moe_preprocess, a larger
# micro-batch, a smaller TP) and sizes nothing, so the count is fitted on the two shipped files: 1500 operator
# dispatches per MoE layer and micro-batch (9 ms at 6 us each), ten times the fused estimate above, split
# forward/backward as it is (2:3). A layer whose device time exceeds it hides it (max(host, device)), so only
# micro-batch-1 MoE runs of thin layers move: Qwen3-30B-A3B on 16 H100 -24.0% -> -1.5%, Qwen3-235B on 256
# B200 -23.1% -> -14.3%. Checked, not fitted, on same-stack rows outside the files: the Model Zoo's Qwen3-235B
# TP4 PP8 EP8 MBS1 on 256 H100 (29.0 s) -41.7% -> -4.4%, Megatron-Bridge 26.02's Qwen3-30B-A3B MBS1 on 8 B200
# (9691 tokens/s/GPU) -56.6% -> +4.4%; the Model Zoo's TP2 EP32 runs (12-13 ms of device work per layer and
# micro-batch) do not move.
MEGATRON_MOE_HOST_OPS = (600.0, 900.0)
MEGATRON_HOST_OPS = replace(FUSED_HOST_OPS, moe_layer=MEGATRON_MOE_HOST_OPS)
# Megatron-DeepSpeed: Megatron's fused kernels without Transformer Engine, experts in a loop (DeepSpeed-MoE)
DEEPSPEED_HOST_OPS = replace(FUSED_HOST_OPS, dense_layer=(50, 80), per_local_expert=(8, 23))
# XLA compiles the whole step: the host launches one program
COMPILED_HOST_OPS = HostOps(dense_layer=(0, 0), moe_layer=(0, 0), per_local_expert=(0, 0), ends=(0, 0),
                            optimizer_per_tensor=0)


@dataclass(frozen=True)
class PipelineDefaults:
    """What a stack's pipeline gets from its config when a run leaves the knobs unset (torchtitan v0.2.2,
    ``torchtitan/config/job_config.py`` Parallelism and ``torchtitan/distributed/pipeline_parallel.py``):
    ``pipeline_parallel_microbatch_size = 1``, so a step runs local_batch_size micro-batches of one sample;
    ``pipeline_parallel_schedule = "1F1B"``; without ``pipeline_parallel_layers_per_stage``, one stage per rank
    for a single-stage schedule (1F1B, GPipe) and two for a looped one (Interleaved1F1B, the zero-bubble
    schedules); ``generate_llm_fqn_per_model_part`` splits L + 2 effective layers evenly over the stages, the
    embedding and the output counted as one layer each (``pipeline_parallel_first_stage_less_layers`` /
    ``_last_stage_less_layers`` = 1), the remainder to the first stages."""

    micro_batch_size: int = 1
    schedule: str = "1f1b"
    looped_stages_per_rank: int = 2
    first_stage_less_layers: int = 1
    last_stage_less_layers: int = 1

    def stages_per_rank(self, schedule: str) -> int:
        return 1 if schedule in SINGLE_STAGE_SCHEDULES else self.looped_stages_per_rank

    def layer_split(self, num_layers: int, stages: int) -> tuple[int, ...]:
        """Transformer layers per stage as ``generate_llm_fqn_per_model_part`` places them."""
        first, last = self.first_stage_less_layers, self.last_stage_less_layers
        per, extra = divmod(num_layers + first + last, stages)
        counts = [per + (1 if i < extra else 0) for i in range(stages)]
        counts[0] -= first
        counts[-1] -= last
        return tuple(counts)


SINGLE_STAGE_SCHEDULES = ("1f1b", "gpipe")  # torch.distributed.pipelining's PipelineScheduleSingle ones


class GradSync(str, Enum):
    """When data-parallel gradients are reduced under ZeRO 0/1."""

    PER_STEP = "per_step"  # accumulate locally, reduce once as the last micro-batch's backward completes
    PER_MICRO_BATCH = "per_micro_batch"


@dataclass(frozen=True, kw_only=True)
class Framework:
    name: str
    zero_le1_grad_sync: GradSync  # ZeRO 0/1
    zero2_grad_per_micro_batch: bool  # ZeRO-2 reduce-scatters every micro-batch
    fsdp_keeps_params_under_pp: bool  # ZeRO-3 with pp > 1: gather once per step, sync gradients once
    collectives_per_layer: int  # ZeRO-3 weight gathers per transformer layer and pass (FSDP: one per block)
    async_collectives: bool  # the compiler overlaps every data-parallel collective with compute (XLA)
    dispatcher: Dispatcher  # the default MoE dispatcher
    a2a_overlap: int  # the default of the expert all-to-all overlap switch
    offers: Mapping[str, tuple]  # the options the stack has, per strategy key (absent: every option)
    # context parallelism's exchange when cp > 1 (``asap.spec.knobs.CpComm``): Megatron-Core's --cp-comm-type
    # default p2p (transformer_config.py ``cp_comm_type``); MaxText all-gathers K,V (its only context
    # parallelism); MindFormers' ``context_parallel_algo`` default ``colossalai_cp`` (K,V all-gathered, Q kept
    # sharded; ``ulysses_cp`` the all-to-all); torchtitan's context_parallel passes K,V around a ring
    cp_comm: str = "p2p"
    # whose ring attention runs under cp_comm=p2p: Transformer Engine's, or torch's context_parallel (torchtitan's
    # apply_cp, the reference trainer: ``_cp_options.rotate_method`` ALL_GATHER, convert_to_f32)
    cp_ring: CpRing = CpRing.TE
    zero_default: int = 1  # the data-parallel sharding a run gets when it names none
    elementwise_traffic: float = 1.0  # HBM traffic of norms, RoPE, activations, residuals over fused kernels
    # does the stack run fused elementwise kernels by default: Megatron-Core / Transformer Engine (fused
    # RMSNorm, RoPE, SwiGLU, bias-dropout-add: --normalization RMSNorm with TE, --apply-rope-fusion,
    # --bias-swiglu-fusion, --bias-dropout-fusion default on), MindSpeed, XLA (MaxText: the compiler fuses),
    # Megatron-DeepSpeed (Megatron's fused kernels); not torchtitan (eager unless ``compile.enable``) nor the
    # reference trainer (eager)
    fused_elementwise: bool = True
    max_zero_with_pp: int = 3  # the deepest ZeRO stage the stack combines with pipeline parallelism
    allocator: Allocator = Allocator.CACHING  # how its device memory is allocated (``asap.cost.allocator``)
    # under sequence parallelism the GEMMs after a norm save the all-gathered input, T x h, not the local shard
    # (``layer_ops.Shapes.norm_output``): DTensor TP (torchtitan's and the reference trainer's plans:
    # PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate()) before ColwiseParallel wq/wk/wv
    # and w1/w3, runners/torch/parallel.py), where aten.mm saves the redistributed input; Megatron-Core and TE save
    # the local shard and all-gather it again in backward. torchtitan's op-level SAC does not save the all-gather's
    # output (``_c10d_functional.all_gather_into_tensor`` is off its save list), so there it is recomputed.
    sp_gathered_input: bool = False
    fsdp_grad_bytes: float = 4.0  # bytes per gradient element that ZeRO-3 accumulates and reduce-scatters
    selective: SelectivePolicy = SelectivePolicy.KERNELS  # what ``recompute=selective`` recomputes
    host_ops: HostOps = field(default=FUSED_HOST_OPS)  # what its host dispatches (``asap.cost.host``)
    # ZeRO-1's weight gather after the optimizer step: one collective per parameter tensor (torch's
    # ZeroRedundancyOptimizer broadcasts each from its owner) instead of a bucketed all-gather
    zero1_gather_per_tensor: bool = False
    # the data-parallel collectives overlap compute (bucketed reduction during backward, gathers during the
    # next forward); False: they run after the backward, exposed
    dp_overlap: bool = True
    # the Megatron-Core recompute modules the stack offers for ``recompute=a+b`` (None: all of them)
    recompute_modules: tuple[str, ...] | None = None
    # FSDP wraps the token embedding as its own unit (torchtitan's apply_fsdp: tok_embeddings, each block, then
    # [norm, output]): each forward starts with its gather and the backward ends with its reduce-scatter,
    # with nothing to overlap either (``estimate.data_parallel_terms``)
    fsdp_embedding_unit: bool = False
    # the MoE dispatcher copies the routed token counts to the host and waits on them once per MoE layer
    # forward (``asap.cost.host.moe_syncs``); XLA compiles static shapes and needs none
    moe_host_sync: bool = True
    # the row tile of the stack's grouped expert GEMM when it is a fixed-tile kernel that visits a tile
    # straddling two experts' rows once per expert (masked), so each local expert adds about one tile of rows
    # (``asap.cost.layer_ops.moe_mlp_ops``); 0: none priced (cuBLAS/CUTLASS grouped GEMMs tile each expert's
    # rows in 64-256, a small share of the thousands of rows an expert gets)
    expert_row_tile: float = 0.0
    # the attention kernel the stack calls: torchtitan's and the reference trainer's models call
    # F.scaled_dot_product_attention (torchtitan models/attention.py ScaledDotProductAttention)
    attention_kernel: AttentionKernel = AttentionKernel.FUSED
    # activation offload combines with pipeline parallelism (Megatron-Core's TransformerConfig refuses
    # cpu_offloading with pipeline_model_parallel_size > 1)
    offload_act_with_pp: bool = True
    # the data-parallel bucket (``asap.cost.dp_overlap``): (elements, elements per data-parallel rank), the
    # bucket max(first, second x dp_cp); Megatron-Core's DistributedDataParallelConfig.bucket_size default
    # max(40000000, 1000000 * dp_cp size). From ZeRO stage ``fsdp_zero`` on the stack shards by FSDP units
    # and reduces one layer at a time instead.
    dp_bucket: tuple[float, float] = (4e7, 1e6)
    fsdp_zero: int = 3
    # what a run of this stack gets for the pipeline knobs its config leaves unset (``unstated_defaults``)
    pipeline_defaults: PipelineDefaults | None = None
    # the recomputation a run gets when its config names none: Megatron-Core ``--recompute-granularity`` None,
    # DeepSpeed off, MindFormers ``recompute: False``; torchtitan ``activation_checkpoint.mode = "selective"``;
    # MaxText ``remat_policy: 'full'`` (base.yml)
    recompute_default: str = "none"
    # the stack overlaps tensor-parallel collectives with the GEMMs they feed (the family's ``tp_overlap``
    # share): Megatron-Core/NeMo with Transformer Engine userbuffers (``tp_comm_overlap``, on in the NeMo and
    # Megatron-Bridge recipes), MindSpeed's MC2 (``--use-ascend-mc2``), XLA's collective matmul; not
    # torchtitan, whose async TP (``parallelism.enable_async_tensor_parallel``, default false, and only under
    # ``torch.compile``) a run must turn on: its plain TP issues each DTensor all-gather / reduce-scatter
    # before the matmul that needs it (torchtitan docs/async_tp.md; Wang et al. 2022, "Overlap communication
    # with dependent computation via decomposition")
    tp_comm_overlap: bool = True
    # bytes per logit the loss holds (None: the activation dtype plus an fp32 copy; ``XLA_LOGITS_BYTES``); a pair:
    # (without tensor parallelism, with it: the vocabulary-parallel loss), ``TORCHTITAN_LOGITS_BYTES``
    logits_bytes: LogitsBytes = None
    # torch.compile, where the stack's kernels are compiled (``fused_elementwise``), compiles the loss too (unless
    # ``TrainSpec.compiled_loss`` says otherwise): without TP it holds COMPILED_LOGITS_PER_ACT_BYTE x act bytes
    compile_covers_loss: bool = False
    # the stack keeps a 16-bit copy of the weights beside the optimizer's fp32 master (Megatron-Core's
    # Float16Module and distributed optimizer, DeepSpeed's fp16/bf16 partitions, MindSpore's O2 cast). Not
    # torchtitan: FSDP2's MixedPrecisionPolicy keeps the sharded parameters in their fp32 dtype and casts to
    # param_dtype only for the all-gather (torch.distributed.fsdp.MixedPrecisionPolicy docs), the optimizer
    # steps those fp32 shards (no separate master); under DDP the model stays fp32 and autocast casts per
    # operator. Not MaxText: ``weight_dtype: float32`` (base.yml) holds the parameters in fp32 and ``dtype:
    # bfloat16`` casts them in the computation.
    half_weight_copy: bool = True
    # how the stack's forced load balance routes (what ``train.moe_imbalance`` 1.0 means): round-robin, token i
    # of a rank's micro-batch to the top_k consecutive experts k i .. k i + k - 1 (mod E), so a token's experts
    # sit on one or two neighbouring ranks of the expert-sharded mesh (torchtitan ``MoEArgs._debug_force_load_
    # balance``, ``TokenChoiceTopKRouter._debug_force_load_balance_routing``; NeMo AutoModel's
    # ``FakeBalancedGate``: ``arange(n_tokens * k).view(-1, k) % n_experts``, experts sharded Shard(0) over the
    # ep mesh); False: random logits, every expert equally likely (Megatron-Core
    # ``--moe-router-force-load-balancing``: ``apply_random_logits``), the uniform routing of ``expert_dispatch_s``
    round_robin_balance: bool = False
    # the ZeRO stages the stack combines with hybrid sharding (``dp_replicate`` > 1; module docstring); ():
    # none
    hsdp_zero: tuple[int, ...] = ()
    # torch's DistributedDataParallel for zero 0 and 1 (the reference trainer's ``apply_ddp``; torchtitan's
    # ``replicate(model, bucket_cap_mb=100)``): the Reducer allocates its buckets as flat tensors of their own
    # and copies each gradient in (``gradient_as_bucket_view`` False, the default: torch/nn/parallel/
    # distributed.py), so the gradients are held twice, ``param.grad`` and the bucket. Megatron-Core's
    # contiguous grad buffer (``main_grad``) and DeepSpeed's partitions are the one copy.
    ddp_bucket_copy: bool = False
    # the stack clears a contiguous gradient buffer every step (Megatron-Core ``zero_grad_buffer()``:
    # ``grad_data.zero_()``, param_and_grad_buffer.py), a memset of the stage's gradients; torch stacks free
    # their gradients (``zero_grad(set_to_none=True)``) and XLA allocates them in the step (asap.cost.step_fixed)
    grad_buffer_zeroed: bool = False
    # the stack all-reduces the step's loss over the data-parallel group every step, not only at log steps
    # (Megatron-LM ``train_step``: ``all_reduce(val, group=get_data_parallel_group(with_context_parallel=True))``
    # of the summed loss and token count, megatron/training/training.py; torchtitan reduces it at its log steps,
    # XLA inside the step's program): a small collective on the step's critical path (asap.cost.step_fixed)
    loss_all_reduce: bool = False
    # torch FSDP2 (``torch.distributed.fsdp.fully_shard``) shards from ``fsdp_zero`` on: during each block's
    # backward it holds the block's unsharded gradient (in the all-gather dtype) and then copies it into a flat
    # reduce-scatter input in ``reduce_dtype``, keeping the previous block's input until this block's
    # post-backward (``_fsdp_collectives.foreach_reduce``; ``FSDPParamGroup.post_backward`` pops the retained
    # ``reduce_scatter_states`` down to ``reduce_scatter_max_input_buffers`` = 1 before appending its own):
    # one block's parameters once in each dtype beside the sharded gradients (``fsdp_reduce_buffers``)
    fsdp2_reduce_buffers: bool = False
    # the units outside the blocks that FSDP2 keeps gathered from the forward to the end of the backward under
    # ZeRO-3: the root ``fully_shard(model)`` never reshards after forward (``FSDPState._lazy_init`` sets the
    # root groups' ``post_forward_mesh_info`` to None), so what only the root wraps stays unsharded; torchtitan
    # wraps ``[norm, output]`` with ``reshard_after_forward = policy == "always"`` (False by default, models/
    # llama3/infra/parallelize.py ``apply_fsdp``) and the embedding as a unit of its own, resharded; the
    # reference trainer (``asap.runners.torch.parallel.apply_fsdp``) leaves the embedding, final norm and head
    # to the root. Names from ("embedding", "head").
    fsdp_unresharded_units: tuple[str, ...] = ()
    # the loss runs on each rank's vocabulary shard of the logits under tensor parallelism (Megatron-Core's
    # vocab_parallel_cross_entropy; torchtitan's ``loss_parallel`` unless ``parallelism.disable_loss_parallel``:
    # the head's ColwiseParallel keeps ``Shard(-1)``); False: the head all-gathers the logits to every rank and
    # the loss runs on the whole vocabulary (the reference trainer's ``apply_tp``: ``ColwiseParallel(output_layouts
    # =Replicate())``), so each rank holds T x V logits, not T x V / tp
    loss_parallel: bool = True
    # low-precision weights through Transformer Engine, which keeps a rowwise and a columnwise quantised copy of
    # each (``asap.cost.device_memory.quantised_weight_copies``): Megatron-Core
    te_columnwise_weights: bool = False
    # Transformer Engine's userbuffers hold the tensor-parallel overlap's communication buffers (Megatron-Core's
    # ``--tp-comm-overlap``, on in the NeMo and Megatron-Bridge recipes: ``tp_comm_overlap``), registered outside
    # PyTorch's allocator (``asap.cost.device_memory.tp_comm_buffer_bytes``)
    te_userbuffers: bool = False

    def tp_overlap_share(self, fam) -> float:
        """The share of tensor-parallel traffic this stack hides behind GEMMs on a family (``Family``)."""
        return fam.tp_overlap if self.tp_comm_overlap else 0.0

    def dp_bucket_elements(self, zero, dp_cp):
        """Elements per data-parallel bucket for each row; 0 where the stack reduces per FSDP unit (a layer)."""
        first, per_rank = self.dp_bucket
        return np.where(np.asarray(zero) >= self.fsdp_zero, 0.0, np.maximum(first, per_rank * np.asarray(dp_cp)))

    def grad_bytes(self, precision: str, zero, grad_bf16=0):
        """Bytes per gradient element in the buffer and on the wire: fp32 (Megatron turns
        ``accumulate_allreduce_grads_in_fp32`` on for bf16; FSDP2's ``reduce_dtype`` float32 in torchtitan; ZeRO
        and XLA keep fp32 master gradients), except the stack's ZeRO-3 where its documented setting reduces
        in 16 bits (Megatron-FSDP's user guide: ``--grad-reduce-in-bf16``), or where the strategy's ``grad_bf16``
        asks for it (Megatron-Core ``DistributedDataParallelConfig.grad_reduce_in_fp32=False``: the grad buffer
        in the params' dtype, megatron/core/distributed/distributed_data_parallel.py ``grad_dtype``, core 0.16)."""
        wide = 4.0 if precision == "fp32" else np.where(np.asarray(zero) >= 3, self.fsdp_grad_bytes, 4.0)
        narrow = (np.asarray(grad_bf16) > 0) & (precision != "fp32")
        return np.asarray(np.where(narrow, 2.0, wide), dtype=float)

    def elementwise_traffic_for(self, fused: bool | None = None) -> float:
        """The elementwise term's traffic over fused kernels: 1 fused, the stack's eager factor (at least
        EAGER_ELEMENTWISE_TRAFFIC) unfused; None: the stack's default (``fused_elementwise``). Pricing both
        predicts what ``torch.compile`` or fused kernels gain, or what turning them off costs."""
        on = self.fused_elementwise if fused is None else fused
        return 1.0 if on else max(self.elementwise_traffic, EAGER_ELEMENTWISE_TRAFFIC)


_ALL_SCHEDULES = ("1f1b", "interleaved", "zb", "gpipe")
TORCHTITAN_PIPELINE = PipelineDefaults()

FRAMEWORKS: Mapping[str, Framework] = MappingProxyType({f.name: f for f in (
    Framework(name="megatron", zero_le1_grad_sync=GradSync.PER_STEP, zero2_grad_per_micro_batch=True,
              fsdp_keeps_params_under_pp=False, collectives_per_layer=1, async_collectives=False,
              dispatcher=Dispatcher.ALLTOALL, a2a_overlap=0,
              # pretrain_gpt.py's schedules: 1F1B and interleaved 1F1B (no zero-bubble or GPipe flag, core_r0.14.0)
              offers={"schedule": ("1f1b", "interleaved"), "dispatcher": DISPATCHERS, "zero": (0, 1, 3),
                      "cp_comm": ("p2p", "a2a", "allgather", "a2a+p2p"), "vocab_tiles": (1,)},
              fsdp_grad_bytes=2.0, offload_act_with_pp=False, hsdp_zero=(1, 3), host_ops=MEGATRON_HOST_OPS,
              grad_buffer_zeroed=True, loss_all_reduce=True, te_columnwise_weights=True,
              te_userbuffers=True),
    Framework(name="deepspeed", zero_le1_grad_sync=GradSync.PER_STEP, zero2_grad_per_micro_batch=True,
              fsdp_keeps_params_under_pp=False, collectives_per_layer=ZERO3_MODULES_PER_LAYER, async_collectives=False,
              dispatcher=Dispatcher.ALLTOALL, a2a_overlap=0,
              offers={"schedule": ("1f1b",), "vpp": (1,), "recompute": ("none", "full"), "sp": (0,), "cp": (1,),
                      "dispatcher": ("alltoall",), "a2a_overlap": (0,), "fp8_param": (0,), "offload_act": (0,),
                      "grad_bf16": (0,), "vocab_tiles": (1,), "cp_a2a": (1,)},
              max_zero_with_pp=1,
              host_ops=DEEPSPEED_HOST_OPS, recompute_modules=(),
              # ZeRO-3 reduce-scatters in the gradients' own dtype (communication_data_type defaults to it);
              # ZeRO-1/2 and plain data parallelism reduce in buckets of reduce_bucket_size = 5e8 elements
              fsdp_grad_bytes=2.0, dp_bucket=(5e8, 0.0), hsdp_zero=(3,)),
    Framework(name="torchtitan", zero_le1_grad_sync=GradSync.PER_STEP, zero2_grad_per_micro_batch=True,
              fsdp_keeps_params_under_pp=True, collectives_per_layer=1, async_collectives=False,
              dispatcher=Dispatcher.ALLTOALL, a2a_overlap=0,
              offers={"schedule": _ALL_SCHEDULES, "zero": (0, 2, 3), "dispatcher": ("alltoall", "dedup"), "cp_comm": ("p2p",),
                      "a2a_overlap": (0,), "offload_act": (0,), "fp8_param": (0,), "grad_bf16": (0,),
                      "vocab_tiles": (1,), "cp_a2a": (1,)}, zero_default=3,
              elementwise_traffic=EAGER_ELEMENTWISE_TRAFFIC, fused_elementwise=False, allocator=Allocator.EXPANDABLE,
              selective=SelectivePolicy.OP_SAC, host_ops=TORCHTITAN_HOST_OPS, recompute_modules=(),
              fsdp_embedding_unit=True, recompute_default="selective", pipeline_defaults=TORCHTITAN_PIPELINE,
              attention_kernel=AttentionKernel.SDPA, cp_ring=CpRing.TORCH,
              # DDP (apply_ddp: replicate(..., bucket_cap_mb=100): 100 MiB of fp32 gradients); FSDP2 per block
              dp_bucket=(100 * 2 ** 20 / 4, 0.0), fsdp_zero=2, tp_comm_overlap=False, half_weight_copy=False,
              round_robin_balance=True, hsdp_zero=(2, 3), ddp_bucket_copy=True, fsdp2_reduce_buffers=True,
              fsdp_unresharded_units=("head",), logits_bytes=TORCHTITAN_LOGITS_BYTES, compile_covers_loss=True,
              sp_gathered_input=True),
    Framework(name="maxtext", zero_le1_grad_sync=GradSync.PER_STEP, zero2_grad_per_micro_batch=True,
              fsdp_keeps_params_under_pp=False, collectives_per_layer=1, async_collectives=True,
              dispatcher=Dispatcher.ALLTOALL, a2a_overlap=0,
              offers={"schedule": ("1f1b", "interleaved", "gpipe"), "zero": (0, 3),
                      "dispatcher": ("alltoall",), "a2a_overlap": (0,), "fp8_param": (0,), "grad_bf16": (0,),
                      # base.yml context_parallel_strategy: all_gather (default) or ulysses (TPU)
                      "cp_comm": ("allgather", "a2a"), "cp_a2a": (1,)},
              zero_default=3, cp_comm="allgather",
              allocator=Allocator.STATIC, host_ops=COMPILED_HOST_OPS, recompute_modules=(),
              moe_host_sync=False, recompute_default="full", logits_bytes=XLA_LOGITS_BYTES,
              # MaxText's sparse_matmul runs megablox gmm (Pallas) with tiling (tile_batch_seq 512, ...) from
              # configs/base.yml; its group metadata (make_group_metadata) visits a row tile shared by two
              # groups once per group
              expert_row_tile=512.0,
              dp_bucket=(0.0, 0.0), fsdp_zero=0, half_weight_copy=False, hsdp_zero=(3,)),  # XLA reduces per scanned layer
    Framework(name="mindspore", zero_le1_grad_sync=GradSync.PER_STEP, zero2_grad_per_micro_batch=True,
              fsdp_keeps_params_under_pp=False, collectives_per_layer=1, async_collectives=False,
              dispatcher=Dispatcher.DEDUP, a2a_overlap=1, cp_comm="allgather",
              # MindFormers' moe_config: all-to-all, or deduplicated (enable_deredundency); no all-gather dispatcher
              offers={"schedule": ("1f1b", "interleaved"), "zero": (0, 1), "dispatcher": ("alltoall", "dedup"),
                      "cp_comm": ("allgather", "a2a"), "offload_act": (0,), "offload_opt": (0,), "fp8_param": (0,), "grad_bf16": (0,),
                      "vocab_tiles": (1,), "cp_a2a": (1,)},
              # MindSpore's comm_fusion "auto" mode fuses gradient all-reduces up to 64 MB (fp32 elements)
              dp_bucket=(64 * 2 ** 20 / 4, 0.0), hsdp_zero=(1,)),
    # the reference trainer (``asap run``): DDP (or one all-reduce after the backward under pp or DTensor TP),
    # torch's ZeroRedundancyOptimizer for zero 1 (a broadcast per parameter tensor after the step), FSDP2 per
    # block for zero 2/3, DTensor TP, torch.distributed.pipelining, eager kernels, experts in a loop
    Framework(name="asap", zero_le1_grad_sync=GradSync.PER_STEP, zero2_grad_per_micro_batch=True,
              fsdp_keeps_params_under_pp=False, collectives_per_layer=1, async_collectives=False,
              dispatcher=Dispatcher.ALLTOALL, a2a_overlap=0,
              offers={"dispatcher": ("alltoall",), "a2a_overlap": (0,), "offload_act": (0,), "offload_opt": (0,),
                      "fp8_param": (0,), "grad_bf16": (0,), "cp_comm": ("p2p",), "vocab_tiles": (1,), "cp_a2a": (1,)},
              elementwise_traffic=EAGER_ELEMENTWISE_TRAFFIC, fused_elementwise=False,
              selective=SelectivePolicy.CORE_ATTN, host_ops=EAGER_HOST_OPS, zero1_gather_per_tensor=True,
              dp_overlap=False, recompute_modules=("core_attn", "layernorm", "mlp", "moe"), fsdp_zero=2,
              attention_kernel=AttentionKernel.SDPA, ddp_bucket_copy=True, fsdp2_reduce_buffers=True,
              fsdp_unresharded_units=("embedding", "head"), loss_parallel=False, cp_ring=CpRing.TORCH,
              logits_bytes=EAGER_LOGITS_BYTES, sp_gathered_input=True),
)})
FRAMEWORK_NAMES = tuple(FRAMEWORKS)
# every other family: megatron; a CPU is where the reference trainer runs
DEFAULT_BY_FAMILY = {"tpu": "maxtext", "ascend": "mindspore", "cpu": "asap"}


def default_framework(accelerator_family: str) -> str:
    """GPU stacks default to Megatron, TPUs to MaxText, Ascend to MindSpore (docs/design.md); CPUs to the reference
    trainer (``asap run``), whose semantics a CPU estimate has to follow."""
    return DEFAULT_BY_FAMILY.get(accelerator_family, "megatron")


def get_framework(name: str | None, accelerator_family: str, field: str = "framework") -> Framework:
    key = default_framework(accelerator_family) if name in (None, "") else str(name).lower().strip()
    if key not in FRAMEWORKS:
        raise AsapError(field, f"unknown framework '{name}' (known: {', '.join(FRAMEWORK_NAMES)})")
    return FRAMEWORKS[key]


def unstated_defaults(framework: Framework, stated: Mapping, num_layers: int) -> dict:
    """The knobs a published run of this stack had without stating them: its config's defaults (the
    data-parallel sharding, the recomputation; under a pipeline, the stack's ``pipeline_defaults``: micro-batch
    size, schedule, stages per rank and layer split), not the fastest completion. Keys in ``stated`` (a parsed
    partial strategy) are left alone; a default the stack does not offer is left open. The expert all-to-all
    overlap is an opt-in switch with a default (Megatron-Core ``overlap_moe_expert_parallel_comm = False``;
    Megatron-Bridge's ``comm_overlap.py`` leaves it off unless a recipe turns it on, and the case files pin it
    where their source names it): a run that does not state it had it off. The dispatcher stays open: every
    MoE run uses one, the sources tune it, and Megatron-Core's default (allgather) would price runs it did not
    make."""
    out: dict = {"zero": framework.zero_default, "recompute": framework.recompute_default,
                 "a2a_overlap": framework.a2a_overlap}
    if int(stated.get("cp", 1)) > 1:  # context parallelism's exchange: the stack's default (``Framework.cp_comm``)
        out["cp_comm"] = framework.cp_comm
    pipe = framework.pipeline_defaults
    pp = int(stated.get("pp", 1))
    if pipe is not None and pp > 1:
        looped = "interleaved" if int(stated.get("vpp", 1)) > 1 else pipe.schedule
        schedule = str(stated.get("schedule", looped))
        vpp = int(stated.get("vpp", pipe.stages_per_rank(schedule)))
        out.update(mbs=pipe.micro_batch_size, schedule=schedule, vpp=vpp)
        split = pipe.layer_split(num_layers, pp * vpp) if pp * vpp <= num_layers else ()
        if split and min(split[1:-1] or (1,)) >= 1 and min(split) >= 0:
            out["layer_split"] = split
    return {k: v for k, v in out.items()
            if k not in stated and (framework.offers.get(k) is None or v in framework.offers[k])}


def offered(framework: Framework, key: str, values) -> list:
    """The candidate values of a strategy key that the stack offers."""
    allowed = framework.offers.get(key)
    return list(values) if allowed is None else [v for v in values if v in allowed]
