"""A MindFormers YAML config (the parallel and recompute sections and the model's shape).

Option names follow MindFormers r1.5.0 (``mindformers/modules/transformer/transformer.py`` TransformerOpParallel
Config, ``configs/*/pretrain_*.yaml``): ``parallel_config`` data_parallel, model_parallel, pipeline_stage,
context_parallel, expert_parallel, micro_batch_num, vocab_emb_dp, use_seq_parallel, gradient_aggregation_group,
optimizer_shard; ``parallel.enable_parallel_optimizer`` (zero 1) with ``parallel.parallel_optimizer_config.
optimizer_weight_shard_size`` (dp_replicate > 1: the optimizer shards over dp * cp / dp_replicate of the ranks
that hold the same weights, replicated across the rest; MindSpore's default -1 shards over all of them) and ``parallel.pipeline_config`` (pipeline_
interleave); ``model.model_config`` pp_interleave_num and offset (the layer split: per stage, or per
interleave and stage, the layers beyond num_layers // (pp * vpp)); ``recompute_config`` recompute (full) /
select_recompute (selective); ``runner_config`` batch_size (the micro-batch) and gradient_accumulation_steps
(without a pipeline); ``moe_config`` expert_num, num_experts_chosen, enable_deredundency + npu_nums_per_device
(the node-deduplicated dispatcher).
Refused: zero 2 and 3, recompute module sets, the zero-bubble and GPipe schedules, the all-gather dispatcher,
expert tensor parallelism other than model_parallel.
"""

from __future__ import annotations

from asap.spec.framework import Dispatcher
from asap.spec.knobs import Recompute, Schedule
from asap.emit.common import check_runnable, chunk_layers, micro_batches, refuse, refuse_model
from asap.emit.launch import Launch, RunLength
from asap.spec.job import Job

NAME = "mindformers"
CONFIG = "mindformers.yaml"  # the file name the launch line reads
VERSION = "MindFormers r1.5.0 (parallel_config, recompute_config)"


def config(job: Job, s, run: RunLength | None = None, strict: bool = False) -> dict:
    model, cluster, train = job.model, job.cluster, job.train
    check_runnable(NAME, "mindspore", job, s)
    check_model(model)
    if s.zero > 1:
        raise refuse("zero", NAME, f"zero={s.zero} (optimizer_shard shards optimizer states only: zero 0 or 1)")
    if s.schedule in (Schedule.ZB, Schedule.GPIPE):
        raise refuse("schedule", NAME, f"schedule={s.schedule} (1F1B, interleaved with pp_interleave_num)")
    if model.moe is not None and s.dispatcher == Dispatcher.ALLGATHER:
        raise refuse("dispatcher", NAME, "dispatcher=allgather (all-to-all, or deduplicated with enable_deredundency)")
    n_micro = micro_batches(train, s)
    chunks = chunk_layers(model, s)
    base = model.num_layers // (s.pp * s.vpp)
    offsets = [n - base for n in chunks]
    offset: int | list[int] | list[list[int]]
    if s.vpp > 1:
        offset = [offsets[v * s.pp:(v + 1) * s.pp] for v in range(s.vpp)]
    elif s.pp > 1:
        offset = offsets
    else:
        offset = 0
    pc = {"data_parallel": s.dp, "model_parallel": s.tp, "pipeline_stage": s.pp, "context_parallel": s.cp,
          "expert_parallel": s.ep, "micro_batch_num": n_micro if s.pp > 1 else 1, "vocab_emb_dp": False,
          "use_seq_parallel": bool(s.sp), "gradient_aggregation_group": 4, "optimizer_shard": s.zero == 1}
    if s.cp > 1:  # OpParallelConfig.context_parallel_algo: colossalai_cp (K,V all-gathered) or ulysses_cp
        pc["context_parallel_algo"] = "ulysses_cp" if s.cp_comm == "a2a" else "colossalai_cp"
    cfg: dict = {
        "parallel": {"parallel_mode": 1, "enable_parallel_optimizer": s.zero == 1,
                     "pipeline_config": {"pipeline_interleave": s.vpp > 1, "pipeline_scheduler": "1f1b"}},
        "parallel_config": pc,
        "runner_config": {"batch_size": s.mbs, "gradient_accumulation_steps": 1 if s.pp > 1 else n_micro,
                          "sink_mode": True},
        "recompute_config": {"recompute": s.recompute.kind == Recompute.FULL, "select_recompute": s.recompute.kind == Recompute.SELECTIVE,
                             "parallel_optimizer_comm_recompute": False, "mp_comm_recompute": True,
                             "recompute_slice_activation": True},
        "model": {"model_config": {**model_config(model, train), "pp_interleave_num": s.vpp, "offset": offset},
                  "arch": arch(model)},
    }
    if s.dp_replicate > 1:  # the legality table holds zero 1 (zero 0 has no shard group)
        cfg["parallel"]["parallel_optimizer_config"] = {"optimizer_weight_shard_size": s.dp * s.cp // s.dp_replicate}
    if model.moe is not None:
        cfg["moe_config"] = moe_config(model, cluster, s)
    return cfg | run_sections(run or RunLength())


def run_sections(run: RunLength) -> dict:
    """The budget's length (configs/*/pretrain_*.yaml): ``lr_schedule`` CosineWithWarmUpLR over total_steps with
    warmup_steps, and the ``CheckpointMonitor`` callback's save_checkpoint_steps."""
    if run.iterations is None:
        return {}
    return {"lr_schedule": {"type": "CosineWithWarmUpLR", "warmup_steps": run.warmup_iters,
                            "total_steps": run.decay_iters},
            "callbacks": [{"type": "MFLossMonitor"},
                          {"type": "CheckpointMonitor", "save_checkpoint_steps": run.checkpoint_interval}]}


def launch(job: Job, s, run: RunLength | None = None, strict: bool = False) -> Launch:
    """MindFormers' distributed launcher (docs, "Start Tasks": scripts/msrun_launcher.sh over run_mindformer.py,
    msrun starting one process per device): ``bash scripts/msrun_launcher.sh "run_mindformer.py --config FILE
    --run_mode train" WORKER_NUM LOCAL_WORKER MASTER_ADDR MASTER_PORT NODE_RANK LOG_DIR JOIN CLUSTER_TIME_OUT``,
    the same on every node with its NODE_RANK."""
    c = job.cluster
    cmd = (f'bash scripts/msrun_launcher.sh "run_mindformer.py --config {CONFIG} --run_mode train" '
           f"{c.num_devices} {c.devices_per_node} $MASTER_ADDR 8118 $NODE_RANK output/msrun_log False 300")
    to_set = ["the dataset (train_dataset.data_loader.dataset_dir)", "the tokenizer (processor.tokenizer)",
              "the output folder (output_dir; checkpoints under it)", "the learning rate (lr_schedule.learning_rate)",
              "MASTER_ADDR (node 0's address) and NODE_RANK (0 .. nodes-1) on each node"]
    if run is None or run.iterations is None:
        to_set.append("the run's length (runner_config.epochs, lr_schedule.total_steps, the CheckpointMonitor's "
                      "save_checkpoint_steps: asap emit --tokens N writes the last two)")
    else:
        to_set.append(f"runner_config.epochs so that the epochs over your dataset make {run.iterations} steps")
    return Launch(cmd, {}, {}, tuple(to_set), where=f"on each of the {c.nodes} nodes" if c.nodes > 1 else "on the node")


def moe_config(model, cluster, s) -> dict:
    """MoEConfig (mindformers/modules/transformer/moe.py; the DeepSeek-V3 pretraining YAML's moe_config): the
    TopkRouterV2 router with its score function, groups, scale, the expert-bias balancing and the balance loss
    (``aux_loss_types: [expert]``: per sequence; the single ``aux_loss_factor``: per batch), dropless through
    grouped matmuls (``use_gmm``) or a capacity."""
    e = model.moe
    mc = {"expert_num": e.num_experts, "num_experts_chosen": e.top_k, "moe_intermediate_size": e.expert_ffn_hidden_size,
          "shared_expert_num": e.shared_experts, "first_k_dense_replace": e.first_dense_layers,
          "routing_policy": "TopkRouterV2", "use_gating_sigmoid": e.score_func == "sigmoid",
          "norm_topk_prob": e.norm_topk_prob, "routed_scaling_factor": e.routed_scaling_factor,
          "n_group": e.n_group, "topk_group": e.topk_group, "balance_via_topk_bias": e.expert_bias,
          "topk_bias_update_rate": e.expert_bias_update_rate, "z_loss_factor": e.z_loss_coef,
          "enable_deredundency": s.dispatcher == Dispatcher.DEDUP,
          "npu_nums_per_device": cluster.devices_per_node if s.dispatcher == Dispatcher.DEDUP else 1}
    coef = e.aux_loss_coef if e.aux_loss != "none" else 0.0
    if e.aux_loss == "sequence":
        mc.update(aux_loss_types=["expert"], aux_loss_factors=[coef])
    else:
        mc["aux_loss_factor"] = coef
    if e.capacity_factor is None:
        mc["use_gmm"] = True
    else:
        mc.update(use_gmm=False, capacity_factor=e.capacity_factor, enable_sdrop=e.drop_policy == "probs")
    return mc


UNSUPPORTED = (("sliding_window", "sliding-window attention"), ("attention_sinks", "attention sinks"),
               ("swiglu_limit", "a clamped GLU"), ("mlp_bias", "feed-forward biases"))


def check_model(model) -> None:
    """What LlamaConfig / DeepseekV3Config cannot build."""
    for fld, what in UNSUPPORTED:
        if getattr(model, fld):
            raise refuse_model(NAME, fld, what)
    r = model.rope_scaling
    for fld, bad, why in (
            ("qk_norm", model.qk_norm, "per-head q/k norms (LlamaConfig and DeepseekV3Config have none)"),
            ("rope_scaling", r is not None and (model.mla is None or r.type != "yarn"),
             f"{getattr(r, 'type', '')} RoPE scaling (LlamaConfig's extend_method is None, PI or NTK; "
             "DeepseekV3Config's YARN)"),
            ("attention_bias", model.attention_bias == "all" or (model.attention_bias == "qkv" and model.mla),
             f"attention_bias={model.attention_bias} (qkv_has_bias only)"),
            ("moe.router_bias", model.moe is not None and model.moe.router_bias, "a biased router"),
            ("vocab_pad_multiple", model.padded_vocab_size != model.vocab_size, "vocabulary padding")):
        if bad:
            raise refuse_model(NAME, fld, why)
    problem = (("norm", f"norm={model.norm} (RMSNorm only)") if model.norm != "rmsnorm" else
               ("position_embedding", f"position_embedding={model.position_embedding} (RoPE only)")
               if model.position_embedding != "rope" else
               ("activation", f"activation={model.activation} (SwiGLU feed-forwards)")
               if model.activation != "swiglu" else
               ("tie_embeddings", "tied embeddings (an untied lm_head)") if model.tie_embeddings else None)
    if problem is None and model.mla is None:
        problem = (("head_dim", f"head_dim={model.head_dim} with hidden_size/num_heads="
                                f"{model.hidden_size // model.num_attention_heads} (LlamaConfig derives it)")
                   if model.head_dim * model.num_attention_heads != model.hidden_size else
                   ("mtp_layers", f"mtp_layers={model.mtp_layers} without MLA (mtp_depth is DeepseekV3Config's)")
                   if model.mtp_layers else
                   ("moe", "shared experts or leading dense layers without MLA (DeepseekV3Config's keys)")
                   if model.moe is not None and (model.moe.shared_experts or model.moe.first_dense_layers) else None)
    if problem is not None:
        raise refuse_model(NAME, *problem)


def model_config(model, train) -> dict:
    """``model.model_config``: LlamaConfig's keys (dense, or MoE through moe_config), DeepseekV3Config's with MLA
    (research/deepseek3/deepseek3_671b/pretrain_deepseek3_671b.yaml: n_kv_heads = num_heads, the latent ranks
    and head widths, mtp_depth)."""
    mc = {"type": "DeepseekV3Config" if model.mla is not None else "LlamaConfig",
          "seq_length": train.seq_len, "max_position_embedding": train.seq_len, "num_layers": model.num_layers,
          "hidden_size": model.hidden_size, "intermediate_size": model.ffn_hidden_size,
          "num_heads": model.num_attention_heads, "n_kv_heads": model.num_kv_heads, "vocab_size": model.vocab_size,
          "rms_norm_eps": model.norm_eps, "theta": model.rope_theta,
          "compute_dtype": {"fp32": "float32", "fp16": "float16"}.get(train.precision, "bfloat16"),
          "param_init_type": "float32"}
    if model.mla is not None:
        m = model.mla
        mc.update({"auto_register": "deepseek3_config.DeepseekV3Config", "max_position_embeddings": train.seq_len,
                   "q_lora_rank": m.q_lora_rank or 0, "kv_lora_rank": m.kv_lora_rank,
                   "qk_nope_head_dim": m.qk_nope_head_dim, "qk_rope_head_dim": m.qk_rope_head_dim,
                   "v_head_dim": m.v_head_dim, "mtp_depth": model.mtp_layers})
        del mc["max_position_embedding"]
        r = model.rope_scaling
        if r is not None:  # research/deepseek3's YAML: extend_method YARN and its scaling_factor mapping
            mc.update(extend_method="YARN", scaling_factor={
                "beta_fast": r.beta_fast, "beta_slow": r.beta_slow, "factor": r.factor, "mscale": r.mscale,
                "mscale_all_dim": r.mscale_all_dim,
                "original_max_position_embeddings": r.original_max_position_embeddings})
    elif model.attention_bias == "qkv":
        mc["qkv_has_bias"] = True
    return mc


def arch(model) -> dict:
    if model.mla is not None:
        return {"type": "DeepseekV3ForCausalLM", "auto_register": "deepseek3.DeepseekV3ForCausalLM"}
    return {"type": "LlamaForCausalLM"}


def emit(job: Job, s, run: RunLength | None = None, strict: bool = False) -> str:
    import yaml

    model = job.model
    run = run or RunLength()
    head = f"# {VERSION}; asap strategy {s} (this file: {CONFIG})\n{launch(job, s, run).header()}{run.line()}\n"
    if model.moe is not None and s.a2a_overlap:
        head += "# a2a_overlap=1: priced with the expert all-to-all hidden behind expert compute (no config key)\n"
    return head + yaml.safe_dump(config(job, s, run), sort_keys=False)
