"""A Megatron-Bridge ``ConfigContainer`` YAML read back into asap's job (the inverse of
``asap.emit.megatron_bridge``).

``model``: the provider class (``_target_``) with its fields (Megatron-Bridge 0.3.1's own defaults per provider,
``data/bridge_providers.json``) overridden by the section's, TransformerConfig's names (megatron-core 0.16); the
parallel sizes, layout, recomputation and MoE dispatch are the same section's. ``train``: ``global_batch_size``,
``micro_batch_size`` (TrainingConfig's default 1); ``ddp``: DistributedDataParallelConfig (``use_distributed_
optimizer``, Megatron-FSDP's ``data_parallel_sharding_strategy``, ``grad_reduce_in_fp32``,
``num_distributed_optimizer_instances``); ``dataset.seq_length``; ``mixed_precision`` (Bridge's recipe names).
The sections that do not change a step (optimizer, scheduler, logger, tokenizer, checkpoint, dataset paths, rng,
profiling) are skipped; any other key is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asap.emit.megatron_bridge import ACTIVATIONS, ARCH_FIELDS, providers
from asap.emit.read_common import Parsed, check_model_given, positive_int, refuse_key
from asap.emit.read_megatron import layer_freq
from asap.errors import AsapError
from asap.spec.model import ModelSpec, model_from_dict

FMT = "megatron-bridge"
PARALLEL = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
            "sequence_parallel", "seq_length", "make_vocab_size_divisible_by", "cp_comm_type",
            "hierarchical_context_parallel_sizes",
            "virtual_pipeline_model_parallel_size", "pipeline_model_parallel_layout", "expert_model_parallel_size",
            "expert_tensor_parallel_size", "moe_grouped_gemm", "moe_token_dispatcher_type", "moe_enable_deepep",
            "overlap_moe_expert_parallel_comm", "recompute_granularity", "recompute_method", "recompute_num_layers",
            "recompute_modules", "fp8_param_gather", "cpu_offloading", "cpu_offloading_activations",
            "cpu_offloading_weights", "cpu_offloading_num_layers")
# model-section keys that do not change a step: initialisation, dropout, numerics of the loss, kernel choices
# asap prices one way (fused, flash attention)
MODEL_IGNORED = ("_target_", "init_method_std", "attention_dropout", "hidden_dropout", "persist_layer_norm",
                 "bias_activation_fusion", "bias_dropout_fusion", "masked_softmax_fusion", "apply_rope_fusion",
                 "gradient_accumulation_fusion", "cross_entropy_loss_fusion", "attention_softmax_in_fp32",
                 "deallocate_pipeline_outputs", "moe_permute_fusion", "moe_router_dtype", "moe_router_fusion",
                 "calculate_per_token_loss", "attention_backend", "tp_comm_overlap", "seq_len_interpolation_factor_",
                 "moe_aux_loss_coeff_", "cross_entropy_fusion_impl", "layernorm_zero_centered_gamma",
                 "share_embeddings_and_output_weights_", "rotary_percent_")
SECTIONS_IGNORED = ("optimizer", "scheduler", "logger", "tokenizer", "checkpoint", "rng", "profiling", "rerun_state_machine",
                    "straggler", "ft", "nvrx_straggler", "comm_overlap", "mixed_precision_", "inprocess_restart",
                    "dist", "peft", "dataset_")
TRAIN_KEYS = ("_target_", "global_batch_size", "micro_batch_size", "train_iters", "eval_iters", "eval_interval",
              "exit_duration_in_mins", "manual_gc", "manual_gc_interval", "manual_gc_eval", "train_samples",
              "exit_interval", "skip_train", "empty_unused_memory_level", "check_weight_hash_across_dp_replicas_interval")
DDP_KEYS = ("_target_", "overlap_grad_reduce", "overlap_param_gather", "use_distributed_optimizer",
            "grad_reduce_in_fp32", "num_distributed_optimizer_instances", "use_megatron_fsdp",
            "data_parallel_sharding_strategy", "check_for_nan_in_grad", "bucket_size", "average_in_collective",
            "align_param_gather", "use_custom_fsdp", "fp8_param_gather", "outer_dp_sharding_strategy")
DATASET_KEYS = ("_target_", "random_seed", "seq_length", "reset_attention_mask", "reset_position_ids", "eod_mask_loss",
                "blend", "blend_per_split", "split", "dataloader_type", "num_dataset_builder_threads", "data_sharding",
                "path_to_cache", "mmap_bin_files", "num_workers", "sequence_length")
MIXED = {"bf16_mixed": "bf16", "fp16_mixed": "fp16", "bf16_with_fp8_current_scaling_mixed": "fp8",
         "bf16_with_fp8_delayed_scaling_mixed": "fp8", "bf16_with_fp8_subchannel_scaling_mixed": "fp8",
         "bf16_with_mxfp8_mixed": "fp8", "bf16_with_nvfp4_mixed": "nvfp4", None: "fp32", "32": "fp32"}


def _section(d: dict, key: str, allowed: tuple[str, ...]) -> dict:
    sec = d.get(key) or {}
    if not isinstance(sec, dict):
        raise AsapError(key, "must be a mapping")
    for k in sec:
        if k not in allowed:
            raise refuse_key(FMT, f"{key}.{k}")
    return sec


def read(path: Path, text: str, *, model=None, seq_len=None, cluster=None) -> Parsed:
    import yaml

    d = yaml.safe_load(text)
    for k in d:
        if k not in ("_target_", "model", "train", "ddp", "dataset", "mixed_precision") and \
                k not in SECTIONS_IGNORED:
            raise refuse_key(FMT, k)
    m_sec = _section(d, "model", ARCH_FIELDS + PARALLEL + MODEL_IGNORED)
    train = _section(d, "train", TRAIN_KEYS)
    ddp = _section(d, "ddp", DDP_KEYS)
    ds = _section(d, "dataset", DATASET_KEYS)
    if "_target_" not in m_sec:
        raise AsapError("model._target_", "missing: an override of a Megatron-Bridge Python recipe (the recipe names "
                                          "the model provider); read the whole ConfigContainer (ConfigContainer.to_yaml)")
    target = m_sec["_target_"]
    table = providers()
    if target not in table:
        raise refuse_key(FMT, "model._target_", f"{target} (asap reads Megatron-Bridge 0.3.1's GPT, MLA, Llama 3, "
                                                "Qwen3, DeepSeek-V3 and GPT-OSS providers)")
    fields = {**table[target], **{k: v for k, v in m_sec.items() if k in ARCH_FIELDS}}
    tp = positive_int(m_sec.get("tensor_model_parallel_size", 1), "model.tensor_model_parallel_size")
    mdl = check_model_given(bridge_model(fields, tp, m_sec.get("make_vocab_size_divisible_by", 128),
                                         target.rsplit(".", 1)[1]), model)
    prec = d.get("mixed_precision")
    prec = prec.get("_target_") if isinstance(prec, dict) else prec
    if prec not in MIXED:
        raise refuse_key(FMT, "mixed_precision", f"{prec} (asap reads {', '.join(str(k) for k in MIXED if k)})")
    seq = ds.get("seq_length", m_sec.get("seq_length", seq_len))
    if seq is None:
        raise AsapError("dataset.seq_length", "missing")
    if "global_batch_size" not in train:
        raise AsapError("train.global_batch_size", "missing")
    s = bridge_strategy(m_sec, train, ddp, mdl, MIXED[prec])
    s.update(_offload(m_sec, d.get("optimizer") or {}, mdl))
    return Parsed(mdl, positive_int(train["global_batch_size"], "train.global_batch_size"),
                  positive_int(seq, "dataset.seq_length"), MIXED[prec], s)


def _offload(m: dict, opt: dict, model: ModelSpec) -> dict[str, Any]:
    """TransformerConfig's activation offload (``cpu_offloading_num_layers`` L - 1, its most: every layer) and
    OptimizerConfig's ``optimizer_cpu_offload``."""
    out: dict[str, Any] = {}
    if m.get("cpu_offloading") and int(m.get("cpu_offloading_num_layers", 0)):
        if m.get("cpu_offloading_weights") or not m.get("cpu_offloading_activations", True):
            raise refuse_key(FMT, "model.cpu_offloading_weights", "weight offload (asap offloads activations)")
        n = int(m.get("cpu_offloading_num_layers", 0))
        out.update(offload_act=1, offload_layers=0 if n >= model.num_layers - 1 else n)
    if isinstance(opt, dict) and opt.get("optimizer_cpu_offload"):
        out["offload_opt"] = 1
    return out


def _act(v: Any) -> str:
    if isinstance(v, dict):
        inverse = {t: n for n, t in ACTIVATIONS.items()}
        if v.get("_target_") not in inverse:
            raise refuse_key(FMT, "model.activation_func", f"{v.get('_target_')}")
        return inverse[v["_target_"]]
    return str(v)


def bridge_model(f: dict[str, Any], tp: int, divisor: int, name: str) -> ModelSpec:
    """asap's model from the provider's TransformerConfig fields (``asap.emit.megatron_bridge.arch_fields``
    inverted)."""
    act = _act(f.get("activation_func"))
    glu = bool(f.get("gated_linear_unit"))
    h, heads = f["hidden_size"], f["num_attention_heads"]
    vocab = f.get("vocab_size")
    if not vocab:
        raise AsapError("model.vocab_size", "missing (the tokenizer's: set it on the provider)")
    step = positive_int(divisor, "model.make_vocab_size_divisible_by") * tp
    padded = -(-vocab // step) * step
    d: dict[str, Any] = {
        "name": name, "num_layers": f["num_layers"], "hidden_size": h, "num_attention_heads": heads,
        "ffn_hidden_size": f.get("ffn_hidden_size") or 4 * h, "vocab_size": vocab,
        "vocab_pad_multiple": 1 if padded == vocab else step,
        "activation": "swiglu" if glu else {"gelu": "gelu", "squared_relu": "relu2"}.get(act, act),
        "norm": {"RMSNorm": "rmsnorm", "LayerNorm": "layernorm"}[f.get("normalization", "LayerNorm")],
        "norm_eps": f.get("layernorm_epsilon", 1e-5), "tie_embeddings": bool(f.get("share_embeddings_and_output_weights")),
        "attention_bias": "all" if f.get("add_bias_linear") else "qkv" if f.get("add_qkv_bias") else "none",
        "mlp_bias": bool(f.get("add_bias_linear")), "qk_norm": bool(f.get("qk_layernorm")) and not f.get("multi_latent_attention"),
        "num_kv_heads": f.get("num_query_groups") or heads}
    if act == "quick_gelu":
        d.update(activation="swiglu", swiglu_limit=f.get("activation_func_clamp_value") or 0.0)
    if f.get("rotary_percent", 1.0) != 1.0:
        raise refuse_key(FMT, "model.rotary_percent", "rotary on part of the head")
    if f.get("kv_channels") and not f.get("multi_latent_attention"):
        d["head_dim"] = f["kv_channels"]
    d.update(_rope(f))
    if f.get("multi_latent_attention"):
        d["mla"] = {"q_lora_rank": f.get("q_lora_rank"), "kv_lora_rank": f["kv_lora_rank"],
                    "qk_nope_head_dim": f["qk_head_dim"], "qk_rope_head_dim": f["qk_pos_emb_head_dim"],
                    "v_head_dim": f["v_head_dim"]}
        d["num_kv_heads"] = heads
    if f.get("window_size"):
        d["sliding_window"] = int(f["window_size"][0])
        d["sliding_window_cycle"] = f.get("window_attn_skip_freq") or 0
    if f.get("softmax_type", "vanilla") != "vanilla":
        d["attention_sinks"] = True
    if f.get("mtp_num_layers"):
        d["mtp_layers"] = f["mtp_num_layers"]
    if f.get("num_moe_experts"):
        d["moe"] = _moe(f)
    return model_from_dict(d, "model")


def _rope(f: dict[str, Any]) -> dict[str, Any]:
    kind = f.get("position_embedding_type", "learned_absolute")
    if kind == "learned_absolute":
        return {"position_embedding": "learned"}
    out: dict[str, Any] = {"position_embedding": "rope", "rope_theta": float(f.get("rotary_base", 10000))}
    if f.get("multi_latent_attention"):
        if f.get("rope_type", "yarn") == "yarn":
            out["rope_scaling"] = {"type": "yarn", "factor": f.get("rotary_scaling_factor") or 1.0,
                                   "mscale": f.get("mscale", 1.0), "mscale_all_dim": f.get("mscale_all_dim", 0.0),
                                   "beta_fast": f.get("beta_fast", 32), "beta_slow": f.get("beta_slow", 1),
                                   "original_max_position_embeddings": f.get("original_max_position_embeddings", 4096)}
        return out
    if kind == "yarn":
        out["rope_scaling"] = {"type": "yarn", "factor": f["yarn_rotary_scaling_factor"],
                               "original_max_position_embeddings": f["yarn_original_max_position_embeddings"],
                               "beta_fast": f.get("yarn_beta_fast", 32), "beta_slow": f.get("yarn_beta_slow", 1),
                               "truncate": bool(f.get("yarn_correction_range_round_to_int", True))}
    elif kind != "rope":
        raise refuse_key(FMT, "model.position_embedding_type", str(kind))
    elif f.get("rope_scaling"):
        out["rope_scaling"] = {"type": "llama3", "factor": f.get("rope_scaling_factor", 8.0),
                               "original_max_position_embeddings": 8192}
    elif f.get("seq_len_interpolation_factor"):
        out["rope_scaling"] = {"type": "linear", "factor": f["seq_len_interpolation_factor"]}
    return out


def _moe(f: dict[str, Any]) -> dict[str, Any]:
    width = int(f.get("moe_ffn_hidden_size") or f.get("ffn_hidden_size") or 4 * f["hidden_size"])
    shared = f.get("moe_shared_expert_intermediate_size") or 0
    if shared % width:
        raise refuse_key(FMT, "model.moe_shared_expert_intermediate_size", f"{shared}, not a multiple of {width}")
    kind = f.get("moe_router_load_balancing_type", "aux_loss")
    kinds = {"aux_loss": "global", "seq_aux_loss": "sequence", "none": "none"}
    if kind not in kinds:
        raise refuse_key(FMT, "model.moe_router_load_balancing_type", str(kind))
    coef = f.get("moe_aux_loss_coeff") or 0.0
    freq = f.get("moe_layer_freq", 1)
    e: dict[str, Any] = {
        "num_experts": f["num_moe_experts"], "top_k": f.get("moe_router_topk", 2), "expert_ffn_hidden_size": width,
        "shared_experts": shared // width,
        "first_dense_layers": layer_freq(str(freq), f["num_layers"]),
        "score_func": f.get("moe_router_score_function", "softmax"),
        "norm_topk_prob": not f.get("moe_router_pre_softmax", False),
        "expert_bias": bool(f.get("moe_router_enable_expert_bias")),
        "expert_bias_update_rate": f.get("moe_router_bias_update_rate", 1e-3),
        "routed_scaling_factor": f.get("moe_router_topk_scaling_factor") or 1.0,
        "aux_loss": kinds[kind] if coef else "none", "aux_loss_coef": coef if kinds[kind] != "none" else 0.0,
        "z_loss_coef": f.get("moe_z_loss_coeff") or 0.0, "router_bias": bool(f.get("add_bias_linear")),
        "capacity_factor": f.get("moe_expert_capacity_factor"), "drop_policy": f.get("moe_token_drop_policy", "probs")}
    if f.get("moe_router_num_groups"):
        e.update(n_group=f["moe_router_num_groups"], topk_group=f.get("moe_router_group_topk") or 1)
    return e


def bridge_strategy(m: dict, train: dict, ddp: dict, model: ModelSpec, precision: str) -> dict[str, Any]:
    """The strategy keys from the provider's parallel fields, the batch and the DDP config, as Megatron-LM's
    flags (``asap.emit.read_megatron``) read the same settings."""
    from asap.emit.read_megatron import Args, read_strategy

    flags: dict[str, list[str]] = {}
    names = {"tensor_model_parallel_size": "--tensor-model-parallel-size",
             "pipeline_model_parallel_size": "--pipeline-model-parallel-size",
             "context_parallel_size": "--context-parallel-size", "cp_comm_type": "--cp-comm-type",
             "hierarchical_context_parallel_sizes": "--hierarchical-context-parallel-sizes",
             "virtual_pipeline_model_parallel_size": "--num-virtual-stages-per-pipeline-rank",
             "pipeline_model_parallel_layout": "--pipeline-model-parallel-layout",
             "expert_model_parallel_size": "--expert-model-parallel-size",
             "expert_tensor_parallel_size": "--expert-tensor-parallel-size",
             "moe_token_dispatcher_type": "--moe-token-dispatcher-type",
             "recompute_granularity": "--recompute-granularity", "recompute_method": "--recompute-method",
             "recompute_num_layers": "--recompute-num-layers", "recompute_modules": "--recompute-modules"}
    for key, flag in names.items():
        v = m.get(key)
        if v is not None:
            flags[flag] = [str(x) for x in v] if isinstance(v, list) else [str(v)]
    for key, flag in (("sequence_parallel", "--sequence-parallel"), ("moe_enable_deepep", "--moe-enable-deepep"),
                      ("overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm"),
                      ("fp8_param_gather", "--fp8-param-gather")):
        if m.get(key):
            flags[flag] = []
    flags["--micro-batch-size"] = [str(train.get("micro_batch_size", 1))]
    if ddp.get("use_distributed_optimizer"):
        flags["--use-distributed-optimizer"] = []
    if ddp.get("use_megatron_fsdp"):
        flags["--use-megatron-fsdp"] = []
        flags["--data-parallel-sharding-strategy"] = [str(ddp.get("data_parallel_sharding_strategy", "no_shard"))]
    if ddp.get("num_distributed_optimizer_instances"):
        flags["--num-distributed-optimizer-instances"] = [str(ddp["num_distributed_optimizer_instances"])]
    if ddp.get("grad_reduce_in_fp32") is False and precision != "fp32":
        flags["--grad-reduce-in-bf16"] = []
    if precision != "fp32":
        flags["--bf16" if precision in ("bf16", "fp8", "nvfp4") else "--fp16"] = []
    return read_strategy(Args(flags), model)
