"""Megatron-LM ``pretrain_gpt.py`` command-line arguments.

Option names follow Megatron-LM core_r0.14.0 (``megatron/training/arguments.py``): the parallel sizes,
``--num-virtual-stages-per-pipeline-rank``, ``--pipeline-model-parallel-layout`` (``E`` embedding, ``t`` a
transformer layer, ``m`` an MTP layer, ``L`` the loss, ``|`` between virtual stages) for splits the uniform
division cannot give, ``--use-distributed-optimizer`` (zero 1), Megatron-FSDP (``--use-megatron-fsdp
--data-parallel-sharding-strategy optim_grads|optim_grads_params``, zero 2/3), ``--num-distributed-optimizer-
instances`` (dp_replicate: the distributed optimizer, or Megatron-FSDP's HSDP, within each of that many replicas),
``--recompute-granularity`` /
``--recompute-modules`` / ``--recompute-method``, ``--moe-token-dispatcher-type`` (``flex`` with
``--moe-enable-deepep`` for the node-deduplicated dispatcher) and ``--overlap-moe-expert-parallel-comm``.
Not expressible (refused): the zero-bubble and GPipe schedules (no flag in Megatron-LM's training loop); the
expert all-to-all overlap without expert parallelism, without virtual stages under a pipeline, with full
recomputation or outside bf16/fp16 (TransformerConfig rejects each).
"""

from __future__ import annotations

from asap.spec.framework import Dispatcher
from asap.spec.knobs import Recompute, Schedule
from asap.emit.common import check_runnable, chunk_layers, micro_batches, recompute_modules, refuse
from asap.emit.megatron_model import model_args, router_args
from asap.emit.launch import Launch, RunLength, rendezvous_to_set, torchrun, torchrun_where
from asap.spec.job import Job

NAME = "megatron"
CONFIG = "pretrain_gpt_args.txt"  # the file name the launch line reads the arguments from
VERSION = "Megatron-LM core_r0.14.0 (megatron/training/arguments.py)"
SELECTIVE_MODULES = ("core_attn", "layernorm", "moe_act")  # asap.spec.framework.SelectivePolicy.KERNELS


MOE_MODULES = ("moe_act", "moe", "shared_experts")  # TransformerConfig rejects moe_act without MoE grouped GEMMs
MLA_MODULES = ("mla_up_proj",)  # and mla_up_proj without multi-latent attention


def modules_for(model, mods) -> list[str]:
    """The recompute modules that exist in ``model``: on a dense model the MoE ones recompute nothing."""
    absent = (MOE_MODULES if model.moe is None else ()) + (MLA_MODULES if model.mla is None else ())
    return [m for m in mods if m not in absent]


def pipeline_layout(model, s) -> str:
    chunks = chunk_layers(model, s)
    parts = []
    for j, n in enumerate(chunks):
        p = ("E" if j == 0 else "") + "t" * n
        if j == len(chunks) - 1:
            p += "m" * model.mtp_layers + "L"
        parts.append(p)
    return "|".join(parts)


def parallel_args(model, train, s) -> list[tuple[str, ...]]:
    a: list[tuple[str, ...]] = [
        ("--tensor-model-parallel-size", str(s.tp)),
        ("--pipeline-model-parallel-size", str(s.pp)),
        ("--context-parallel-size", str(s.cp)),
    ]
    if s.cp > 1 and s.cp_comm != "p2p":  # TransformerConfig.cp_comm_type (default p2p)
        a.append(("--cp-comm-type", te_cp_comm_type(str(s.cp_comm))))
    if s.cp > 1 and s.cp_comm == "a2a+p2p":  # parallel_state: the a2a group first, their product cp
        a.append(("--hierarchical-context-parallel-sizes", str(s.cp_a2a), str(s.cp // s.cp_a2a)))
    if s.pp > 1:
        uniform = not s.layer_split and model.num_layers % (s.pp * s.vpp) == 0 and not model.mtp_layers
        if uniform:
            if s.vpp > 1:
                a.append(("--num-virtual-stages-per-pipeline-rank", str(s.vpp)))
        else:  # the layout gives the split, and the virtual stages with it
            a.append(("--pipeline-model-parallel-layout", pipeline_layout(model, s)))
    if model.moe is not None:
        a += [("--expert-model-parallel-size", str(s.ep)), ("--expert-tensor-parallel-size", str(s.etp))]
    a += [("--micro-batch-size", str(s.mbs)), ("--global-batch-size", str(train.global_batch)),
          ("--seq-length", str(train.seq_len)), ("--max-position-embeddings", str(train.seq_len))]
    if s.sp:
        a.append(("--sequence-parallel",))
    return a + data_parallel_args(train, s)


def data_parallel_args(train, s) -> list[tuple[str, ...]]:
    """ZeRO 0: DDP; 1: the distributed optimizer; 2/3: Megatron-FSDP with the flags its user guide requires
    (docs/discussions/megatron-fsdp-user-guide: --use-distributed-optimizer, --no-gradient-accumulation-fusion,
    --ckpt-format fsdp_dtensor), reducing in bf16 under zero 3 as asap prices it (Framework.fsdp_grad_bytes).
    The data-parallel collectives overlap compute (asap's megatron semantics): --overlap-grad-reduce, and
    --overlap-param-gather with the distributed optimizer. ``grad_bf16`` (16-bit gradients): --grad-reduce-in-bf16.
    ``dp_replicate`` > 1: --num-distributed-optimizer-instances (DistributedDataParallelConfig: the distributed
    optimizer sharded within an instance, the gradient shards all-reduced across instances; Megatron-FSDP turns
    HSDP on with it, ``mcore_fsdp_adapter.py``, outer_dp_sharding_strategy 'no_shard')."""
    return data_parallel_sharding(train, s) + hybrid_args(s)


def hybrid_args(s) -> list[tuple[str, ...]]:
    return [("--num-distributed-optimizer-instances", str(s.dp_replicate))] if s.dp_replicate > 1 else []


def data_parallel_sharding(train, s) -> list[tuple[str, ...]]:
    narrow: list[tuple[str, ...]]
    narrow = [("--grad-reduce-in-bf16",)] if s.grad_bf16 and s.zero < 3 and train.precision != "fp32" else []
    if s.zero == 0:
        return [("--overlap-grad-reduce",)] + narrow
    if s.zero == 1:
        return [("--use-distributed-optimizer",), ("--overlap-grad-reduce",), ("--overlap-param-gather",)] + narrow
    a: list[tuple[str, ...]]
    a = [("--use-megatron-fsdp",),
         ("--data-parallel-sharding-strategy", "optim_grads_params" if s.zero == 3 else "optim_grads"),
         ("--use-distributed-optimizer",), ("--no-gradient-accumulation-fusion",), ("--ckpt-format", "fsdp_dtensor")]
    if s.zero == 3 and train.precision != "fp32":
        a.append(("--grad-reduce-in-bf16",))
    return a


def recompute_args(model, s) -> list[tuple[str, ...]]:
    mods = modules_for(model, recompute_modules(s) or ())
    if s.recompute.kind == Recompute.FULL:
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    if s.recompute.kind == Recompute.SELECTIVE:
        mods = modules_for(model, SELECTIVE_MODULES)
    if mods:
        return [("--recompute-granularity", "selective"), ("--recompute-modules", *mods)]
    return []


def precision_args(train) -> list[tuple[str, ...]]:
    """bf16 weights for bf16 and fp8 (Transformer Engine's fp8 GEMMs, E4M3 forward / E5M2 backward, per-tensor
    current scaling: TransformerConfig refuses the default delayed scaling with the layernorm / moe_act
    recomputation asap's selective recompute is); fp16; fp32 has no flag. nvfp4: bf16 weights and Transformer
    Engine's NVFP4BlockScaling recipe on every transformer layer's linear layers (``--fp4-format e2m1
    --fp4-recipe nvfp4``: TransformerConfig's ``fp4`` / ``fp4_recipe``, megatron-core 0.16 ``fp4_utils.
    get_fp4_recipe``; ``--first-last-layers-bf16`` stays off, its default, as asap prices every layer in fp4).
    mxfp4 has no Megatron recipe (``fp4_recipe`` is 'nvfp4' or 'custom'): refused."""
    p = train.precision
    if p == "mxfp4":
        raise refuse("precision", "megatron", "mxfp4 (its fp4 recipe is Transformer Engine's nvfp4)")
    a: list[tuple[str, ...]] = [("--bf16",)] if p in ("bf16", "fp8", "nvfp4") else [("--fp16",)] if p == "fp16" else []
    if p == "fp8":
        a += [("--fp8-format", "hybrid"), ("--fp8-recipe", "tensorwise")]
    if p == "nvfp4":
        a += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    return a


def moe_args(model, s) -> list[tuple[str, ...]]:
    if model.moe is None:
        return []
    e = model.moe
    a: list[tuple[str, ...]]
    a = [("--moe-token-dispatcher-type", "flex"), ("--moe-enable-deepep",)] if s.dispatcher == Dispatcher.DEDUP else \
        [("--moe-token-dispatcher-type", s.dispatcher.value)]
    if s.a2a_overlap:
        a.append(("--overlap-moe-expert-parallel-comm",))
    a += [("--num-experts", str(e.num_experts)), ("--moe-router-topk", str(e.top_k)),
          ("--moe-ffn-hidden-size", str(e.expert_ffn_hidden_size)), ("--moe-grouped-gemm",)]
    if e.shared_experts:
        a.append(("--moe-shared-expert-intermediate-size", str(e.shared_experts * e.expert_ffn_hidden_size)))
    if e.first_dense_layers:
        a.append(("--moe-layer-freq", f"([0]*{e.first_dense_layers}+[1]*{model.num_layers - e.first_dense_layers})"))
    return a + router_args(model)


def args(job: Job, s) -> list[tuple[str, ...]]:
    model, train = job.model, job.train
    if s.schedule in (Schedule.ZB, Schedule.GPIPE):
        raise refuse("schedule", NAME, f"schedule={s.schedule} (pretrain_gpt.py runs 1F1B or interleaved 1F1B)")
    check_runnable(NAME, NAME, job, s)
    if s.offload_act:
        raise refuse("offload_act", NAME, "offload_act=1 (TransformerConfig.cpu_offloading has no pretrain_gpt.py "
                                          "argument at core_r0.14.0)")
    assert micro_batches(train, s) >= 1
    return (parallel_args(model, train, s) + recompute_args(model, s) + moe_args(model, s) + precision_args(train)
            + offload_args(s) + model_args(model, s.tp))


def offload_args(s) -> list[tuple[str, ...]]:
    """offload_opt: the optimizer step on the host, ``--optimizer-cpu-offload`` with the precision-aware optimizer
    validate_args requires beside it."""
    return [("--optimizer-cpu-offload",), ("--use-precision-aware-optimizer",)] if s.offload_opt else []


def run_args(run: RunLength) -> list[tuple[str, ...]]:
    """The budget's length (``asap.emit.launch.run_length``): --train-iters, the cosine schedule's warmup and
    decay, --save-interval (arguments.py's _add_training_args / _add_learning_rate_args / _add_checkpointing_args)."""
    if run.iterations is None:
        return []
    return [("--train-iters", str(run.iterations)), ("--lr-decay-style", "cosine"),
            ("--lr-warmup-iters", str(run.warmup_iters)), ("--lr-decay-iters", str(run.decay_iters)),
            ("--save-interval", str(run.checkpoint_interval))]


def launch(job: Job, s, run: RunLength | None = None, strict: bool = False) -> Launch:
    """Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh: ``torchrun $DISTRIBUTED_ARGS pretrain_gpt.py``
    with CUDA_DEVICE_MAX_CONNECTIONS exported (``max_connections``: what validate_args asks for); ``eval`` keeps
    the emitted file's quoting and line continuations."""
    conn = max_connections(s)
    to_set = ["the dataset (--data-path PREFIX, or --mock-data)",
              "the tokenizer (--tokenizer-type HuggingFaceTokenizer --tokenizer-model PATH)",
              "the checkpoint paths (--save DIR --load DIR)", "the learning rate (--lr, --min-lr)"]
    if run is None or run.iterations is None:
        to_set.append("the run's length (--train-iters, --lr-warmup-iters, --lr-decay-iters, --save-interval: "
                      "asap emit --tokens N writes them)")
    cmd = torchrun(job, f"pretrain_gpt.py $(grep -v '^#' {CONFIG})")
    return Launch(f'eval "{cmd}"', {"CUDA_DEVICE_MAX_CONNECTIONS": conn} if conn else {},
                  to_set=tuple(to_set) + rendezvous_to_set(job), where=torchrun_where(job))


def emit(job: Job, s, run: RunLength | None = None, strict: bool = False) -> str:
    import shlex

    run = run or RunLength()
    lines = [" ".join(shlex.quote(x) for x in group) for group in args(job, s) + run_args(run)]
    head = f"# {VERSION}: arguments for pretrain_gpt.py (this file: {CONFIG})\n{launch(job, s, run).header()}"
    return head + run.line() + "\n" + " \\\n".join(lines) + "\n"


def max_connections(s) -> str | None:
    """What validate_args requires of CUDA_DEVICE_MAX_CONNECTIONS before Blackwell: not 1 with Megatron-FSDP,
    1 with tensor or context parallelism (except beside the expert all-to-all overlap, which wants more)."""
    if s.zero >= 2 or s.a2a_overlap:
        return "32"
    return "1" if s.tp > 1 or s.cp > 1 else None


def te_cp_comm_type(cp_comm: str) -> str:
    """cp_comm as Megatron-Core hands it to Transformer Engine (``TEDotProductAttention`` passes cp_comm_type
    through; ``attn_forward_func_with_cp`` accepts p2p, a2a+p2p, all_gather and a2a and raises on anything else:
    arguments.py's help spells the all-gather "allgather", which TE refuses)."""
    return "all_gather" if cp_comm == "allgather" else cp_comm
