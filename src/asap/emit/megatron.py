"""Megatron-LM ``pretrain_gpt.py`` command-line arguments.

Option names follow Megatron-LM core_r0.14.0 (``megatron/training/arguments.py``): the parallel sizes,
``--num-virtual-stages-per-pipeline-rank``, ``--pipeline-model-parallel-layout`` (``E`` embedding, ``t`` a
transformer layer, ``m`` an MTP layer, ``L`` the loss, ``|`` between virtual stages) for splits the uniform
division cannot give, ``--use-distributed-optimizer`` (zero 1), Megatron-FSDP (``--use-megatron-fsdp
--data-parallel-sharding-strategy optim_grads|optim_grads_params``, zero 2/3), ``--recompute-granularity`` /
``--recompute-modules`` / ``--recompute-method``, ``--moe-token-dispatcher-type`` (``flex`` with
``--moe-enable-deepep`` for the node-deduplicated dispatcher) and ``--overlap-moe-expert-parallel-comm``.
Not expressible (refused): the zero-bubble and GPipe schedules (no flag in Megatron-LM's training loop); the
expert all-to-all overlap without expert parallelism, without virtual stages under a pipeline, with full
recomputation or outside bf16/fp16 (TransformerConfig rejects each).
"""

from __future__ import annotations

from asap.emit.common import chunk_layers, micro_batches, recompute_modules, refuse

NAME = "megatron"
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


def check_a2a_overlap(model, train, s) -> None:
    """TransformerConfig's conditions for ``--overlap-moe-expert-parallel-comm`` (core_r0.14.0 __post_init__)."""
    if model.moe is None or not s.a2a_overlap:
        return
    problem = ("a2a_overlap=1 with ep=1 (the overlap needs expert parallelism)" if s.ep == 1 else
               "a2a_overlap=1 with pp>1 and vpp=1 (the overlap needs virtual stages)" if s.pp > 1 and s.vpp == 1 else
               "a2a_overlap=1 with recompute=full (the overlap needs recomputation off or selective)"
               if s.recompute == "full" else
               f"a2a_overlap=1 with precision {train.precision} (the overlap needs bf16 or fp16)"
               if train.precision not in ("bf16", "fp16") else None)
    if problem:
        raise refuse("a2a_overlap", NAME, problem)


def args(model, cluster, train, s) -> list[tuple[str, ...]]:
    if s.schedule in ("zb", "gpipe"):
        raise refuse("schedule", NAME, f"schedule={s.schedule} (pretrain_gpt.py runs 1F1B or interleaved 1F1B)")
    check_a2a_overlap(model, train, s)
    a: list[tuple[str, ...]] = [
        ("--tensor-model-parallel-size", str(s.tp)),
        ("--pipeline-model-parallel-size", str(s.pp)),
        ("--context-parallel-size", str(s.cp)),
    ]
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
    if s.zero == 1:
        a.append(("--use-distributed-optimizer",))
    elif s.zero >= 2:
        a += [("--use-megatron-fsdp",),
              ("--data-parallel-sharding-strategy", "optim_grads_params" if s.zero == 3 else "optim_grads")]
    mods = modules_for(model, recompute_modules(s) or ())
    if s.recompute == "full":
        a += [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    elif s.recompute == "selective":
        a += [("--recompute-granularity", "selective"), ("--recompute-modules", *modules_for(model, SELECTIVE_MODULES))]
    elif mods:
        a += [("--recompute-granularity", "selective"), ("--recompute-modules", *mods)]
    if model.moe is not None:
        if s.dispatcher == "dedup":
            a += [("--moe-token-dispatcher-type", "flex"), ("--moe-enable-deepep",)]
        else:
            a.append(("--moe-token-dispatcher-type", s.dispatcher))
        if s.a2a_overlap:
            a.append(("--overlap-moe-expert-parallel-comm",))
    p = train.precision
    if p in ("bf16", "fp8"):
        a.append(("--bf16",))
    elif p == "fp16":
        a.append(("--fp16",))
    if p == "fp8":
        a += [("--fp8-format", "hybrid")]
    # the model's shape
    a += [("--num-layers", str(model.num_layers)), ("--hidden-size", str(model.hidden_size)),
          ("--ffn-hidden-size", str(model.ffn_hidden_size)),
          ("--num-attention-heads", str(model.num_attention_heads)),
          ("--kv-channels", str(model.head_dim)), ("--vocab-size", str(model.vocab_size))]
    if model.num_kv_heads != model.num_attention_heads and model.mla is None:
        a += [("--group-query-attention",), ("--num-query-groups", str(model.num_kv_heads))]
    if model.activation == "swiglu":
        a.append(("--swiglu",))
    elif model.activation == "relu2":
        a.append(("--squared-relu",))
    a.append(("--disable-bias-linear",))  # asap's models have no linear biases (TransformerConfig: none with MoE)
    if not model.tie_embeddings:
        a.append(("--untie-embeddings-and-output-weights",))
    if model.mla is not None:
        m = model.mla
        a.append(("--multi-latent-attention",))
        if m.q_lora_rank:
            a.append(("--q-lora-rank", str(m.q_lora_rank)))
        a += [("--kv-lora-rank", str(m.kv_lora_rank)), ("--qk-head-dim", str(m.qk_nope_head_dim)),
              ("--qk-pos-emb-head-dim", str(m.qk_rope_head_dim)), ("--v-head-dim", str(m.v_head_dim))]
    if model.moe is not None:
        e = model.moe
        a += [("--num-experts", str(e.num_experts)), ("--moe-router-topk", str(e.top_k)),
              ("--moe-ffn-hidden-size", str(e.expert_ffn_hidden_size)), ("--moe-grouped-gemm",)]
        if e.shared_experts:
            a.append(("--moe-shared-expert-intermediate-size", str(e.shared_experts * e.expert_ffn_hidden_size)))
        if e.first_dense_layers:
            a.append(("--moe-layer-freq",
                      f"([0]*{e.first_dense_layers}+[1]*{model.num_layers - e.first_dense_layers})"))
    if model.mtp_layers:
        a.append(("--mtp-num-layers", str(model.mtp_layers)))
    assert micro_batches(train, s) >= 1
    return a


def emit(model, cluster, train, s) -> str:
    import shlex

    lines = [" ".join(shlex.quote(x) for x in group) for group in args(model, cluster, train, s)]
    return f"# {VERSION}: arguments for pretrain_gpt.py\n" + " \\\n".join(lines) + "\n"
