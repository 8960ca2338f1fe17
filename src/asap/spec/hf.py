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
             "deepseek_v2", "deepseek_v3")

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
    native: dict[str, Any] = dict(
        name=name, num_layers=_get(d, "num_hidden_layers"), hidden_size=_get(d, "hidden_size"),
        ffn_hidden_size=_get(d, "intermediate_size"), num_attention_heads=heads,
        num_kv_heads=d.get("num_key_value_heads") or heads, vocab_size=_get(d, "vocab_size"),
        activation=_gated_activation(d), tie_embeddings=bool(d.get("tie_word_embeddings", False)))
    if d.get("head_dim"):
        native["head_dim"] = d["head_dim"]
    if d.get("rope_theta"):
        native["rope_theta"] = d["rope_theta"]

    if mt == "mixtral":
        native["moe"] = dict(num_experts=_get(d, "num_local_experts"), top_k=_get(d, "num_experts_per_tok"),
                             expert_ffn_hidden_size=_get(d, "intermediate_size"))
    elif mt in ("qwen2_moe", "qwen3_moe"):
        expert_ffn = _get_int(d, "moe_intermediate_size")
        moe = dict(num_experts=_get(d, "num_experts"), top_k=_get(d, "num_experts_per_tok"),
                   expert_ffn_hidden_size=expert_ffn)
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
                                 first_dense_layers=d.get("first_k_dense_replace") or 0)
        if d.get("num_nextn_predict_layers"):
            native["mtp_layers"] = d["num_nextn_predict_layers"]
    return model_from_dict(native, where="config.json")
