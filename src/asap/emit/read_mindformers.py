"""A MindFormers YAML read back into asap's job (the inverse of ``asap.emit.mindformers``).

MindFormers r1.5.0 (``configs/*/pretrain_*.yaml``, ``research/*/pretrain_*.yaml``): ``parallel_config``
data_parallel, model_parallel (tp, and expert TP), pipeline_stage, context_parallel (``context_parallel_algo``
colossalai_cp: all-gather of K,V, ulysses_cp: all-to-all), expert_parallel, micro_batch_num (under a pipeline),
use_seq_parallel; ``parallel.enable_parallel_optimizer`` (or ``parallel_config.optimizer_shard``: ZeRO 1) with
``parallel_optimizer_config.optimizer_weight_shard_size`` (hybrid sharding); ``parallel.pipeline_config``;
``runner_config`` batch_size (the micro-batch) and gradient_accumulation_steps; the global batch is batch_size x
data_parallel x micro_batch_num (pp > 1) x gradient_accumulation_steps; the device count data_parallel x
model_parallel x pipeline_stage x context_parallel. ``recompute_config`` recompute (full) / select_recompute
(selective; a per-stage list of layer counts is refused); ``model.model_config`` LlamaConfig (intermediate_size,
or LlamaFeedForward's width from multiple_of and ffn_dim_multiplier) or DeepseekV3Config (the MLA ranks,
mtp_depth, YaRN), pp_interleave_num and offset (the layer split), compute_dtype; ``moe_config``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asap.emit.read_common import Parsed, check_model_given, positive_int, refuse_key
from asap.errors import AsapError
from asap.spec.model import ModelSpec, model_from_dict

FMT = "mindformers"
TOP_IGNORED = ("seed", "output_dir", "load_checkpoint", "src_strategy_path_or_dir", "auto_trans_ckpt",
               "only_save_strategy", "resume_training", "run_mode", "trainer", "optimizer", "lr_schedule",
               "train_dataset", "train_dataset_task", "do_eval", "eval_dataset", "eval_dataset_task", "use_parallel",
               "callbacks", "context", "processor", "metric", "runner_wrapper", "eval_callbacks", "auto_tune",
               "filepath_prefix", "autotune_per_step", "profile", "profile_start_step", "profile_stop_step",
               "init_start_profile", "profile_communication", "profile_memory", "layer_scale", "layer_decay",
               "lr_scale_factor", "micro_batch_interleave_num", "monitor_config", "remove_redundancy",
               "eval_step_interval", "eval_epoch_interval", "ignore_data_skip", "data_skip_steps", "use_legacy",
               "pretrained_model_dir", "print_separate_loss", "check_for_nan_in_loss_and_grad", "load_ckpt_format",
               "profile_level", "profile_rank_ids", "profile_pipeline", "stand_alone", "mstx", "swap_config_",
               "train_precision_sync", "infer_precision_sync", "postprocess_use_numpy", "remote_save_url")
KEYS = {
    "parallel_config": ("data_parallel", "model_parallel", "pipeline_stage", "context_parallel", "expert_parallel",
                        "micro_batch_num", "vocab_emb_dp", "use_seq_parallel", "gradient_aggregation_group",
                        "optimizer_shard", "context_parallel_algo", "ulysses_degree_in_cp", "seq_split_num"),
    "parallel": ("parallel_mode", "gradients_mean", "enable_alltoall", "full_batch", "search_mode",
                 "enable_parallel_optimizer", "strategy_ckpt_save_file", "strategy_ckpt_config",
                 "parallel_optimizer_config", "pipeline_config", "dataset_strategy"),
    "runner_config": ("epochs", "batch_size", "sink_mode", "sink_size", "gradient_accumulation_steps"),
    "recompute_config": ("recompute", "select_recompute", "parallel_optimizer_comm_recompute", "mp_comm_recompute",
                         "recompute_slice_activation", "select_comm_recompute"),
}
MODEL_KEYS = ("type", "seq_length", "max_position_embedding", "max_position_embeddings", "num_layers", "hidden_size",
              "intermediate_size", "multiple_of", "ffn_dim_multiplier", "num_heads", "n_kv_heads", "vocab_size",
              "rms_norm_eps", "theta", "compute_dtype", "pp_interleave_num", "offset", "qkv_has_bias", "q_lora_rank",
              "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "mtp_depth", "extend_method",
              "scaling_factor", "tie_word_embeddings")
MODEL_IGNORED = ("batch_size", "bos_token_id", "eos_token_id", "pad_token_id", "ignore_token_id",
                 "layernorm_compute_type", "softmax_compute_type", "rotary_dtype", "param_init_type", "use_past",
                 "use_flash_attention", "checkpoint_name_or_path", "repetition_penalty", "max_decode_length", "top_k",
                 "top_p", "do_sample", "auto_register", "embedding_init_type", "is_dynamic", "use_rope_slice",
                 "fine_grain_interleave", "qkv_concat", "block_size", "num_blocks", "use_fused_rope",
                 "use_fused_swiglu", "fused_rms_norm", "residual_dtype", "init_method_std", "router_dense_type",
                 "use_attn_mask_compression", "use_eod_attn_mask_compression", "input_sliced_sig", "parallel_decoding",
                 "scale_emb", "use_ring_attention", "mtp_loss_factor", "return_extra_loss", "use_fused_mla",
                 "use_fused_ops_permute", "use_ring_attention_", "lm_head_dim", "rank_wise_cache")
MOE_KEYS = ("expert_num", "num_experts_chosen", "moe_intermediate_size", "shared_expert_num", "first_k_dense_replace",
            "routing_policy", "use_gating_sigmoid", "norm_topk_prob", "routed_scaling_factor", "n_group", "topk_group",
            "balance_via_topk_bias", "topk_bias_update_rate", "z_loss_factor", "enable_deredundency",
            "npu_nums_per_device", "aux_loss_types", "aux_loss_factors", "aux_loss_factor", "use_gmm",
            "capacity_factor", "enable_sdrop", "router_dense_type", "use_fused_ops_topkrouter", "comp_comm_parallel",
            "comp_comm_parallel_degree", "group_wise_a2a", "enable_gmm_safe_tokens", "callback_moe_droprate",
            "use_allgather_dispatcher", "num_experts_", "moe_shared_expert_overlap", "use_fused_ops_permute")


def _section(d: dict, key: str) -> dict:
    sec = d.get(key) or {}
    if not isinstance(sec, dict):
        raise AsapError(key, "must be a mapping")
    for k in sec:
        if k not in KEYS[key]:
            raise refuse_key(FMT, f"{key}.{k}")
    return sec


def read(path: Path, text: str, *, model=None, seq_len=None, cluster=None) -> Parsed:
    import yaml

    d = yaml.safe_load(text)
    for k in d:
        if k not in KEYS and k not in TOP_IGNORED and k not in ("model", "moe_config", "swap_config"):
            raise refuse_key(FMT, k)
    if (d.get("swap_config") or {}).get("swap"):
        raise refuse_key(FMT, "swap_config.swap", "host swapping of layers (asap offloads activations or optimizer)")
    pc, par, rc, rec = (_section(d, k) for k in ("parallel_config", "parallel", "runner_config", "recompute_config"))
    mc = ((d.get("model") or {}).get("model_config")) or {}
    for k in mc:
        if k not in MODEL_KEYS and k not in MODEL_IGNORED:
            raise refuse_key(FMT, f"model.model_config.{k}")
    moe = d.get("moe_config") or {}
    for k in moe:
        if k not in MOE_KEYS:
            raise refuse_key(FMT, f"moe_config.{k}")
    mdl = check_model_given(mf_model(mc, moe, mc.get("type", "LlamaConfig") + "-" + path.stem), model)
    s, devices, global_batch = mf_strategy(pc, par, rc, rec, mc, moe, mdl)
    seq = mc.get("seq_length", seq_len)
    if seq is None:
        raise AsapError("model.model_config.seq_length", "missing")
    return Parsed(mdl, global_batch, positive_int(seq, "model.model_config.seq_length"), _precision(mc), s,
                  devices=devices)


def _precision(mc: dict) -> str:
    table = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    dt = mc.get("compute_dtype", "float16")
    if dt not in table:
        raise AsapError("model.model_config.compute_dtype", f"must be one of {', '.join(table)}, got {dt!r}")
    return table[dt]


def mf_strategy(pc: dict, par: dict, rc: dict, rec: dict, mc: dict, moe: dict, model: ModelSpec):
    def size(key: str) -> int:
        return positive_int(pc.get(key, 1), f"parallel_config.{key}")

    dp, tp, pp, cp = size("data_parallel"), size("model_parallel"), size("pipeline_stage"), size("context_parallel")
    vpp = positive_int(mc.get("pp_interleave_num", 1), "model.model_config.pp_interleave_num")
    s: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "vpp": vpp,
                         "sp": int(bool(pc.get("use_seq_parallel"))), "mbs": positive_int(rc.get("batch_size", 1),
                                                                                          "runner_config.batch_size"),
                         "schedule": "interleaved" if vpp > 1 else "1f1b"}
    if cp > 1:
        algo = pc.get("context_parallel_algo", "colossalai_cp")
        if algo not in ("colossalai_cp", "ulysses_cp"):
            raise refuse_key(FMT, "parallel_config.context_parallel_algo", str(algo))
        s["cp_comm"] = "a2a" if algo == "ulysses_cp" else "allgather"
    zero = bool(par.get("enable_parallel_optimizer", pc.get("optimizer_shard", False)))
    s["zero"] = int(zero)
    shard = (par.get("parallel_optimizer_config") or {}).get("optimizer_weight_shard_size", -1)
    if zero and shard not in (-1, None) and shard < dp * cp:
        s["dp_replicate"] = dp * cp // positive_int(shard, "parallel.parallel_optimizer_config.optimizer_weight_shard_size")
    if model.moe is not None:
        s.update(ep=size("expert_parallel"), etp=tp,
                 dispatcher="dedup" if moe.get("enable_deredundency") else "alltoall")
    s["recompute"] = _recompute(rec)
    if pp > 1 or vpp > 1:
        split = _split(mc.get("offset", 0), model.num_layers, pp, vpp)
        if split:
            s["layer_split"] = split
    micro = positive_int(pc.get("micro_batch_num", 1), "parallel_config.micro_batch_num") if pp > 1 else 1
    ga = positive_int(rc.get("gradient_accumulation_steps", 1), "runner_config.gradient_accumulation_steps")
    return s, dp * tp * pp * cp, s["mbs"] * dp * micro * ga


def _recompute(rec: dict) -> str:
    full, sel = rec.get("recompute", False), rec.get("select_recompute", False)
    for key, v in (("recompute", full), ("select_recompute", sel)):
        if not isinstance(v, bool):
            raise refuse_key(FMT, f"recompute_config.{key}", f"{v!r}: a per-stage list of layers (asap recomputes "
                                                             "every layer or none)")
    return "full" if full else "selective" if sel else "none"


def _split(offset: Any, layers: int, pp: int, vpp: int) -> str | None:
    """Layers per chunk: num_layers // (pp * vpp) plus the offset of each stage (per interleave, then stage)."""
    from asap.spec.layout import default_chunk_layers

    base = layers // (pp * vpp)
    if isinstance(offset, int):
        offs = [offset] * (pp * vpp)
    elif offset and isinstance(offset[0], list):
        offs = [o for row in offset for o in row]
    else:
        offs = list(offset) * vpp if vpp > 1 and len(offset) == pp else list(offset)
    if len(offs) != pp * vpp:
        raise AsapError("model.model_config.offset", f"{len(offs)} offsets for pp={pp} x pp_interleave_num={vpp}")
    chunks = [base + o for o in offs]
    if sum(chunks) != layers:
        if isinstance(offset, int) and offset == 0:
            return None  # MindFormers spreads the remainder itself: asap's default split
        raise AsapError("model.model_config.offset", f"the stages hold {sum(chunks)} layers of {layers}")
    return None if chunks == list(default_chunk_layers(layers, pp * vpp)) else "/".join(map(str, chunks))


def _ffn(mc: dict) -> int:
    if mc.get("intermediate_size"):
        return int(mc["intermediate_size"])
    h = int(mc["hidden_size"])
    hidden = int(2 * (4 * h) / 3)  # LlamaFeedForward (mindformers/models/llama/llama_layer.py)
    if mc.get("ffn_dim_multiplier"):
        hidden = int(float(mc["ffn_dim_multiplier"]) * hidden)
    m = int(mc.get("multiple_of", 256))
    return m * ((hidden + m - 1) // m)


def mf_model(mc: dict, moe: dict, name: str) -> ModelSpec:
    for key in ("num_layers", "hidden_size", "num_heads", "vocab_size"):
        if key not in mc:
            raise AsapError(f"model.model_config.{key}", "missing")
    if mc.get("tie_word_embeddings"):
        raise refuse_key(FMT, "model.model_config.tie_word_embeddings", "tied embeddings")
    heads = int(mc["num_heads"])
    d: dict[str, Any] = {"name": name, "num_layers": mc["num_layers"], "hidden_size": mc["hidden_size"],
                         "ffn_hidden_size": _ffn(mc), "num_attention_heads": heads,
                         "num_kv_heads": mc.get("n_kv_heads") or heads, "vocab_size": mc["vocab_size"],
                         "norm_eps": float(mc.get("rms_norm_eps", 1e-5)), "rope_theta": float(mc.get("theta", 10000.0)),
                         "attention_bias": "qkv" if mc.get("qkv_has_bias") else "none"}
    method = str(mc.get("extend_method", "None"))
    if mc.get("type") == "DeepseekV3Config":
        d["mla"] = {"q_lora_rank": mc.get("q_lora_rank") or None, "kv_lora_rank": mc["kv_lora_rank"],
                    "qk_nope_head_dim": mc["qk_nope_head_dim"], "qk_rope_head_dim": mc["qk_rope_head_dim"],
                    "v_head_dim": mc["v_head_dim"]}
        d["num_kv_heads"] = heads
        d["mtp_layers"] = int(mc.get("mtp_depth", 0))
        if method == "YARN":
            r = mc.get("scaling_factor") or {}
            d["rope_scaling"] = {"type": "yarn", **{k: r[k] for k in ("factor", "beta_fast", "beta_slow", "mscale",
                                                                       "mscale_all_dim",
                                                                       "original_max_position_embeddings") if k in r}}
    elif mc.get("type", "LlamaConfig") != "LlamaConfig":
        raise refuse_key(FMT, "model.model_config.type", f"{mc.get('type')} (asap reads LlamaConfig, DeepseekV3Config)")
    if method not in ("None", "YARN") or (method == "YARN" and "mla" not in d):
        raise refuse_key(FMT, "model.model_config.extend_method", f"{method} (asap reads None, and YARN with MLA)")
    if moe.get("expert_num", 1) > 1:
        d["moe"] = _moe(moe, d["ffn_hidden_size"])
    return model_from_dict(d, "model")


def _moe(m: dict, ffn: int) -> dict[str, Any]:
    if m.get("aux_loss_types"):
        types, factors = m["aux_loss_types"], m.get("aux_loss_factors") or [0.0]
        if list(types) != ["expert"]:
            raise refuse_key(FMT, "moe_config.aux_loss_types", f"{types} (asap reads ['expert'], per sequence)")
        kind, coef = "sequence", float(factors[0])
    else:
        kind, coef = "global", float(m.get("aux_loss_factor", 0.0) or 0.0)
    e: dict[str, Any] = {
        "num_experts": m["expert_num"], "top_k": m.get("num_experts_chosen", 1),
        "expert_ffn_hidden_size": m.get("moe_intermediate_size") or ffn, "shared_experts": m.get("shared_expert_num", 0),
        "first_dense_layers": m.get("first_k_dense_replace", 0),
        "score_func": "sigmoid" if m.get("use_gating_sigmoid") else "softmax",
        "norm_topk_prob": bool(m.get("norm_topk_prob", True)),
        "routed_scaling_factor": float(m.get("routed_scaling_factor", 1.0)),
        "n_group": m.get("n_group") or 1, "topk_group": m.get("topk_group") or 1,
        "expert_bias": bool(m.get("balance_via_topk_bias")),
        "expert_bias_update_rate": float(m.get("topk_bias_update_rate", 1e-3)),
        "z_loss_coef": float(m.get("z_loss_factor", 0.0) or 0.0),
        "aux_loss": kind if coef else "none", "aux_loss_coef": coef}
    if m.get("use_gmm", True) is False and m.get("capacity_factor") is not None:
        e.update(capacity_factor=float(m["capacity_factor"]),
                 drop_policy="probs" if m.get("enable_sdrop", True) else "position")
    return e
