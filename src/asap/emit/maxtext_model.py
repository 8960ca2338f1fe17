"""asap's model as MaxText 0.2.5 keys: a stock ``model_name`` where one has every architecture field, else the keys.

MaxText loads ``configs/models/<model_name>.yml`` over base.yml and the job's YAML, the model file winning on the
keys it sets; keys it leaves out come from the job's YAML. So a stock model is named when every architecture key
its file sets (and what its name implies: Llama 3.1's RoPE scaling for ``llama3.1-*``, DeepSeek's sigmoid /
group-limited / biased routing for ``deepseek3-*``, ``get_topk``) equals asap's; asap's other keys that differ
from base.yml's defaults follow it (``extra``). Otherwise the decoder block and its keys are written: llama2 (dense),
qwen3 (dense with q/k norms), mixtral (MoE), qwen3_moe (MoE with q/k norms), deepseek (MLA), gpt_oss (sinks,
sliding windows, clamped GLU). The model files and base.yml's defaults are MaxText's own
(``data/maxtext_models.json``, dumped by tests/stacks/maxtext_models.py and checked by the tests).
Refused (``model.<field>``): LayerNorm, learned positions, squared ReLU, per-sequence balancing outside
sigmoid routers, DeepSeek routing without a deepseek3 model file, softmax routing without top-k
renormalization (MaxText softmaxes the top-k logits), a router z-loss, vocabulary padding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from asap.emit.common import refuse_model

NAME = "maxtext"
ARCH_KEYS = ("decoder_block", "base_emb_dim", "base_num_query_heads", "base_num_kv_heads", "base_num_decoder_layers",
             "base_mlp_dim", "head_dim", "vocab_size", "mlp_activations", "logits_via_embedding",
             "normalization_layer_epsilon", "rope_type", "rope_max_timescale", "rope_factor", "beta_fast", "beta_slow",
             "mscale", "original_max_position_embeddings", "rope_interleave", "rope_truncate",
             "rope_attention_scaling", "use_qk_norm", "attention_bias", "mlp_bias", "attention_sink",
             "sliding_window_size", "inhomogeneous_layer_cycle_interval", "mlp_activations_limit", "attention_type",
             "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_experts",
             "num_experts_per_tok", "base_moe_mlp_dim", "shared_experts", "first_num_dense_layers",
             "routed_score_func", "routed_bias", "routed_bias_update_rate", "routed_scaling_factor",
             "n_routing_groups", "topk_routing_group", "norm_topk_prob", "load_balance_loss_weight",
             "moe_use_megatron_seq_aux_loss", "capacity_factor", "mtp_num_layers")


@lru_cache(maxsize=1)
def tables() -> dict[str, Any]:
    return json.loads(resources.files("asap").joinpath("data/maxtext_models.json").read_text())


@dataclass(frozen=True)
class MaxTextModel:
    model_name: str | None  # a stock model file, or None: the keys define the model
    keys: dict[str, Any] = field(default_factory=dict)  # what the YAML carries (with a model_name: the extras)


def check_model(model) -> None:
    for fld, bad, why in (
            ("norm", model.norm != "rmsnorm", f"norm={model.norm} (its decoder blocks are RMSNorm)"),
            ("position_embedding", model.position_embedding != "rope", "learned positions (RoPE only)"),
            ("activation", model.activation == "relu2", "activation=relu2 (mlp_activations has no squared ReLU)"),
            ("vocab_pad_multiple", model.padded_vocab_size != model.vocab_size, "vocabulary padding"),
            ("attention_bias", model.attention_bias == "qkv", "q/k/v biases without an output bias"),
            ("moe.z_loss_coef", model.moe is not None and model.moe.z_loss_coef > 0, "a router z-loss")):
        if bad:
            raise refuse_model(NAME, fld, why)
    e = model.moe
    if e is not None and e.score_func == "softmax" and not e.norm_topk_prob and e.top_k > 1:
        raise refuse_model(NAME, "moe.norm_topk_prob", "softmax routing without top-k renormalization (it "
                                                       "softmaxes the top-k logits)")
    if e is not None and e.aux_loss == "sequence" and e.aux_loss_coef and e.score_func != "sigmoid":
        raise refuse_model(NAME, "moe.aux_loss", "a per-sequence balance loss with a softmax router")
    if e is not None and model.mla is None and (e.shared_experts or e.first_dense_layers):
        raise refuse_model(NAME, "moe", "shared experts or leading dense layers without MLA")
    r = model.rope_scaling
    if r is not None and r.type == "linear":
        raise refuse_model(NAME, "rope_scaling.type", "linear RoPE scaling with rope_type")
    if r is not None and r.type == "llama3" and (r.factor, r.low_freq_factor, r.high_freq_factor,
                                                 r.original_max_position_embeddings) != (8.0, 1.0, 4.0, 8192):
        raise refuse_model(NAME, "rope_scaling.factor", "Llama 3.1 scaling other than factor 8, 1/4, 8192 "
                                                        "(LLaMARotaryEmbedding's constants)")


def block(model) -> str:
    if model.attention_sinks or model.sliding_window or model.swiglu_limit:
        return "gpt_oss"
    if model.mla is not None:
        return "deepseek"
    if model.moe is not None:
        return "qwen3_moe" if model.qk_norm else "mixtral"
    return "qwen3" if model.qk_norm else "llama2"


def _rope(model, blk: str) -> dict[str, Any]:
    r = model.rope_scaling
    out: dict[str, Any] = {"rope_max_timescale": model.rope_theta, "rope_type": "default"}
    if r is None:
        return out
    if r.type == "llama3":
        out["rope_type"] = "llama3.1"
        return out
    out.update(rope_type="yarn", rope_factor=r.factor, beta_fast=r.beta_fast, beta_slow=r.beta_slow,
               original_max_position_embeddings=r.original_max_position_embeddings, rope_truncate=r.truncate,
               mscale=r.mscale, rope_interleave=blk == "deepseek", rope_attention_scaling=blk == "gpt_oss")
    return out


def _moe(model) -> dict[str, Any]:
    e = model.moe
    balance = e.aux_loss_coef if e.aux_loss != "none" else 0.0
    return {"num_experts": e.num_experts, "num_experts_per_tok": e.top_k, "base_moe_mlp_dim": e.expert_ffn_hidden_size,
            "shared_experts": e.shared_experts, "first_num_dense_layers": e.first_dense_layers,
            "routed_score_func": "sigmoid" if e.score_func == "sigmoid" else "",
            "routed_bias": e.expert_bias or e.router_bias,
            "routed_bias_update_rate": e.expert_bias_update_rate if e.expert_bias else 0.0,
            "routed_scaling_factor": e.routed_scaling_factor, "n_routing_groups": e.n_group if e.n_group > 1 else -1,
            "topk_routing_group": e.topk_group if e.n_group > 1 else -1, "norm_topk_prob": e.norm_topk_prob,
            "load_balance_loss_weight": balance,
            "moe_use_megatron_seq_aux_loss": bool(balance) and e.aux_loss == "sequence",
            "capacity_factor": -1.0 if e.capacity_factor is None else e.capacity_factor}


def keys(model) -> dict[str, Any]:
    """Every architecture key for ``model`` (checked first)."""
    check_model(model)
    blk = block(model)
    cfg = {"decoder_block": blk, "base_num_decoder_layers": model.num_layers, "base_emb_dim": model.hidden_size,
           "base_mlp_dim": model.ffn_hidden_size, "base_num_query_heads": model.num_attention_heads,
           "base_num_kv_heads": model.num_kv_heads, "head_dim": model.head_dim, "vocab_size": model.vocab_size,
           "logits_via_embedding": bool(model.tie_embeddings), "normalization_layer_epsilon": model.norm_eps,
           "mlp_activations": ["sigmoid", "linear"] if model.swiglu_limit else
           {"swiglu": ["silu", "linear"], "gelu": ["gelu"]}[model.activation],
           "use_qk_norm": model.qk_norm, "attention_bias": model.attention_bias == "all", "mlp_bias": model.mlp_bias,
           "attention_sink": model.attention_sinks, "sliding_window_size": model.sliding_window,
           "inhomogeneous_layer_cycle_interval": model.sliding_window_cycle or 1,
           "mlp_activations_limit": model.swiglu_limit or -1.0, **_rope(model, blk)}
    if model.moe is not None:
        cfg.update(_moe(model))
    if model.mla is not None:
        m = model.mla
        del cfg["head_dim"]  # MLA's head widths are its own keys
        cfg.update({"attention_type": "mla", "q_lora_rank": m.q_lora_rank or 0, "kv_lora_rank": m.kv_lora_rank,
                    "qk_nope_head_dim": m.qk_nope_head_dim, "qk_rope_head_dim": m.qk_rope_head_dim,
                    "v_head_dim": m.v_head_dim})
    if model.mtp_layers:
        cfg["mtp_num_layers"] = model.mtp_layers
    return cfg


def implied(name: str, yml: dict[str, Any]) -> dict[str, Any]:
    """What a model file's name implies beyond its keys (attentions.py and moe.py branch on model_name)."""
    out = dict(yml)
    if name.startswith("llama3.1"):
        out.setdefault("rope_type", "llama3.1")
    return out


def _deepseek_routing(ours: dict[str, Any]) -> bool:
    return ours.get("routed_score_func") == "sigmoid" or ours.get("n_routing_groups", -1) > 1 or \
        (ours.get("routed_bias", False) and ours.get("decoder_block") == "deepseek")


def stock(model) -> MaxTextModel:
    """The stock model file with every architecture field of ``model`` (the one leaving the fewest keys to the
    job, then the plainest name), or the keys."""
    ours, t = keys(model), tables()
    base = t["defaults"]
    matches = []
    for name, yml in sorted(t["models"].items()):
        theirs = implied(name, yml)
        if any(ours.get(k, base.get(k)) != v for k, v in theirs.items()):
            continue
        if _deepseek_routing(ours) != name.startswith("deepseek3"):
            continue
        extra = {k: v for k, v in ours.items() if k not in theirs and v != base.get(k)}
        matches.append((name, extra))
    if matches:
        names = [n for n, _ in matches]

        def rank(m):  # a plain file over its variants (-batchsplit, -2dfsdp), then the one that says most
            return (any(m[0].startswith(o + "-") for o in names), len(m[1]), len(m[0]), m[0])

        name, extra = min(matches, key=rank)
        return MaxTextModel(name, extra)
    if _deepseek_routing(ours):
        raise refuse_model(NAME, "moe.score_func", "DeepSeek routing (sigmoid scores, groups or the expert bias) "
                                                   "without one of its deepseek3 model files (get_topk routes "
                                                   "that way by model_name)")
    return MaxTextModel(None, ours)
