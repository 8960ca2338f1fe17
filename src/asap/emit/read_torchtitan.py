"""A torchtitan TOML job config read back into asap's job (the inverse of ``asap.emit.torchtitan``).

torchtitan v0.2.2's ``JobConfig`` (``torchtitan/config/job_config.py``) with its defaults where a key is absent:
``[model]`` name and flavor (a registered flavor's arguments from ``data/torchtitan_flavors.json``, inverted per
family: llama3, qwen3, deepseek_v3, gpt_oss; a flavor asap registered, ``asap-<model>``, is the named preset or the
``model`` given), converters (``quantize.linear.float8`` / ``float8``: fp8); ``[training]`` local_batch_size (8),
global_batch_size (-1: local * dp), seq_len (2048), mixed_precision_param (bfloat16), mixed_precision_reduce
(float32), enable_cpu_offload (FSDP's CPU offload: offload_opt); ``[parallelism]`` data_parallel_replicate_degree
(1), data_parallel_shard_degree (-1: the rest of the devices), fsdp_reshard_after_forward (``never``: ZeRO 2,
else 3), tensor (always sequence-parallel), pipeline, context, expert and expert-tensor degrees, the pipeline
schedule (1F1B, Interleaved1F1B, InterleavedZeroBubble, GPipe) with pipeline_parallel_microbatch_size (1) and
module_fqns_per_model_part (the layer split) or pipeline_parallel_layers_per_stage, expert_parallel_comm_backend
(``deepep``: the deduplicated dispatcher); ``[activation_checkpoint]`` mode (selective by default) none | full |
selective with ``selective_ac_option = "op"`` (the default "2", every second layer, is refused: asap recomputes
every layer or none); ``[compile] enable`` with ``components`` (fused elementwise kernels where the model is
compiled; the compiled loss's bytes where the loss is: ``TrainSpec.compiled_loss``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from asap.emit.read_common import Parsed, check_model_given, positive_int, refuse_key
from asap.emit.torchtitan_model import _llama3_ffn, _tables, flavors
from asap.errors import AsapError
from asap.spec.model import ModelSpec, model_from_dict

FMT = "torchtitan"
SECTIONS_IGNORED = ("job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "comm",
                    "memory_estimation", "fault_tolerance", "experimental", "validation", "debug", "quantize", "float8",
                    "mx")
KEYS = {
    "model": ("name", "flavor", "converters", "tokenizer_path", "hf_assets_path", "print_after_conversion",
              "print_after_conversion_"),
    "training": ("local_batch_size", "batch_size", "global_batch_size", "seq_len", "mixed_precision_param",
                 "mixed_precision_reduce", "enable_cpu_offload", "dataset", "dataset_path", "max_norm", "steps",
                 "warmup_steps", "gc_freq", "gc_debug", "seed", "deterministic", "dtype", "data_parallel_replicate_degree_"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "pipeline_parallel_degree", "pipeline_parallel_schedule",
                    "pipeline_parallel_microbatch_size", "module_fqns_per_model_part", "pipeline_parallel_layers_per_stage",
                    "context_parallel_degree", "expert_parallel_degree", "expert_tensor_parallel_degree",
                    "expert_parallel_comm_backend", "disable_loss_parallel", "enable_async_tensor_parallel",
                    "context_parallel_load_balancer", "context_parallel_rotate_method",
                    "pipeline_parallel_first_stage_less_layers", "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_expert_parallel_overlap", "pipeline_parallel_split_points",
                    "enable_compiled_autograd"),
    "activation_checkpoint": ("mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns",
                              "preserve_rng_state", "determinism_check", "debug", "early_stop"),
    "compile": ("enable", "components", "backend"),
}
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved", "InterleavedZeroBubble": "zb"}


def read(path: Path, text: str, *, model=None, seq_len=None, cluster=None) -> Parsed:
    devices = cluster.num_devices if cluster is not None else None
    import tomllib

    try:
        d = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise AsapError("config", f"not TOML: {e}") from None
    for sec, body in d.items():
        if sec in SECTIONS_IGNORED:
            continue
        if sec not in KEYS or not isinstance(body, dict):
            raise refuse_key(FMT, f"[{sec}]")
        for k in body:
            if k not in KEYS[sec]:
                raise refuse_key(FMT, f"{sec}.{k}")
    tr, par, m = d.get("training", {}), d.get("parallelism", {}), d.get("model", {})
    seq = positive_int(tr.get("seq_len", seq_len or 2048), "training.seq_len")
    mdl = check_model_given(titan_model(m.get("name", "llama3"), m.get("flavor", "debugmodel"), model), model)
    s, dp = titan_strategy(par, mdl)
    fixed = dp * s["tp"] * s["pp"] * s["cp"] if dp else 0
    local = positive_int(tr.get("local_batch_size", tr.get("batch_size", 8)), "training.local_batch_size")
    s["mbs"] = positive_int(par.get("pipeline_parallel_microbatch_size", 1),
                            "parallelism.pipeline_parallel_microbatch_size") if s["pp"] > 1 else local
    gb = int(tr.get("global_batch_size", -1))
    if gb < 1:
        rank_dp = dp or ((devices or 0) // (s["tp"] * s["pp"] * s["cp"]))
        if not rank_dp:
            raise AsapError("training.global_batch_size", "-1 (local * dp) needs the device count: give a cluster")
        gb = local * rank_dp
    s.update(_recompute(d.get("activation_checkpoint", {})))
    if tr.get("enable_cpu_offload"):
        s["offload_opt"] = 1
    if tr.get("mixed_precision_reduce", "float32") != "float32":
        raise refuse_key(FMT, "training.mixed_precision_reduce", f"{tr['mixed_precision_reduce']} (asap prices "
                                                                 "torchtitan's fp32 gradient reduction)")
    comp = d.get("compile", {})
    parts = comp.get("components", ["model", "loss"])  # job_config.Compile's default
    on = bool(comp.get("enable"))
    return Parsed(mdl, gb, seq, _precision(tr, m), s, devices=fixed,
                  fused=on and "model" in parts if "enable" in comp else None, compiled_loss=on and "loss" in parts)


def _precision(tr: dict, m: dict) -> str:
    conv = m.get("converters", [])
    conv = [conv] if isinstance(conv, str) else conv
    if any("float8" in c for c in conv):
        return "fp8"
    if any("mx" in c for c in conv):
        raise refuse_key(FMT, "model.converters", f"{conv} (MX formats)")
    p = tr.get("mixed_precision_param", "bfloat16")
    if p not in ("bfloat16", "float32"):
        raise AsapError("training.mixed_precision_param", f"must be bfloat16 or float32, got {p!r}")
    return "bf16" if p == "bfloat16" else "fp32"


def _recompute(ac: dict) -> dict[str, Any]:
    mode = ac.get("mode", "selective")
    if mode == "selective":
        option = str(ac.get("selective_ac_option", "2"))
        if option != "op":
            raise refuse_key(FMT, "activation_checkpoint.selective_ac_option",
                             f"{option!r}: whole layers every {option} (asap recomputes every layer or none; "
                             "'op' is the op-level policy)")
    elif mode not in ("none", "full"):
        raise AsapError("activation_checkpoint.mode", f"must be none, selective or full, got {mode!r}")
    return {"recompute": mode}


def titan_strategy(par: dict, model: ModelSpec) -> tuple[dict[str, Any], int]:
    """The strategy keys and the data-parallel size (0: the shard degree fills the devices)."""
    def deg(key: str, default: int = 1) -> int:
        return positive_int(par.get(key, default), f"parallelism.{key}")

    r = deg("data_parallel_replicate_degree")
    shard = int(par.get("data_parallel_shard_degree", -1))
    tp, pp = deg("tensor_parallel_degree"), deg("pipeline_parallel_degree")
    s: dict[str, Any] = {"tp": tp, "pp": pp, "cp": deg("context_parallel_degree"), "sp": int(tp > 1)}
    _check_cp_ring(par)
    dp = r * shard if shard >= 1 else 0
    if dp:
        s["dp"] = dp
    sharded = shard != 1
    s["zero"] = (2 if par.get("fsdp_reshard_after_forward") == "never" else 3) if sharded else 0
    s["dp_replicate"] = r if sharded else 1
    if model.moe is not None:
        s["ep"], s["etp"] = deg("expert_parallel_degree"), deg("expert_tensor_parallel_degree")
        s["dispatcher"] = "dedup" if par.get("expert_parallel_comm_backend") == "deepep" else "alltoall"
        s["a2a_overlap"] = 0
    if pp > 1:
        s.update(_pipeline(par, model, pp))
    return s, dp


def _pipeline(par: dict, model: ModelSpec, pp: int) -> dict[str, Any]:
    from asap.spec.layout import default_chunk_layers

    name = par.get("pipeline_parallel_schedule", "1F1B")
    if name not in SCHEDULES:
        raise refuse_key(FMT, "parallelism.pipeline_parallel_schedule", f"{name} (asap reads {', '.join(SCHEDULES)})")
    out: dict[str, Any] = {"schedule": SCHEDULES[name]}
    fqns = par.get("module_fqns_per_model_part")
    if fqns:
        chunks = [sum(1 for f in part if re.fullmatch(r"layers\.\d+", f)) for part in fqns]
        if len(chunks) % pp or sum(chunks) != model.num_layers:
            raise AsapError("parallelism.module_fqns_per_model_part", f"{len(chunks)} parts of {sum(chunks)} layers "
                                                                      f"for pp={pp} and {model.num_layers} layers")
        out["vpp"] = len(chunks) // pp
        if chunks != list(default_chunk_layers(model.num_layers, len(chunks))):
            out["layer_split"] = "/".join(map(str, chunks))
    elif par.get("pipeline_parallel_layers_per_stage"):
        per = positive_int(par["pipeline_parallel_layers_per_stage"], "parallelism.pipeline_parallel_layers_per_stage")
        out["vpp"] = max(1, -(-model.num_layers // per) // pp)
    elif SCHEDULES[name] in ("1f1b", "gpipe"):
        out["vpp"] = 1
    return out


# ---- the model ---------------------------------------------------------------------------------------------------

def titan_model(family: str, flavor: str, given: ModelSpec | None) -> ModelSpec:
    table = flavors()
    if family not in table:
        raise refuse_key(FMT, "model.name", f"{family} (asap reads {', '.join(table)})")
    if flavor not in table[family]:
        if given is not None:
            return given
        from asap.spec.presets import MODEL_PRESETS

        preset = flavor.removeprefix("asap-")
        if flavor.startswith("asap-") and preset in MODEL_PRESETS:
            return model_from_dict(MODEL_PRESETS[preset][0])
        raise AsapError("model.flavor", f"{flavor} is not one of torchtitan's {family} flavors: the trainer registers "
                                        "it; give the model (--model)")
    args = {**_tables()["defaults"][family], **table[family][flavor]}
    return model_from_dict(BUILD[family](args, f"{family}-{flavor}"), "model")


def _moe(a: dict) -> dict[str, Any]:
    m = {**_tables()["defaults"]["moe"], **(a.get("moe_args") or {})}
    e: dict[str, Any] = {"num_experts": m["num_experts"], "top_k": m["top_k"], "shared_experts": m["num_shared_experts"],
                         "score_func": m["score_func"], "norm_topk_prob": bool(m["route_norm"]),
                         "routed_scaling_factor": float(m["route_scale"]), "router_bias": bool(m.get("gate_bias")),
                         "aux_loss": "none", "aux_loss_coef": 0.0, "expert_bias": m.get("load_balance_coeff") is not None}
    if e["expert_bias"]:
        e["expert_bias_update_rate"] = float(m["load_balance_coeff"])
    if m.get("num_expert_groups"):
        e.update(n_group=m["num_expert_groups"], topk_group=m["num_limited_groups"])
    return e


def _llama3(a: dict, name: str) -> dict[str, Any]:
    r = a.get("rope_scaling_args") or {}
    r = {**_tables()["defaults"]["rope_scaling"], **r}
    d = {"name": name, "num_layers": a["n_layers"], "hidden_size": a["dim"], "ffn_hidden_size": _llama3_ffn(a),
         "num_attention_heads": a["n_heads"], "num_kv_heads": a.get("n_kv_heads") or a["n_heads"],
         "vocab_size": a["vocab_size"], "rope_theta": float(a["rope_theta"]), "norm_eps": a["norm_eps"]}
    if r.get("scaling_factor", 1.0) != 1.0:
        d["rope_scaling"] = {"type": "llama3", "factor": r["scaling_factor"], "low_freq_factor": r["low_freq_factor"],
                             "high_freq_factor": r["high_freq_factor"],
                             "original_max_position_embeddings": r["original_max_position_embeddings"]}
    return d


def _qwen3(a: dict, name: str) -> dict[str, Any]:
    d = {"name": name, "num_layers": a["n_layers"], "hidden_size": a["dim"], "ffn_hidden_size": a["hidden_dim"],
         "num_attention_heads": a["n_heads"], "num_kv_heads": a["n_kv_heads"], "head_dim": a["head_dim"],
         "vocab_size": a["vocab_size"], "qk_norm": bool(a["qk_norm"]), "rope_theta": float(a["rope_theta"]),
         "norm_eps": a["norm_eps"], "tie_embeddings": bool(a["enable_weight_tying"])}
    if a.get("moe_enabled"):
        d["moe"] = {"expert_ffn_hidden_size": a["moe_inter_dim"], **_moe(a)}
    return d


def _deepseek(a: dict, name: str) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name, "num_layers": a["n_layers"], "hidden_size": a["dim"], "ffn_hidden_size": a["inter_dim"],
        "num_attention_heads": a["n_heads"], "vocab_size": a["vocab_size"], "rope_theta": float(a["rope_theta"]),
        "norm_eps": a["norm_eps"],
        "mla": {"q_lora_rank": a["q_lora_rank"] or None, "kv_lora_rank": a["kv_lora_rank"],
                "qk_nope_head_dim": a["qk_nope_head_dim"], "qk_rope_head_dim": a["qk_rope_head_dim"],
                "v_head_dim": a["v_head_dim"]}}
    if a.get("rope_factor", 1.0) != 1.0:
        d["rope_scaling"] = {"type": "yarn", "factor": a["rope_factor"], "original_max_position_embeddings":
                             a["original_seq_len"], "beta_fast": a["beta_fast"], "beta_slow": a["beta_slow"],
                             "mscale": a["mscale"], "mscale_all_dim": a["mscale"]}
    if a["n_dense_layers"] < a["n_layers"]:
        d["moe"] = {"expert_ffn_hidden_size": a["moe_inter_dim"], "first_dense_layers": a["n_dense_layers"], **_moe(a)}
    return d


def _gpt_oss(a: dict, name: str) -> dict[str, Any]:
    return {"name": name, "num_layers": a["n_layers"], "hidden_size": a["dim"], "ffn_hidden_size": a["moe_inter_dim"],
            "num_attention_heads": a["n_heads"], "num_kv_heads": a["n_kv_heads"], "head_dim": a["head_dim"],
            "vocab_size": a["vocab_size"], "rope_theta": float(a["rope_theta"]), "norm_eps": a["norm_eps"],
            "attention_sinks": True, "attention_bias": "all", "mlp_bias": True, "swiglu_limit": a["swiglu_limit"],
            "sliding_window": a["sliding_window_size"], "sliding_window_cycle": 2,
            "rope_scaling": {"type": "yarn", "factor": a["rope_factor"], "original_max_position_embeddings":
                             a["original_seq_len"], "beta_fast": a["ntk_beta"], "beta_slow": a["ntk_alpha"],
                             "truncate": False},
            "moe": {"expert_ffn_hidden_size": a["moe_inter_dim"], **_moe(a)}}


BUILD = {"llama3": _llama3, "qwen3": _qwen3, "deepseek_v3": _deepseek, "gpt_oss": _gpt_oss}


def _check_cp_ring(par: dict) -> None:
    """asap prices torch's context_parallel as torchtitan runs it by default (``asap.cost.ring_attention``): the
    head-tail split of 2 cp chunks (``context_parallel_load_balancer = "headtail"``; "ptrr" balances FlexAttention's
    masks alike) and K,V all-gathered once a pass (``context_parallel_rotate_method = "allgather"``, torch's
    default); an unbalanced split or the step-by-step all-to-all rotation is refused in one line."""
    balancer = par.get("context_parallel_load_balancer", "headtail")
    if balancer not in ("headtail", "ptrr"):
        raise refuse_key(FMT, "parallelism.context_parallel_load_balancer",
                         f"{balancer!r} (asap prices the balanced splits: headtail, ptrr)")
    rotate = par.get("context_parallel_rotate_method", "allgather")
    if rotate != "allgather":
        raise refuse_key(FMT, "parallelism.context_parallel_rotate_method",
                         f"{rotate!r} (asap prices torch's default allgather rotation)")
