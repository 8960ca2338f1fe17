"""asap's model as a torchtitan v0.2.2 model: the ``[model]`` name and flavor, and the flavor's arguments.

torchtitan builds a model from ``get_train_spec(name).model_args[flavor]`` (``torchtitan/train.py``), a table
of ``BaseModelArgs`` per model family. asap's model maps onto one family:
- ``llama3`` (``TransformerModelArgs``): dense, RMSNorm, RoPE, SwiGLU, GQA, untied, head_dim = dim / n_heads.
  Its FFN width is ``multiple_of * ceil(ffn_dim_multiplier * int(8 * dim / 3) / multiple_of)``: with
  ``multiple_of`` = asap's ffn_hidden_size and the multiplier ffn / int(8 dim / 3) it is exactly asap's width.
  Its RoPE always applies Llama 3.1's frequency scaling; a scaling factor of 1 leaves plain RoPE, as asap's
  reference trainer has it (registered flavors keep their own).
- ``qwen3`` (``Qwen3ModelArgs``, ``qk_norm = false``): dense or every-layer MoE, any head_dim, tied or not.
- ``deepseek_v3`` (``DeepSeekV3ModelArgs``): MLA, dense layers then MoE layers with shared experts.
A registered flavor is named where asap's model has its shapes (``REGISTERED``: checked against torchtitan's
own tables in tests/test_emit_stacks.py); otherwise the flavor is ``asap-<model name>`` with its arguments,
which the trainer process registers (``register_flavor``) before torchtitan builds the model.
Refused (``model.<field>``): LayerNorm, learned positions, activations other than SwiGLU, MTP, MoE with
leading dense layers but no MLA, tied embeddings with MLA.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from asap.emit.common import refuse_model

NAME = "torchtitan"
# registered flavors of torchtitan v0.2.2 (torchtitan/models/*/__init__.py) by asap's shape keys
REGISTERED: dict[tuple[str, str], dict[str, Any]] = {
    ("llama3", "8B"): dict(hidden_size=4096, num_layers=32, num_attention_heads=32, num_kv_heads=8,
                           ffn_hidden_size=14336, vocab_size=128256, rope_theta=500000.0),
    ("llama3", "70B"): dict(hidden_size=8192, num_layers=80, num_attention_heads=64, num_kv_heads=8,
                            ffn_hidden_size=28672, vocab_size=128256, rope_theta=500000.0),
    ("llama3", "405B"): dict(hidden_size=16384, num_layers=126, num_attention_heads=128, num_kv_heads=8,
                             ffn_hidden_size=53248, vocab_size=128256, rope_theta=500000.0),
}


@dataclass(frozen=True)
class TitanModel:
    name: str  # torchtitan's model family ([model] name)
    flavor: str  # [model] flavor
    registered: bool  # torchtitan has this flavor; else register_flavor(name, flavor, args) first
    args: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the family's args class


def check_model(model) -> None:
    if model.norm != "rmsnorm":
        raise refuse_model(NAME, "norm", f"norm={model.norm} (its models use RMSNorm)")
    if model.position_embedding != "rope":
        raise refuse_model(NAME, "position_embedding", f"position_embedding={model.position_embedding} (RoPE only)")
    if model.activation != "swiglu":
        raise refuse_model(NAME, "activation", f"activation={model.activation} (its feed-forwards are SwiGLU)")
    if model.mtp_layers:
        raise refuse_model(NAME, "mtp_layers", f"mtp_layers={model.mtp_layers} (v0.2.2 has no multi-token "
                                               "prediction)")
    if model.mla is not None and model.tie_embeddings:
        raise refuse_model(NAME, "tie_embeddings", "tied embeddings with MLA (deepseek_v3 has an untied head)")
    if model.mla is None and model.moe is not None and model.moe.first_dense_layers:
        raise refuse_model(NAME, "moe.first_dense_layers", f"first_dense_layers={model.moe.first_dense_layers} "
                                                           "without MLA (qwen3's MoE is in every layer)")


def _moe_args(model) -> dict[str, Any]:
    e = model.moe
    return {"num_experts": e.num_experts, "num_shared_experts": e.shared_experts, "top_k": e.top_k}


def _deepseek(model, seq_len: int) -> dict[str, Any]:
    m, e = model.mla, model.moe
    args = dict(vocab_size=model.vocab_size, dim=model.hidden_size, inter_dim=model.ffn_hidden_size,
                n_layers=model.num_layers, n_heads=model.num_attention_heads, q_lora_rank=m.q_lora_rank or 0,
                kv_lora_rank=m.kv_lora_rank, qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                v_head_dim=m.v_head_dim, rope_theta=model.rope_theta, max_seq_len=seq_len, norm_eps=1e-5)
    if e is None:
        args["n_dense_layers"] = model.num_layers
    else:
        args.update(n_dense_layers=e.first_dense_layers, moe_inter_dim=e.expert_ffn_hidden_size,
                    moe_args=_moe_args(model))
    return args


def _qwen3(model, seq_len: int) -> dict[str, Any]:
    args = dict(dim=model.hidden_size, n_layers=model.num_layers, n_heads=model.num_attention_heads,
                n_kv_heads=model.num_kv_heads, vocab_size=model.vocab_size, head_dim=model.head_dim,
                hidden_dim=model.ffn_hidden_size, qk_norm=False, rope_theta=model.rope_theta, norm_eps=1e-5,
                enable_weight_tying=bool(model.tie_embeddings), max_seq_len=seq_len)
    if model.moe is not None:
        args.update(moe_enabled=True, moe_inter_dim=model.moe.expert_ffn_hidden_size,
                    moe_args={**_moe_args(model), "score_func": "softmax", "route_norm": True})
    return args


def _llama3(model, seq_len: int) -> dict[str, Any]:
    base = int(2 * 4 * model.hidden_size / 3)
    return dict(dim=model.hidden_size, n_layers=model.num_layers, n_heads=model.num_attention_heads,
                n_kv_heads=model.num_kv_heads, vocab_size=model.vocab_size, multiple_of=model.ffn_hidden_size,
                ffn_dim_multiplier=model.ffn_hidden_size / base, rope_theta=model.rope_theta,
                rope_scaling_args={"scaling_factor": 1.0}, norm_eps=1e-5, max_seq_len=seq_len)


def family(model) -> str:
    if model.mla is not None:
        return "deepseek_v3"
    plain = model.head_dim * model.num_attention_heads == model.hidden_size and not model.tie_embeddings
    return "llama3" if model.moe is None and plain else "qwen3"


def registered_flavor(model) -> tuple[str, str] | None:
    if model.moe is not None or model.mla is not None or model.tie_embeddings:
        return None
    if model.head_dim * model.num_attention_heads != model.hidden_size:
        return None
    for key, shape in REGISTERED.items():
        if all(getattr(model, k) == v for k, v in shape.items()):
            return key
    return None


def model_args(model, seq_len: int) -> TitanModel:
    """The [model] name and flavor for ``model``, and the flavor's arguments (refused: ``check_model``)."""
    check_model(model)
    known = registered_flavor(model)
    if known is not None:
        return TitanModel(known[0], known[1], True, {})
    name = family(model)
    build = {"deepseek_v3": _deepseek, "qwen3": _qwen3, "llama3": _llama3}[name]
    return TitanModel(name, f"asap-{model.name}", False, build(model, seq_len))


def model_args_json(model, seq_len: int) -> str:
    """``{"name", "flavor", "registered", "args"}`` as JSON: what a trainer process hands ``register_flavor``."""
    t = model_args(model, seq_len)
    return json.dumps({"name": t.name, "flavor": t.flavor, "registered": t.registered, "args": t.args}, indent=2)


ARGS_CLASSES = {"llama3": ("torchtitan.models.llama3", "TransformerModelArgs", "llama3_args"),
                "qwen3": ("torchtitan.models.qwen3", "Qwen3ModelArgs", "qwen3_args"),
                "deepseek_v3": ("torchtitan.models.deepseek_v3", "DeepSeekV3ModelArgs", "deepseekv3_args")}


def build_args(name: str, args: dict[str, Any]):
    """torchtitan's args object for ``args`` (imports torchtitan; nested MoE and RoPE-scaling dicts become
    their dataclasses)."""
    import importlib

    from torchtitan.models.moe import MoEArgs

    module_name, cls_name, _ = ARGS_CLASSES[name]
    module = importlib.import_module(module_name)
    kwargs = dict(args)
    if "moe_args" in kwargs:
        kwargs["moe_args"] = MoEArgs(**kwargs["moe_args"])
    if "rope_scaling_args" in kwargs:
        from torchtitan.models.llama3.model.args import RoPEScalingArgs

        kwargs["rope_scaling_args"] = RoPEScalingArgs(**kwargs["rope_scaling_args"])
    return getattr(module, cls_name)(**kwargs)


def register_flavor(name: str, flavor: str, args: dict[str, Any]) -> None:
    """Add ``flavor`` to torchtitan's table for ``name`` (the dict ``get_train_spec(name).model_args`` is), in
    this process: call it before torchtitan's Trainer reads the job config."""
    import importlib

    module_name, _, table = ARGS_CLASSES[name]
    getattr(importlib.import_module(module_name), table)[flavor] = build_args(name, args)
