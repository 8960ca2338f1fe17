"""asap's model as a torchtitan v0.2.2 model: the ``[model]`` name and flavor, and the flavor's arguments.

torchtitan builds a model from ``get_train_spec(name).model_args[flavor]`` (``torchtitan/train.py``), a table
of ``BaseModelArgs`` per model family. asap's model maps onto one family:
- ``llama3`` (``TransformerModelArgs``): dense, RMSNorm, RoPE with Llama 3.1's scaling (a factor of 1: plain
  RoPE), SwiGLU, GQA, untied, head_dim = dim / n_heads, no q/k norm. Its FFN width is ``multiple_of *
  ceil(int(ffn_dim_multiplier * int(8 * dim / 3)) / multiple_of)``: with ``multiple_of`` = asap's width and the
  multiplier width / int(8 dim / 3) it is exactly asap's width.
- ``qwen3`` (``Qwen3ModelArgs``): dense or every-layer MoE, any head_dim, q/k norms or not, tied or not, plain RoPE.
- ``deepseek_v3`` (``DeepSeekV3ModelArgs``): MLA, dense layers then MoE layers with shared experts, YaRN.
- ``gpt_oss`` (``GptOssModelArgs``): GPT-OSS's attention (sinks, biases, a sliding window on every other layer),
  clamped GLU experts with biases, a biased router, YaRN without truncation.
The arguments are compared, every architecture field, with torchtitan's own flavors (``FLAVORS``: its tables,
dumped by tests/stacks/torchtitan_flavors.py and checked against torchtitan by the tests); a match is named
(stock torchtitan loads it), otherwise the flavor is ``asap-<model name>`` with its arguments, which the trainer
process registers (``register_flavor``) before torchtitan builds the model, and the TOML says so.
MoE: torchtitan 0.2.2 has no load-balancing loss, router z-loss or token dropping (``models/moe/moe.py``: it
balances with the auxiliary-loss-free expert bias, ``load_balance_coeff``: asap's ``expert_bias`` with its
``expert_bias_update_rate``). A model that balances with a loss is emitted balancing by the expert bias instead
(torchtitan's default rate, 1e-3), without its z-loss, dropless: each said in a ``differs`` line (``differences``);
``strict`` refuses it (``model.moe.aux_loss_coef``, ...) instead.
Refused (``model.<field>``): LayerNorm, learned positions, activations other than SwiGLU, MTP, and every field
the chosen family has no argument for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from asap.emit.common import refuse_model

NAME = "torchtitan"
# job-level or implementation fields of the args classes, not the architecture (max_seq_len follows the job's
# seq_len through update_from_config; the mask type follows the data's document packing)
NOT_ARCH = {"_enforced", "max_seq_len", "max_batch_size", "attn_type", "attn_mask_type", "depth_init", "eos_id", "dtype",
            "expert_parallel_comm_backend", "use_grouped_mm", "_debug_force_load_balance", "use_flex_attn"}


@lru_cache(maxsize=1)
def _tables() -> dict[str, Any]:
    return json.loads(resources.files("asap").joinpath("data/torchtitan_flavors.json").read_text())


def flavors() -> dict[str, dict[str, dict[str, Any]]]:
    """torchtitan 0.2.2's registered flavors, family -> flavor -> its args as a dict."""
    return _tables()["flavors"]


@dataclass(frozen=True)
class TitanModel:
    name: str  # torchtitan's model family ([model] name)
    flavor: str  # [model] flavor
    registered: bool  # torchtitan has this flavor; else register_flavor(name, flavor, args) first
    args: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the family's args class


def family(model) -> str:
    if model.attention_sinks or model.sliding_window or model.swiglu_limit:
        return "gpt_oss"
    if model.mla is not None:
        return "deepseek_v3"
    plain = model.head_dim * model.num_attention_heads == model.hidden_size and not model.tie_embeddings
    rope = model.rope_scaling is None or model.rope_scaling.type == "llama3"
    if model.moe is None and plain and rope and not model.qk_norm and model.attention_bias == "none":
        return "llama3"
    return "qwen3"


def check_model(model, strict: bool = True) -> None:
    """What no torchtitan family can build, then what the chosen family has no argument for (``strict``: and the
    training settings it lacks, ``differences``)."""
    for fld, bad, why in (("norm", model.norm != "rmsnorm", f"norm={model.norm} (its models use RMSNorm)"),
                          ("position_embedding", model.position_embedding != "rope",
                           f"position_embedding={model.position_embedding} (RoPE only)"),
                          ("activation", model.activation != "swiglu",
                           f"activation={model.activation} (its feed-forwards are SwiGLU)"),
                          ("mtp_layers", model.mtp_layers > 0,
                           f"mtp_layers={model.mtp_layers} (v0.2.2 has no multi-token prediction)")):
        if bad:
            raise refuse_model(NAME, fld, why)
    if model.moe is not None and strict:
        _check_moe(model.moe)
    fam = family(model)
    problems = {"llama3": _llama3_problems, "qwen3": _qwen3_problems, "deepseek_v3": _deepseek_problems,
                "gpt_oss": _gpt_oss_problems}[fam](model)
    for fld, bad, why in problems:
        if bad:
            raise refuse_model(NAME, fld, f"{why} (its {fam} model)")


def _check_moe(e) -> None:
    if e.aux_loss != "none" and e.aux_loss_coef:
        raise refuse_model(NAME, "moe.aux_loss_coef", f"aux_loss_coef={e.aux_loss_coef:g} (v0.2.2 has no "
                                                      "load-balancing loss: it balances with the expert bias, "
                                                      "moe.expert_bias: true, aux_loss_coef: 0)")
    if e.z_loss_coef:
        raise refuse_model(NAME, "moe.z_loss_coef", f"z_loss_coef={e.z_loss_coef:g} (no router z-loss)")
    if e.capacity_factor is not None:
        raise refuse_model(NAME, "moe.capacity_factor", f"capacity_factor={e.capacity_factor:g} (dropless only)")


TORCHTITAN_BALANCE_RATE = 1e-3  # MoEArgs.load_balance_coeff's default (torchtitan/models/moe/moe.py)


def differences(model) -> tuple[str, ...]:
    """The MoE training settings torchtitan 0.2.2 lacks, each with what the emitted job does instead."""
    e = model.moe
    if e is None:
        return ()
    out = []
    if e.aux_loss != "none" and e.aux_loss_coef:
        rate = e.expert_bias_update_rate if e.expert_bias else TORCHTITAN_BALANCE_RATE
        out.append(f"moe.aux_loss_coef={e.aux_loss_coef:g}: torchtitan 0.2.2 has no load-balancing loss; experts are "
                   f"balanced by the expert bias instead (load_balance_coeff={rate:g})")
    if e.z_loss_coef:
        out.append(f"moe.z_loss_coef={e.z_loss_coef:g}: no router z-loss in torchtitan 0.2.2 (trained without it)")
    if e.capacity_factor is not None:
        out.append(f"moe.capacity_factor={e.capacity_factor:g}: torchtitan 0.2.2 is dropless (no token is dropped)")
    return tuple(out)


def _llama3_problems(model):
    r = model.rope_scaling
    return [("rope_scaling.truncate", r is not None and not r.truncate, "YaRN truncation")]


def _qwen3_problems(model):
    return [("rope_scaling", model.rope_scaling is not None, f"rope_scaling type {getattr(model.rope_scaling, 'type', '')}"
             " with q/k norms, other head widths, tied embeddings or MoE"),
            ("attention_bias", model.attention_bias != "none", f"attention_bias={model.attention_bias}"),
            ("mlp_bias", model.mlp_bias, "mlp_bias"),
            ("moe.first_dense_layers", model.moe is not None and model.moe.first_dense_layers > 0,
             "leading dense layers without MLA (its MoE is in every layer)")]


def _deepseek_problems(model):
    r = model.rope_scaling
    return [("qk_norm", model.qk_norm, "per-head q/k norms with MLA"),
            ("tie_embeddings", model.tie_embeddings, "tied embeddings with MLA"),
            ("attention_bias", model.attention_bias != "none", f"attention_bias={model.attention_bias}"),
            ("mlp_bias", model.mlp_bias, "mlp_bias"),
            ("rope_scaling.type", r is not None and r.type != "yarn", f"{getattr(r, 'type', '')} RoPE scaling"),
            ("rope_scaling.mscale_all_dim", r is not None and r.mscale_all_dim not in (r.mscale, 0.0),
             f"mscale_all_dim={getattr(r, 'mscale_all_dim', 0):g} other than mscale (one mscale)"),
            ("rope_scaling.truncate", r is not None and not r.truncate, "YaRN without truncation")]


def _gpt_oss_problems(model):
    r, e = model.rope_scaling, model.moe
    return [("sliding_window_cycle", model.sliding_window_cycle != 2, f"sliding_window_cycle="
             f"{model.sliding_window_cycle} (a window on every even layer: 2)"),
            ("attention_sinks", not model.attention_sinks, "no attention sinks"),
            ("attention_bias", model.attention_bias != "all", f"attention_bias={model.attention_bias}"),
            ("mlp_bias", not model.mlp_bias, "experts without biases"),
            ("moe", e is None or e.shared_experts or e.first_dense_layers or not e.router_bias,
             "a dense model, shared experts, dense layers or an unbiased router"),
            ("qk_norm", model.qk_norm, "q/k norms"), ("tie_embeddings", model.tie_embeddings, "tied embeddings"),
            ("rope_scaling", r is None or r.type != "yarn" or r.truncate or r.mscale != 1.0 or r.mscale_all_dim,
             "RoPE other than YaRN without truncation"),
            ("swiglu_limit", not model.swiglu_limit, "an unclamped GLU")]


def _moe_args(model) -> dict[str, Any]:
    e = model.moe
    return {"num_experts": e.num_experts, "num_shared_experts": e.shared_experts, "top_k": e.top_k,
            "score_func": e.score_func, "route_norm": e.norm_topk_prob, "route_scale": e.routed_scaling_factor,
            "gate_bias": e.router_bias, "score_before_experts": False,
            "num_expert_groups": e.n_group if e.n_group > 1 else None,
            "num_limited_groups": e.topk_group if e.n_group > 1 else None,
            "load_balance_coeff": e.expert_bias_update_rate if e.expert_bias else
            TORCHTITAN_BALANCE_RATE if e.aux_loss != "none" and e.aux_loss_coef else None}


def _yarn(model) -> dict[str, Any]:
    r = model.rope_scaling
    if r is None:
        return {"rope_factor": 1.0}
    return {"rope_factor": r.factor, "original_seq_len": r.original_max_position_embeddings}


def _deepseek(model, seq_len: int) -> dict[str, Any]:
    m, e, r = model.mla, model.moe, model.rope_scaling
    args = dict(vocab_size=model.vocab_size, dim=model.hidden_size, inter_dim=model.ffn_hidden_size,
                n_layers=model.num_layers, n_heads=model.num_attention_heads, q_lora_rank=m.q_lora_rank or 0,
                kv_lora_rank=m.kv_lora_rank, qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                v_head_dim=m.v_head_dim, rope_theta=model.rope_theta, max_seq_len=seq_len, norm_eps=model.norm_eps,
                **_yarn(model))
    if r is not None:
        args.update(beta_fast=r.beta_fast, beta_slow=r.beta_slow, mscale=r.mscale)
    if e is None:
        args["n_dense_layers"] = model.num_layers
    else:
        args.update(n_dense_layers=e.first_dense_layers, moe_inter_dim=e.expert_ffn_hidden_size,
                    moe_args=_moe_args(model))
    return args


def _gpt_oss(model, seq_len: int) -> dict[str, Any]:
    r = model.rope_scaling
    return dict(vocab_size=model.vocab_size, dim=model.hidden_size, moe_inter_dim=model.moe.expert_ffn_hidden_size,
                n_layers=model.num_layers, norm_eps=model.norm_eps, moe_args=_moe_args(model),
                swiglu_limit=model.swiglu_limit, head_dim=model.head_dim, n_heads=model.num_attention_heads,
                n_kv_heads=model.num_kv_heads, sliding_window_size=model.sliding_window, rope_theta=model.rope_theta,
                ntk_alpha=r.beta_slow, ntk_beta=r.beta_fast, max_seq_len=seq_len, **_yarn(model))


def _qwen3(model, seq_len: int) -> dict[str, Any]:
    args = dict(dim=model.hidden_size, n_layers=model.num_layers, n_heads=model.num_attention_heads,
                n_kv_heads=model.num_kv_heads, vocab_size=model.vocab_size, head_dim=model.head_dim,
                hidden_dim=model.ffn_hidden_size, qk_norm=model.qk_norm, rope_theta=model.rope_theta,
                norm_eps=model.norm_eps, enable_weight_tying=bool(model.tie_embeddings), max_seq_len=seq_len,
                moe_enabled=model.moe is not None)
    if model.moe is not None:
        args.update(moe_inter_dim=model.moe.expert_ffn_hidden_size, moe_args=_moe_args(model))
    return args


def _llama3(model, seq_len: int) -> dict[str, Any]:
    base = int(2 * 4 * model.hidden_size / 3)
    r = model.rope_scaling
    rope = {"scaling_factor": 1.0} if r is None else {
        "scaling_factor": r.factor, "low_freq_factor": r.low_freq_factor, "high_freq_factor": r.high_freq_factor,
        "original_max_position_embeddings": r.original_max_position_embeddings}
    return dict(dim=model.hidden_size, n_layers=model.num_layers, n_heads=model.num_attention_heads,
                n_kv_heads=model.num_kv_heads, vocab_size=model.vocab_size, multiple_of=model.ffn_hidden_size,
                ffn_dim_multiplier=model.ffn_hidden_size / base, rope_theta=model.rope_theta,
                rope_scaling_args=rope, norm_eps=model.norm_eps, max_seq_len=seq_len)


BUILDERS = {"deepseek_v3": _deepseek, "qwen3": _qwen3, "llama3": _llama3, "gpt_oss": _gpt_oss}


def _llama3_ffn(args: dict[str, Any]) -> int:
    """torchtitan's llama3 FeedForward width (models/llama3/model/model.py)."""
    hidden = int(2 * 4 * args["dim"] / 3)
    if args.get("ffn_dim_multiplier") is not None:
        hidden = int(args["ffn_dim_multiplier"] * hidden)
    m = args["multiple_of"]
    return m * ((hidden + m - 1) // m)


def arch_view(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Every architecture field of a family's args (the args class's defaults where ``args`` leaves a field
    out): what a stock flavor must equal."""
    DEFAULTS = _tables()["defaults"]
    full = {**DEFAULTS[name], **args}
    if "moe_args" in full and full["moe_args"] is not None:
        full["moe_args"] = {k: v for k, v in {**DEFAULTS["moe"], **full["moe_args"]}.items() if k not in NOT_ARCH}
    if name == "llama3":
        full["ffn"] = _llama3_ffn(full)
        full.pop("multiple_of")
        full.pop("ffn_dim_multiplier")
        full["rope_scaling_args"] = {**DEFAULTS["rope_scaling"], **full["rope_scaling_args"]}
        if full["rope_scaling_args"]["scaling_factor"] == 1.0:  # no scaling: the other three change nothing
            full["rope_scaling_args"] = {"scaling_factor": 1.0}
    if name in ("qwen3",) and not full.get("moe_enabled"):
        full.pop("moe_args", None)
        full.pop("moe_inter_dim", None)
    return {k: v for k, v in full.items() if k not in NOT_ARCH}


def stock_flavor(name: str, args: dict[str, Any]) -> str | None:
    """The torchtitan flavor of family ``name`` whose every architecture field equals ``args``'s, if any."""
    want = arch_view(name, args)
    for flavor, theirs in sorted(flavors()[name].items()):
        if arch_view(name, theirs) == want:
            return flavor
    return None


def model_args(model, seq_len: int, strict: bool = False) -> TitanModel:
    """The [model] name and flavor for ``model``, and the flavor's arguments (refused: ``check_model``; what
    torchtitan trains differently: ``differences``, refused under ``strict``)."""
    check_model(model, strict)
    name = family(model)
    args = BUILDERS[name](model, seq_len)
    known = stock_flavor(name, args)
    if known is not None:
        return TitanModel(name, known, True, {})
    return TitanModel(name, f"asap-{model.name}", False, args)


REGISTRATION = '''"""Register the torchtitan flavor {flavor} ({name} family), then run torchtitan's trainer.

Written by asap emit for torchtitan v0.2.2: torchtitan builds its model from get_train_spec("{name}").model_args
[flavor] (torchtitan/train.py), and no stock {name} flavor has every architecture field of {model}, so this file
adds the flavor to that table ({module}.{table}) in the trainer process before torchtitan.train reads the job
config. Launch it where torchtitan's run_train.sh runs ``-m torchtitan.train``:
    torchrun ... {filename} --job.config_file {config}
"""

import importlib
import runpy

NAME, FLAVOR = "{name}", "{flavor}"
ARGS = {args}


def register():
    module = importlib.import_module("{module}")
    kwargs = dict(ARGS)
    if "moe_args" in kwargs:
        from torchtitan.models.moe import MoEArgs

        kwargs["moe_args"] = MoEArgs(**kwargs["moe_args"])
    if "rope_scaling_args" in kwargs:
        from torchtitan.models.llama3.model.args import RoPEScalingArgs

        kwargs["rope_scaling_args"] = RoPEScalingArgs(**kwargs["rope_scaling_args"])
    getattr(module, "{table}")[FLAVOR] = module.{cls}(**kwargs)


register()

if __name__ == "__main__":
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
'''


def registration_file(model, seq_len: int, config: str, strict: bool = False) -> tuple[str, str] | None:
    """(file name, Python source) of the script that registers ``model``'s custom flavor and then runs
    ``torchtitan.train`` (None for a stock flavor): the launch line runs it in torchrun's place of ``-m
    torchtitan.train``, so the registration happens in every trainer process."""
    import pprint

    t = model_args(model, seq_len, strict)
    if t.registered:
        return None
    module, cls, table = ARGS_CLASSES[t.name]
    filename = f"asap_register_{''.join(c if c.isalnum() else '_' for c in model.name)}.py"
    text = REGISTRATION.format(flavor=t.flavor, name=t.name, model=model.name, module=module, table=table, cls=cls,
                               filename=filename, config=config, args=pprint.pformat(t.args, width=100, sort_dicts=False))
    return filename, text


def model_args_json(model, seq_len: int) -> str:
    """``{"name", "flavor", "registered", "args"}`` as JSON: what a trainer process hands ``register_flavor``."""
    t = model_args(model, seq_len)
    return json.dumps({"name": t.name, "flavor": t.flavor, "registered": t.registered, "args": t.args}, indent=2)


ARGS_CLASSES = {"llama3": ("torchtitan.models.llama3", "TransformerModelArgs", "llama3_args"),
                "qwen3": ("torchtitan.models.qwen3", "Qwen3ModelArgs", "qwen3_args"),
                "deepseek_v3": ("torchtitan.models.deepseek_v3", "DeepSeekV3ModelArgs", "deepseekv3_args"),
                "gpt_oss": ("torchtitan.models.gpt_oss", "GptOssModelArgs", "gptoss_configs")}


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
