"""A MaxText config read back into asap's job (the inverse of ``asap.emit.maxtext``).

Input: a YAML of overrides of ``configs/base.yml`` (what ``asap emit --format maxtext`` writes; MaxText's own
``configs/models/*.yml`` and GPU configs), or a launch script / command line running ``MaxText.train``
(``maxtext.trainers...``) on ``base.yml`` with ``key=value`` overrides (``configs/*/*.sh``). Precedence is
MaxText 0.2.5's ``pyconfig``: base.yml's defaults (``data/maxtext_models.json`` and ``BASE`` below), then the
YAML, then the command line, with a ``model_name`` file (``configs/models/<name>.yml``) winning on the keys it
sets. The mesh: ``ici_*`` x ``dcn_*`` per axis (base.yml: ``ici_fsdp_parallelism`` and ``dcn_data_parallelism``
-1, the axes that fill the devices: the cluster's per-slice and slice counts); pipeline -> pp, tensor -> tp (with
sequence-parallel activations), context -> cp (all-gather exchange), expert -> ep (carved out of the batch), data
x fsdp x expert -> dp (fsdp > 1: ZeRO 3, with data > 1 hybrid sharding; fsdp = 1: ZeRO 0). The batch:
``int(per_device_batch_size`` x devices) x ``gradient_accumulation_steps`` (pyconfig's
``calculate_global_batch_sizes``); micro-batches ``num_pipeline_microbatches``
under a pipeline (-1: the pipeline's stage count); ``num_layers_per_pipeline_stage`` gives vpp. ``remat_policy``
none / minimal (selective) / full or a MaxText policy (``asap.spec.remat``), ``minimal_offloaded`` and ``custom``
with ``decoder_layer_input: offload`` (activation offload); ``optimizer_memory_host_offload``; ``dtype`` and
``quantization`` (fp8). Axes asap has no counterpart for (fsdp_transpose, sequence, tensor_transpose,
tensor_sequence, autoregressive, context_usp_ulysses, diloco) are refused unless 1.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from asap.emit.maxtext import CUSTOM_REMAT_TENSORS
from asap.emit.maxtext_model import ARCH_KEYS, implied, tables
from asap.emit.read_common import Parsed, check_model_given, number, positive_int, refuse_key
from asap.errors import AsapError
from asap.spec.model import ModelSpec, model_from_dict

FMT = "maxtext"
MARKER = re.compile(r"(MaxText\.train|maxtext\.trainers\.pre_train\.\w*|MaxText/train\.py|train_compile)$")
AXES = ("data", "fsdp", "context", "tensor", "expert", "pipeline")
OTHER_AXES = ("fsdp_transpose", "sequence", "tensor_transpose", "tensor_sequence", "autoregressive",
              "context_autoregressive", "context_usp_ulysses", "diloco")
# base.yml's defaults of the keys asap reads beyond the model's (configs/base.yml, MaxText 0.2.5)
BASE: dict[str, Any] = {"per_device_batch_size": 12.0, "max_target_length": 2048, "gradient_accumulation_steps": 1,
                        "num_pipeline_microbatches": -1, "num_layers_per_pipeline_stage": 1, "remat_policy": "full",
                        "dtype": "bfloat16", "quantization": "", "optimizer_memory_host_offload": False,
                        "decoder_layer_input": "device", "model_name": "default", "global_parameter_scale": 1,
                        **{f"ici_{a}_parallelism": 1 for a in AXES + OTHER_AXES},
                        **{f"dcn_{a}_parallelism": 1 for a in AXES + OTHER_AXES},
                        "ici_fsdp_parallelism": -1, "dcn_data_parallelism": -1, "num_vocab_tiling": 1}
MAPPED = tuple(BASE) + ARCH_KEYS + CUSTOM_REMAT_TENSORS + ("base_config",)
# keys that do not change a step: paths, data, logging, checkpointing, profiling, the optimizer's
# hyper-parameters, seeds; the kernel choices asap prices one way (flash attention, fused kernels)
IGNORED = ("run_name", "base_output_directory", "hardware", "steps", "log_period", "enable_checkpointing",
           "async_checkpointing", "checkpoint_period", "learning_rate", "attention", "dataset_type", "dataset_path",
           "dataset_name", "tokenizer_path", "tokenizer_type", "enable_profiler", "profiler", "upload_all_profiler_results",
           "skip_first_n_steps_for_profiler", "profiler_steps", "use_iota_embed", "metrics_file", "gcs_metrics",
           "enable_goodput_recording", "monitor_goodput", "save_config_to_gcs", "enable_data_shuffling",
           "data_shuffle_seed", "init_weights_seed", "adam_b1", "adam_b2", "adam_eps", "adam_weight_decay",
           "warmup_steps_fraction", "cosine_learning_rate_final_fraction", "learning_rate_schedule_steps",
           "skip_jax_distributed_system", "weight_dtype", "sa_block_q", "sa_block_kv", "sa_block_kv_compute",
           "sa_block_q_dkv", "sa_block_kv_dkv", "sa_block_kv_dkv_compute", "sa_block_q_dq", "sa_block_kv_dq",
           "sa_use_fused_bwd_kernel", "sa_q_layout", "sa_k_layout", "sa_v_layout", "megablox", "sparse_matmul",
           "reuse_example_batch", "eval_interval", "eval_steps", "eval_per_device_batch_size", "packing",
           "load_parameters_path", "load_full_state_path", "checkpoint_storage_use_ocdbt", "checkpoint_storage_use_zarr3",
           "enable_single_controller", "scan_layers", "logits_dot_in_fp32", "float32_logits", "float32_qk_product",
           "opt_type", "gradient_clipping_threshold", "max_corpus_chars", "train_split", "eval_split", "hf_path",
           "hf_data_dir", "hf_train_files", "hf_eval_files", "grain_train_files", "grain_worker_count",
           "tokenize_train_data", "tokenize_eval_data", "add_bos", "add_eos", "per_device_batch_size_start",
           "per_device_batch_size_increment", "num_slices", "compile_topology", "compile_topology_num_slices",
           "enable_dropout", "dropout_rate", "jax_cache_dir", "gcs_checkpoint", "tensorboard_dir",
           "xprof_tpu_power_trace_level", "profile_cleanly", "enable_jax_profiler", "max_prefill_predict_length",
           "trainable_position_size", "allow_split_physical_axes", "custom_mesh", "use_post_attn_norm",
           "use_post_ffw_norm", "prefill_cache_axis_order", "ar_cache_axis_order", "use_vertex_tensorboard",
           "vertex_tensorboard_project", "vertex_tensorboard_region", "enable_pathways_goodput",
           "max_position_embeddings", "max_segments_per_seq", "context_parallel_strategy",
           "context_parallel_load_balance", "context_sharding")


def _overrides(path: Path, text: str) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """(the YAML's keys, the command line's key=value overrides in order)."""
    import yaml

    if path.suffix.lower() in (".yml", ".yaml"):
        d = yaml.safe_load(text) or {}
        if not isinstance(d, dict):
            raise AsapError("config", "a MaxText config must be a mapping")
        return d, []
    from asap.emit.read_shell import launch_line

    _, words, _ = launch_line(text, MARKER, "script")
    out = []
    for w in words:
        if "=" in w and not w.startswith("-"):
            k, v = w.split("=", 1)
            out.append((k, yaml.safe_load(v) if v else ""))
        elif not w.endswith((".yml", ".yaml")):
            raise refuse_key(FMT, w, "a command-line word that is neither key=value nor a config file")
    return {}, out


def read(path: Path, text: str, *, model=None, seq_len=None, cluster=None) -> Parsed:
    yml, cli = _overrides(path, text)
    cfg: dict[str, Any] = {**tables()["defaults"], **BASE, **yml, **dict(cli)}
    for k in list(yml) + [k for k, _ in cli]:
        if k not in MAPPED and k not in IGNORED and not k.startswith(("eval_", "profiler_", "checkpoint_", "hf_")):
            raise refuse_key(FMT, k)
    name = cfg.get("model_name", "default")
    if name != "default":
        models = tables()["models"]
        if name not in models:
            raise refuse_key(FMT, "model_name", f"{name} (no MaxText 0.2.5 model file of that name)")
        cfg.update(implied(name, models[name]))
    mdl = check_model_given(maxtext_model(cfg, name if name != "default" else path.stem), model)
    s, devices = maxtext_strategy(cfg, mdl, cluster)
    if seq_len is not None and "max_target_length" not in yml and "max_target_length" not in dict(cli):
        cfg["max_target_length"] = seq_len
    return Parsed(mdl, s.pop("_global"), positive_int(cfg["max_target_length"], "max_target_length"),
                  _precision(cfg), s, devices=devices)


def _precision(cfg: dict) -> str:
    q = cfg.get("quantization") or ""
    if q in ("fp8", "nanoo_fp8", "fp8_full", "fp8_gpu"):
        return "fp8"
    if q:
        raise refuse_key(FMT, "quantization", f"{q} (asap reads fp8)")
    dt = cfg.get("dtype", "bfloat16")
    table = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
    if dt not in table:
        raise AsapError("dtype", f"must be one of {', '.join(table)}, got {dt!r}")
    return table[dt]


def _axes(cfg: dict, cluster) -> dict[str, int]:
    """Each named axis's size, ici x dcn, the -1 axes filled from the cluster (per slice, slices)."""
    for a in OTHER_AXES:
        for tier in ("ici", "dcn"):
            if cfg.get(f"{tier}_{a}_parallelism", 1) not in (1, -1):
                raise refuse_key(FMT, f"{tier}_{a}_parallelism", f"{cfg[f'{tier}_{a}_parallelism']} (asap has no "
                                                                 f"{a} axis)")
    ici = {a: int(cfg.get(f"ici_{a}_parallelism", 1)) for a in AXES}
    dcn = {a: int(cfg.get(f"dcn_{a}_parallelism", 1)) for a in AXES}
    for tier, axes, total in (("ici", ici, _per_slice(cluster)), ("dcn", dcn, _slices(cluster))):
        fill = [a for a, v in axes.items() if v == -1]
        if len(fill) > 1:
            raise AsapError(f"{tier}_{fill[1]}_parallelism", "more than one -1 axis")
        if fill:
            known = 1
            for v in axes.values():
                known *= v if v != -1 else 1
            if total is None:
                axes[fill[0]] = 1 if tier == "dcn" else 0
            elif total % known:
                raise AsapError(f"{tier}_{fill[0]}_parallelism", f"-1 cannot fill {total} devices over {known}")
            else:
                axes[fill[0]] = total // known
    if 0 in ici.values():
        raise AsapError("cluster", "the mesh has a -1 axis (ici_fsdp_parallelism by default): give a cluster to fill it")
    return {a: ici[a] * dcn[a] for a in AXES}


def _slices(cluster) -> int | None:
    return None if cluster is None else max(1, cluster.topology.num_domains)


def _per_slice(cluster) -> int | None:
    return None if cluster is None else cluster.num_devices // max(1, cluster.topology.num_domains)


def maxtext_strategy(cfg: dict, model: ModelSpec, cluster) -> tuple[dict[str, Any], int]:
    ax = _axes(cfg, cluster)
    devices = 1
    for v in ax.values():
        devices *= v
    pp, tp, cp, ep = ax["pipeline"], ax["tensor"], ax["context"], ax["expert"]
    dp = ax["data"] * ax["fsdp"] * ep
    s: dict[str, Any] = {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "sp": int(tp > 1)}
    if cp > 1:
        s["cp_comm"] = _cp_comm(cfg)
    if int(cfg.get("num_vocab_tiling", 1)) > 1:  # the loss in chunks of the tokens (utils/vocabulary_tiling.py)
        s["vocab_tiles"] = int(cfg["num_vocab_tiling"])
    if ax["fsdp"] > 1:
        s["zero"] = 3
        s["dp_replicate"] = ax["data"]
    elif ax["data"] > 1:
        s["zero"] = 0
    if model.moe is not None:
        s.update(ep=ep, dispatcher="alltoall", a2a_overlap=0)
    ga = positive_int(cfg.get("gradient_accumulation_steps", 1), "gradient_accumulation_steps")
    per_device = number(cfg.get("per_device_batch_size", 12.0), "per_device_batch_size")
    global_batch = per_device * devices * ga
    if global_batch != int(global_batch) or global_batch < 1:
        raise AsapError("per_device_batch_size", f"{per_device:g} x {devices} devices x {ga} is not a whole batch")
    n_micro = 1
    if pp > 1:
        per = positive_int(cfg.get("num_layers_per_pipeline_stage", 1), "num_layers_per_pipeline_stage")
        if model.num_layers % (pp * per):
            raise AsapError("num_layers_per_pipeline_stage", f"{per} x pp={pp} does not divide {model.num_layers} layers")
        s["vpp"] = model.num_layers // (pp * per)
        n_micro = int(cfg.get("num_pipeline_microbatches", -1))
        n_micro = pp if n_micro < 1 else n_micro
    if int(global_batch) % (dp * n_micro * ga):
        raise AsapError("per_device_batch_size", f"a batch of {int(global_batch)} does not split into dp={dp} x "
                                                 f"{n_micro * ga} micro-batches")
    s["mbs"] = int(global_batch) // (dp * n_micro * ga)
    s.update(_remat(cfg))
    if cfg.get("optimizer_memory_host_offload"):
        s["offload_opt"] = 1
    s["_global"] = int(global_batch)
    return s, devices


# base.yml context_parallel_strategy -> cp_comm: the K,V all-gather (default) or Ulysses' all-to-alls; MaxText's
# ring (tokamax) and usp (Ulysses x ring) are not priced
CP_STRATEGIES = {"all_gather": "allgather", "ulysses": "a2a"}


def _cp_comm(cfg: dict) -> str:
    """The context-parallel exchange a MaxText config asks for (``context_parallel_strategy``); the causal load
    balance (``context_parallel_load_balance``, default true: 2 cp chunks per sequence) is what asap prices."""
    strategy = str(cfg.get("context_parallel_strategy", "all_gather"))
    if strategy not in CP_STRATEGIES:
        raise refuse_key(FMT, "context_parallel_strategy", f"{strategy} (asap reads all_gather and ulysses)")
    if str(cfg.get("context_parallel_load_balance", True)).lower() in ("false", "0"):
        raise refuse_key(FMT, "context_parallel_load_balance", "false (asap prices the load-balanced chunks)")
    return CP_STRATEGIES[strategy]


def _remat(cfg: dict) -> dict[str, Any]:
    from asap.spec import remat

    policy = cfg.get("remat_policy", "full")
    if policy in ("none", "minimal", "full"):
        return {"recompute": {"minimal": "selective"}.get(policy, policy)}
    if policy == "minimal_offloaded":
        return {"recompute": "selective", "offload_act": 1}
    if policy == "custom":
        where = {t: cfg.get(t, "remat") for t in remat.TENSORS}
        if cfg.get("decoder_layer_input") == "offload":
            others = {cfg.get(t, "remat") for t in CUSTOM_REMAT_TENSORS}
            if len(others) != 1:
                raise refuse_key(FMT, "decoder_layer_input", "offloaded layer inputs with a mixed custom policy")
            return {"recompute": "full" if others == {"remat"} else "none", "offload_act": 1}
        return {"recompute": "custom:" + "+".join(f"{t}={v}" for t, v in where.items())}
    if policy not in remat.NAMES:
        raise refuse_key(FMT, "remat_policy", f"{policy} (asap reads {', '.join(remat.NAMES)})")
    return {"recompute": policy}


# ---- the model ---------------------------------------------------------------------------------------------------

def scaled(c: dict[str, Any]) -> dict[str, Any]:
    """The ``base_*`` sizes scaled by ``global_parameter_scale`` (a power of 2) as pyconfig's
    ``get_individual_scales`` does: log2 = 3b + r; heads and MLP widths x 2^(b + (r > 0)), the embedding
    x 2^(b + (r > 1)), layers x 2^b."""
    scale = int(c.get("global_parameter_scale", 1))
    log2 = scale.bit_length() - 1
    if scale < 1 or 2 ** log2 != scale:
        raise AsapError("global_parameter_scale", f"must be a power of 2, got {scale}")
    if scale == 1:
        return c
    base, rem = divmod(log2, 3)
    heads, emb = base + int(rem > 0), base + int(rem > 1)
    out = dict(c)
    for key, exp in (("base_emb_dim", emb), ("base_num_query_heads", heads), ("base_num_kv_heads", heads),
                     ("base_mlp_dim", heads), ("base_moe_mlp_dim", heads), ("base_num_decoder_layers", base)):
        if isinstance(out.get(key), int) and out[key] > 0:
            out[key] = out[key] * 2 ** exp
    return out


def maxtext_model(c: dict[str, Any], name: str) -> ModelSpec:
    """asap's model from the architecture keys (``asap.emit.maxtext_model.keys`` inverted), scaled by
    ``global_parameter_scale``."""
    c = scaled(c)
    block = c.get("decoder_block", "llama2")
    if block not in ("llama2", "mistral", "mixtral", "qwen3", "qwen3_moe", "deepseek", "gpt_oss"):
        raise refuse_key(FMT, "decoder_block", f"{block} (asap reads llama2, mistral, mixtral, qwen3, qwen3_moe, "
                                               "deepseek, gpt_oss)")
    acts = list(c.get("mlp_activations", ["silu", "linear"]))
    limit = float(c.get("mlp_activations_limit", -1.0))
    table = {("silu", "linear"): "swiglu", ("gelu",): "gelu", ("sigmoid", "linear"): "swiglu"}
    if tuple(acts) not in table:
        raise refuse_key(FMT, "mlp_activations", f"{acts}")
    d: dict[str, Any] = {
        "name": name, "num_layers": c["base_num_decoder_layers"], "hidden_size": c["base_emb_dim"],
        "ffn_hidden_size": c["base_mlp_dim"], "num_attention_heads": c["base_num_query_heads"],
        "num_kv_heads": c["base_num_kv_heads"], "head_dim": c.get("head_dim", 128), "vocab_size": c["vocab_size"],
        "activation": table[tuple(acts)], "tie_embeddings": bool(c.get("logits_via_embedding")),
        "norm_eps": float(c.get("normalization_layer_epsilon", 1e-5)), "qk_norm": bool(c.get("use_qk_norm")),
        "attention_bias": "all" if c.get("attention_bias") else "none", "mlp_bias": bool(c.get("mlp_bias")),
        "attention_sinks": bool(c.get("attention_sink")), "sliding_window": int(c.get("sliding_window_size") or 0),
        "swiglu_limit": limit if limit > 0 else 0.0}
    if d["sliding_window"]:
        cycle = int(c.get("inhomogeneous_layer_cycle_interval", 1))
        d["sliding_window_cycle"] = cycle if cycle > 1 else 0
    d.update(_rope(c, block))
    if c.get("attention_type") == "mla":
        d.pop("head_dim")
        d["mla"] = {"q_lora_rank": c.get("q_lora_rank") or None, "kv_lora_rank": c["kv_lora_rank"],
                    "qk_nope_head_dim": c["qk_nope_head_dim"], "qk_rope_head_dim": c["qk_rope_head_dim"],
                    "v_head_dim": c["v_head_dim"]}
        d["num_kv_heads"] = d["num_attention_heads"]
    if int(c.get("num_experts", 1)) > 1:
        d["moe"] = _moe(c)
    if c.get("mtp_num_layers"):
        d["mtp_layers"] = c["mtp_num_layers"]
    return model_from_dict(d, "model")


def _rope(c: dict, block: str) -> dict[str, Any]:
    out: dict[str, Any] = {"rope_theta": float(c.get("rope_max_timescale", 10000))}
    kind = c.get("rope_type", "default")
    if kind == "llama3.1":
        out["rope_scaling"] = {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    elif kind == "yarn":
        out["rope_scaling"] = {"type": "yarn", "factor": float(c["rope_factor"]), "beta_fast": float(c["beta_fast"]),
                               "beta_slow": float(c["beta_slow"]), "mscale": float(c.get("mscale", 1.0)),
                               "original_max_position_embeddings": int(c["original_max_position_embeddings"]),
                               "truncate": bool(c.get("rope_truncate", True))}
        if block == "deepseek":
            out["rope_scaling"]["mscale_all_dim"] = float(c.get("mscale", 1.0))
    elif kind != "default":
        raise refuse_key(FMT, "rope_type", f"{kind} (asap reads default, llama3.1, yarn)")
    return out


def _moe(c: dict) -> dict[str, Any]:
    rate = float(c.get("routed_bias_update_rate", 0.0))
    sigmoid = c.get("routed_score_func") == "sigmoid"
    weight = float(c.get("load_balance_loss_weight", 0.0))
    e: dict[str, Any] = {
        "num_experts": c["num_experts"], "top_k": c["num_experts_per_tok"], "expert_ffn_hidden_size": c["base_moe_mlp_dim"],
        "shared_experts": c.get("shared_experts", 0), "first_dense_layers": c.get("first_num_dense_layers", 0),
        "score_func": "sigmoid" if sigmoid else "softmax",
        "norm_topk_prob": bool(c.get("norm_topk_prob")) if sigmoid else True,  # MaxText softmaxes the top-k logits
        "expert_bias": bool(c.get("routed_bias")) and rate > 0, "router_bias": bool(c.get("routed_bias")) and rate == 0,
        "routed_scaling_factor": float(c.get("routed_scaling_factor", 1.0)),
        "aux_loss": ("sequence" if c.get("moe_use_megatron_seq_aux_loss") else "global") if weight else "none",
        "aux_loss_coef": weight,
        "capacity_factor": None if float(c.get("capacity_factor", -1.0)) <= 0 else float(c["capacity_factor"])}
    if e["expert_bias"]:
        e["expert_bias_update_rate"] = rate
    if int(c.get("n_routing_groups", -1)) > 1:
        e.update(n_group=int(c["n_routing_groups"]), topk_group=int(c["topk_routing_group"]))
    return e
