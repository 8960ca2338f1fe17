"""Import a Hugging Face ``config.json`` into the native model spec.

Field names per the transformers configuration classes of each ``model_type`` (GPT2Config, GPTNeoXConfig,
LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config, Qwen2MoeConfig, Qwen3Config, Qwen3MoeConfig and the
DeepSeek-V2/V3 remote-code configs).
"""

from __future__ import annotations

from typing import Any

from asap.errors import AsapError
from asap.spec.model import ModelSpec, model_from_dict

SUPPORTED = ("gpt2", "gpt_neox", "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
             "deepseek_v2", "deepseek_v3", "gpt_oss")

_ACT = {"silu": "swiglu", "swish": "swiglu", "gelu": "gelu", "gelu_new": "gelu", "gelu_fast": "gelu",
        "gelu_pytorch_tanh": "gelu", "relu2": "relu2", "relu": "gelu"}


def is_hf_config(d: dict) -> bool:
    return isinstance(d, dict) and "model_type" in d


def _get(d: dict, key: str, default: Any = ...) -> Any:
    if key in d and d[key] is not None:
        return d[key]
    if default is ...:
        raise AsapError(f"config.json.{key}", f"missing (needed for model_type '{d.get('model_type')}')")
    return default


def _get_int(d: dict, key: str, default: Any = ...) -> int:
    """A field the conversion does arithmetic on: an integer (model_from_dict checks the rest)."""
    v = _get(d, key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not v.is_integer()):
        raise AsapError(f"config.json.{key}", f"must be an integer, got {v!r}")
    return int(v)


def _gated_activation(d: dict, key: str = "hidden_act") -> str:
    act = str(_get(d, key, "silu"))
    if act not in _ACT:
        raise AsapError(f"config.json.{key}", f"unsupported activation '{act}'")
    return _ACT[act]


def model_from_hf(d: dict) -> ModelSpec:
    mt = str(d.get("model_type", ""))
    if mt not in SUPPORTED:
        raise AsapError("config.json.model_type", f"unsupported model_type '{mt}' (supported: {', '.join(SUPPORTED)})")
    name = str(d.get("_name_or_path") or (d.get("architectures") or [mt])[0])
    native: dict[str, Any]
    if mt == "gpt2":
        h = _get_int(d, "n_embd")
        native = dict(name=name, num_layers=_get(d, "n_layer"), hidden_size=h,
                      ffn_hidden_size=d.get("n_inner") or 4 * h, num_attention_heads=_get(d, "n_head"),
                      vocab_size=_get(d, "vocab_size"), activation="gelu",
                      tie_embeddings=bool(d.get("tie_word_embeddings", True)), norm="layernorm",
                      position_embedding="learned")
        return model_from_dict(native, where="config.json")
    if mt == "gpt_neox":
        native = dict(name=name, num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
                      ffn_hidden_size=_get(d, "intermediate_size"), num_attention_heads=_get(d, "num_attention_heads"),
                      vocab_size=_get(d, "vocab_size"), activation="gelu",
                      tie_embeddings=bool(d.get("tie_word_embeddings", False)), norm="layernorm",
                      rope_theta=d.get("rotary_emb_base", 10000.0))
        return model_from_dict(native, where="config.json")

    heads = _get(d, "num_attention_heads")
    native = dict(
        name=name, num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
        ffn_hidden_size=_get(d, "intermediate_size"), num_attention_heads=heads,
        num_kv_heads=d.get("num_key_value_heads") or heads, vocab_size=_get(d, "vocab_size"),
        activation=_gated_activation(d), tie_embeddings=bool(d.get("tie_word_embeddings", False)))
    if d.get("head_dim"):
        native["head_dim"] = d["head_dim"]
    if d.get("rope_theta"):
        native["rope_theta"] = d["rope_theta"]
    native.update(_arch(d, mt))

    if mt in ("mixtral", "gpt_oss"):
        # MixtralSparseMoeBlock: softmax over the top-k logits (= top-k of the softmax, renormalized);
        # GptOssTopKRouter: a biased router, softmax over the top-k logits
        native["moe"] = dict(num_experts=_get(d, "num_local_experts"), top_k=_get(d, "num_experts_per_tok"),
                             expert_ffn_hidden_size=_get(d, "intermediate_size"), norm_topk_prob=True,
                             router_bias=mt == "gpt_oss", aux_loss_coef=_get(d, "router_aux_loss_coef", 0.01))
        if mt == "gpt_oss":
            native["moe"]["aux_loss_coef"] = _get(d, "router_aux_loss_coef", 0.9)
    elif mt in ("qwen2_moe", "qwen3_moe"):
        expert_ffn = _get_int(d, "moe_intermediate_size")
        moe = dict(num_experts=_get(d, "num_experts"), top_k=_get(d, "num_experts_per_tok"),
                   expert_ffn_hidden_size=expert_ffn, norm_topk_prob=bool(d.get("norm_topk_prob", False)),
                   aux_loss_coef=_get(d, "router_aux_loss_coef", 0.001))
        shared = _get_int(d, "shared_expert_intermediate_size", 0)
        if shared and expert_ffn > 0:  # Qwen2-MoE has one wide shared expert: count it in units of a routed expert's width
            moe["shared_experts"] = max(1, round(shared / expert_ffn))
        if d.get("decoder_sparse_step", 1) not in (1, None):
            raise AsapError("config.json.decoder_sparse_step", "only every-layer MoE (1) is supported")
        only_mlp = d.get("mlp_only_layers") or []
        if not isinstance(only_mlp, list):
            raise AsapError("config.json.mlp_only_layers", f"must be a list of layer indices, got {only_mlp!r}")
        if only_mlp:
            if list(only_mlp) != list(range(len(only_mlp))):
                raise AsapError("config.json.mlp_only_layers", "only leading dense layers are supported")
            moe["first_dense_layers"] = len(only_mlp)
        native["moe"] = moe
    elif mt in ("deepseek_v2", "deepseek_v3"):
        native["mla"] = dict(q_lora_rank=d.get("q_lora_rank"), kv_lora_rank=_get(d, "kv_lora_rank"),
                             qk_nope_head_dim=_get(d, "qk_nope_head_dim"), qk_rope_head_dim=_get(d, "qk_rope_head_dim"),
                             v_head_dim=_get(d, "v_head_dim"))
        native.pop("head_dim", None)
        native["num_kv_heads"] = heads
        if d.get("n_routed_experts"):
            moe_every = d.get("moe_layer_freq", 1)
            if moe_every not in (1, None):
                raise AsapError("config.json.moe_layer_freq", "only every-layer MoE (1) is supported")
            native["moe"] = dict(num_experts=_get(d, "n_routed_experts"), top_k=_get(d, "num_experts_per_tok"),
                                 expert_ffn_hidden_size=_get(d, "moe_intermediate_size"),
                                 shared_experts=d.get("n_shared_experts") or 0,
                                 first_dense_layers=d.get("first_k_dense_replace") or 0, **_deepseek_router(d))
        if d.get("num_nextn_predict_layers"):
            native["mtp_layers"] = d["num_nextn_predict_layers"]
    return model_from_dict(native, where="config.json")


def _rope_scaling(d: dict) -> dict | None:
    """``rope_scaling`` (transformers' ``rope_type``, or the older ``type``): llama3, yarn or linear; none for
    ``default``."""
    rs = d.get("rope_scaling")
    if not rs:
        return None
    if not isinstance(rs, dict):
        raise AsapError("config.json.rope_scaling", f"must be a mapping, got {rs!r}")
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return None
    if kind not in ("llama3", "yarn", "linear"):
        raise AsapError("config.json.rope_scaling.rope_type", f"unsupported RoPE scaling '{kind}' (llama3, yarn, "
                                                              "linear)")
    out: dict[str, Any] = {"type": kind, "factor": rs.get("factor")}
    for key in ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow",
                "mscale", "mscale_all_dim", "truncate"):
        if rs.get(key) is not None:
            out[key] = rs[key]
    if kind == "yarn" and "original_max_position_embeddings" not in out:
        # transformers' YaRN falls back to the config's max_position_embeddings / factor... GPT-OSS gives it
        out["original_max_position_embeddings"] = _get_int(d, "initial_context_length", 4096)
    return out


def _arch(d: dict, mt: str) -> dict[str, Any]:
    """Norm epsilon, q/k norms, RoPE scaling, biases and attention variants from the model's own fields."""
    out: dict[str, Any] = {"norm_eps": _get(d, "rms_norm_eps", 1e-6 if mt.startswith("deepseek") else 1e-5),
                           "qk_norm": mt in ("qwen3", "qwen3_moe")}  # Qwen3Attention's q_norm / k_norm
    scaling = _rope_scaling(d)
    if scaling is not None:
        out["rope_scaling"] = scaling
    if mt in ("qwen2", "qwen2_moe"):
        out["attention_bias"] = "qkv"  # Qwen2Attention: q/k/v projections with bias, o without
    elif d.get("attention_bias"):
        out["attention_bias"] = "all"  # LlamaAttention / GptOssAttention: every projection
    if d.get("mlp_bias") or mt == "gpt_oss":
        out["mlp_bias"] = True  # GptOssExperts carry gate_up / down biases
    out.update(_window(d, mt))
    if mt == "gpt_oss":
        out.update(attention_sinks=True, swiglu_limit=_get(d, "swiglu_limit", 7.0))
    return out


def _window(d: dict, mt: str) -> dict[str, Any]:
    """The sliding window and its layers: Mistral/Mixtral's ``sliding_window`` on every layer; ``layer_types``
    (GPT-OSS, Gemma 3, recent transformers' Qwen2/Qwen3 configs); Qwen2/Qwen3's ``use_sliding_window`` with
    ``max_window_layers`` (Qwen2Config: layer i slides when i >= max_window_layers); none where no layer slides."""
    window = d.get("sliding_window")
    if not window or (mt.startswith("qwen") and not d.get("use_sliding_window")):
        return {}
    layer_types = d.get("layer_types")
    if layer_types is None and mt.startswith("qwen"):
        first_full = _get_int(d, "max_window_layers", 0)
        layers = _get_int(d, "num_hidden_layers")
        layer_types = ["sliding_attention" if i >= first_full else "full_attention" for i in range(layers)]
    cycle = _window_cycle(layer_types)
    if cycle is None:
        return {}
    return {"sliding_window": _get_int(d, "sliding_window"), "sliding_window_cycle": cycle}


def _window_cycle(layer_types: Any) -> int | None:
    """``layer_types``' period with its full-attention layer last (0: every layer slides; None: none does)."""
    if not layer_types:
        return 0
    if not isinstance(layer_types, list) or any(t not in ("full_attention", "sliding_attention") for t in layer_types):
        raise AsapError("config.json.layer_types", f"must list full_attention / sliding_attention, got {layer_types!r}")
    full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
    if len(full) == len(layer_types):
        return None
    if not full:
        return 0
    cycle = full[0] + 1
    if any((t == "full_attention") != ((i + 1) % cycle == 0) for i, t in enumerate(layer_types)):
        raise AsapError("config.json.layer_types", "only a repeating pattern with its full-attention layer last "
                                                   "is supported")
    return cycle


def _deepseek_router(d: dict) -> dict[str, Any]:
    """DeepSeek-V2/V3's router: softmax or sigmoid scores, ``topk_method`` greedy / group_limited_greedy (V2) /
    noaux_tc (V3: group-limited with the auxiliary-loss-free expert bias), the routed scaling factor, the
    per-sequence balance loss (``seq_aux``, ``aux_loss_alpha``)."""
    method = d.get("topk_method", "greedy")
    if method not in ("greedy", "group_limited_greedy", "noaux_tc"):
        raise AsapError("config.json.topk_method", f"unsupported '{method}' (greedy, group_limited_greedy, noaux_tc)")
    grouped = method != "greedy"
    return {"score_func": _get(d, "scoring_func", "softmax"), "norm_topk_prob": bool(d.get("norm_topk_prob", False)),
            "expert_bias": method == "noaux_tc", "n_group": _get_int(d, "n_group", 1) if grouped else 1,
            "topk_group": _get_int(d, "topk_group", 1) if grouped else 1,
            "routed_scaling_factor": _get(d, "routed_scaling_factor", 1.0),
            "aux_loss": "sequence" if d.get("seq_aux", True) else "global",
            "aux_loss_coef": _get(d, "aux_loss_alpha", 0.001)}
