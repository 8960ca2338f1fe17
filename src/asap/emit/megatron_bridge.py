"""A Megatron-Bridge 0.3.1 ``ConfigContainer`` as YAML (``ConfigContainer.from_yaml``; NVIDIA's recipe layer).

Each section carries its class as ``_target_`` (Megatron-Bridge's ``instantiate``): ``model`` a model provider
(``megatron.bridge.models...``: a stock provider where one has every architecture field of asap's model, matched
against Megatron-Bridge's own classes, ``data/bridge_providers.json`` dumped by tests/stacks/bridge_providers.py;
otherwise ``GPTModelProvider`` / ``MLAModelProvider`` with every field, said in the header), with the parallel
sizes, the layer split, recomputation and the MoE dispatcher (TransformerConfig's fields, megatron-core 0.16);
``train`` the batch; ``ddp`` DDP / the distributed optimizer / Megatron-FSDP as ``asap.emit.megatron`` chooses them;
``dataset`` the sequence length (mock data until the user names a blend); ``tokenizer`` the vocabulary;
``mixed_precision`` Bridge's recipe name (``bf16_mixed``, ``fp16_mixed``, ``bf16_with_fp8_current_scaling_mixed``).
The architecture follows ``asap.emit.megatron_model`` (the same fields), with what megatron-core 0.16 adds over
0.14: sliding-window attention (``window_size``, ``window_attn_skip_freq``), attention sinks (``softmax_type:
learnable``), GPT-OSS's clamped GLU (``activation_func`` quick_gelu, ``glu_linear_offset``,
``activation_func_clamp_value``) and YaRN outside MLA (``position_embedding_type: yarn``). Refused as Megatron
refuses otherwise, plus the zero-bubble and GPipe schedules.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from asap.emit.common import check_runnable, chunk_layers, micro_batches, refuse, refuse_model
from asap.emit.megatron import SELECTIVE_MODULES, modules_for, pipeline_layout, te_cp_comm_type
from asap.emit.megatron_model import LLAMA3_FIXED, vocab_divisor
from asap.spec.framework import Dispatcher
from asap.emit.launch import (Launch, RunLength, blackwell_or_newer, rendezvous_to_set, torchrun,
                              torchrun_where)
from asap.spec.job import Job
from asap.spec.knobs import Recompute, Schedule

NAME = "megatron-bridge"
CONFIG = "bridge_config.yaml"  # the file name the launch line reads
ENTRY = "asap_bridge_pretrain.py"  # the companion entry script (Megatron-Bridge ships recipes, not a YAML trainer)
ENTRY_TEXT = '''"""Megatron-Bridge 0.3.1 pretraining of the ConfigContainer YAML asap emitted (written by asap emit).

megatron.bridge.training.pretrain.pretrain(config, forward_step) with the GPT forward step
(megatron.bridge.training.gpt_step.forward_step), the config read by ConfigContainer.from_yaml.
Launch: torchrun ... asap_bridge_pretrain.py bridge_config.yaml
"""

import sys

from megatron.bridge.training.config import ConfigContainer
from megatron.bridge.training.gpt_step import forward_step
from megatron.bridge.training.pretrain import pretrain

if __name__ == "__main__":
    pretrain(ConfigContainer.from_yaml(sys.argv[1] if len(sys.argv) > 1 else "bridge_config.yaml"), forward_step)
'''
VERSION = "Megatron-Bridge 0.3.1 (megatron.bridge.training.config.ConfigContainer, megatron-core 0.16)"
PROVIDER_MODULES = {
    "megatron.bridge.models.gpt_provider": ("GPTModelProvider",),
    "megatron.bridge.models.mla_provider": ("MLAModelProvider",),
    "megatron.bridge.models.llama.llama_provider": ("Llama3ModelProvider8B", "Llama3ModelProvider70B",
                                                    "Llama31ModelProvider8B", "Llama31ModelProvider70B",
                                                    "Llama31ModelProvider405B"),
    "megatron.bridge.models.qwen.qwen_provider": ("Qwen3ModelProvider8B", "Qwen3ModelProvider14B",
                                                  "Qwen3ModelProvider32B", "Qwen3MoEModelProvider30B_A3B",
                                                  "Qwen3MoEModelProvider235B_A22B"),
    "megatron.bridge.models.deepseek.deepseek_provider": ("DeepSeekV3ModelProvider",),
    "megatron.bridge.models.gpt_oss.gpt_oss_provider": ("GPTOSSProvider", "GPTOSSProvider120B", "GPTOSSProvider20B"),
}
# the provider a custom definition starts from: MLA's, GPT-OSS's (the one with YaRN outside MLA), or GPT's
BASES = {"gpt": "megatron.bridge.models.gpt_provider.GPTModelProvider",
         "mla": "megatron.bridge.models.mla_provider.MLAModelProvider",
         "gpt_oss": "megatron.bridge.models.gpt_oss.gpt_oss_provider.GPTOSSProvider"}


def base_of(model) -> str:
    if model.mla is not None:
        return BASES["mla"]
    yarn = model.rope_scaling is not None and model.rope_scaling.type == "yarn"
    return BASES["gpt_oss" if yarn or model.attention_sinks or model.swiglu_limit else "gpt"]
# the provider fields that define the model (TransformerConfig's and GPTModelProvider's)
ARCH_FIELDS = (
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "vocab_size", "normalization", "layernorm_epsilon", "qk_layernorm", "gated_linear_unit", "activation_func",
    "add_bias_linear", "add_qkv_bias", "share_embeddings_and_output_weights", "position_embedding_type", "rotary_base",
    "rotary_percent", "rope_scaling", "rope_scaling_factor", "seq_len_interpolation_factor", "multi_latent_attention",
    "q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "rope_type",
    "rotary_scaling_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow", "original_max_position_embeddings",
    "yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast", "yarn_beta_slow",
    "yarn_correction_range_round_to_int", "window_size", "window_attn_skip_freq", "softmax_type",
    "glu_linear_offset", "activation_func_clamp_value", "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_layer_freq", "moe_router_score_function", "moe_router_pre_softmax",
    "moe_router_enable_expert_bias", "moe_router_bias_update_rate", "moe_router_num_groups", "moe_router_group_topk",
    "moe_router_topk_scaling_factor", "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_z_loss_coeff",
    "moe_expert_capacity_factor", "moe_token_drop_policy", "mtp_num_layers")
ACTIVATIONS = {"silu": "torch.nn.functional.silu", "gelu": "torch.nn.functional.gelu",
               "squared_relu": "megatron.core.activations.squared_relu",
               "quick_gelu": "megatron.core.fusions.fused_bias_geglu.quick_gelu"}


@lru_cache(maxsize=1)
def providers() -> dict[str, dict[str, Any]]:
    return json.loads(resources.files("asap").joinpath("data/bridge_providers.json").read_text())["providers"]


def check_model(model) -> None:
    """What megatron-core 0.16's GPT model cannot compute (beyond Megatron's refusals that 0.16 lifts)."""
    from asap.emit.megatron_model import _check_rope

    e, r = model.moe, model.rope_scaling
    bias_all = model.attention_bias == "all" and model.mlp_bias
    for fld, bad, why in (
            ("moe.router_bias", e is not None and e.router_bias and not bias_all,
             "a biased router without biased linear layers (add_bias_linear)"),
            ("attention_bias", model.attention_bias == "all" and not model.mlp_bias, "attention_bias=all without mlp_bias"),
            ("mlp_bias", model.mlp_bias and model.attention_bias != "all", "mlp_bias without attention_bias=all"),
            ("qk_norm", model.qk_norm and model.mla is not None, "per-head q/k norms with MLA"),
            ("sliding_window_cycle", model.sliding_window > 0 and model.sliding_window_cycle == 1,
             "a sliding window on no layer"),
            ("moe.norm_topk_prob", e is not None and e.score_func == "sigmoid" and not e.norm_topk_prob and e.top_k > 1,
             "sigmoid routing without top-k renormalization")):
        if bad:
            raise refuse_model(NAME, fld, why)
    if r is not None and r.type == "yarn" and model.mla is None:
        return  # position_embedding_type yarn (megatron-core 0.16)
    _check_rope(model, NAME)


def _rope_fields(model) -> dict[str, Any]:
    r = model.rope_scaling
    if model.position_embedding != "rope":
        return {"position_embedding_type": "learned_absolute"}
    f: dict[str, Any] = {"position_embedding_type": "rope", "rotary_base": int(model.rope_theta), "rope_scaling": False}
    if model.mla is not None:
        f["rope_type"] = "yarn" if r is not None and r.type == "yarn" else "rope"
        if r is not None and r.type == "yarn":
            f.update(rotary_scaling_factor=r.factor, mscale=r.mscale, mscale_all_dim=r.mscale_all_dim,
                     beta_fast=r.beta_fast, beta_slow=r.beta_slow,
                     original_max_position_embeddings=r.original_max_position_embeddings)
        return f
    if r is not None and r.type == "llama3":
        assert all(getattr(r, k) == v for k, v in LLAMA3_FIXED.items())
        f.update(rope_scaling=True, rope_scaling_factor=r.factor)
    elif r is not None and r.type == "yarn":
        f.update(position_embedding_type="yarn", yarn_rotary_scaling_factor=r.factor,
                 yarn_original_max_position_embeddings=r.original_max_position_embeddings, yarn_beta_fast=r.beta_fast,
                 yarn_beta_slow=r.beta_slow, yarn_correction_range_round_to_int=r.truncate)
    elif r is not None:
        f["seq_len_interpolation_factor"] = r.factor
    return f


def _moe_fields(model) -> dict[str, Any]:
    e = model.moe
    kind = "none" if e.aux_loss == "none" or not e.aux_loss_coef else \
        {"global": "aux_loss", "sequence": "seq_aux_loss"}[e.aux_loss]
    f = {"num_moe_experts": e.num_experts, "moe_router_topk": e.top_k, "moe_ffn_hidden_size": e.expert_ffn_hidden_size,
         "moe_shared_expert_intermediate_size": e.shared_experts * e.expert_ffn_hidden_size or None,
         "moe_layer_freq": [0] * e.first_dense_layers + [1] * (model.num_layers - e.first_dense_layers)
         if e.first_dense_layers else 1,
         "moe_router_score_function": e.score_func,
         "moe_router_pre_softmax": e.score_func == "softmax" and not e.norm_topk_prob and e.top_k > 1,
         "moe_router_enable_expert_bias": e.expert_bias, "moe_router_bias_update_rate": e.expert_bias_update_rate,
         "moe_router_num_groups": e.n_group if e.n_group > 1 else None,
         "moe_router_group_topk": e.topk_group if e.n_group > 1 else None,
         "moe_router_topk_scaling_factor": e.routed_scaling_factor if e.routed_scaling_factor != 1.0 else None,
         "moe_router_load_balancing_type": kind, "moe_aux_loss_coeff": e.aux_loss_coef if kind != "none" else 0.0,
         "moe_z_loss_coeff": e.z_loss_coef or None, "moe_expert_capacity_factor": e.capacity_factor,
         "moe_token_drop_policy": e.drop_policy}
    return f


def arch_fields(model) -> dict[str, Any]:
    """Every architecture field of the provider for ``model`` (checked first)."""
    check_model(model)
    act = "quick_gelu" if model.swiglu_limit else {"swiglu": "silu", "gelu": "gelu", "relu2": "squared_relu"}[
        model.activation]
    f: dict[str, Any] = {
        "num_layers": model.num_layers, "hidden_size": model.hidden_size, "ffn_hidden_size": model.ffn_hidden_size,
        "num_attention_heads": model.num_attention_heads, "vocab_size": model.vocab_size,
        "normalization": {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[model.norm],
        "layernorm_epsilon": model.norm_eps, "gated_linear_unit": model.activation == "swiglu", "activation_func": act,
        "add_bias_linear": model.attention_bias == "all", "add_qkv_bias": model.attention_bias == "qkv",
        "qk_layernorm": model.qk_norm or model.mla is not None,
        "share_embeddings_and_output_weights": model.tie_embeddings, "mtp_num_layers": model.mtp_layers or None,
        **_rope_fields(model)}
    if model.mla is None:
        f.update(kv_channels=model.head_dim, num_query_groups=model.num_kv_heads)
    else:
        m = model.mla
        f.update(multi_latent_attention=True, q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank,
                 qk_head_dim=m.qk_nope_head_dim, qk_pos_emb_head_dim=m.qk_rope_head_dim, v_head_dim=m.v_head_dim)
    if model.sliding_window:
        f.update(window_size=[model.sliding_window, 0], window_attn_skip_freq=model.sliding_window_cycle or None)
    if model.attention_sinks:
        f["softmax_type"] = "learnable"
    if model.swiglu_limit:
        f.update(glu_linear_offset=1.0, activation_func_clamp_value=model.swiglu_limit)
    if model.moe is not None:
        f.update(_moe_fields(model))
    return f


YARN = ("yarn_rotary_scaling_factor", "yarn_original_max_position_embeddings", "yarn_beta_fast", "yarn_beta_slow",
        "yarn_correction_range_round_to_int")
MLA_YARN = ("rotary_scaling_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow",
            "original_max_position_embeddings")


def canonical(d: dict[str, Any]) -> dict[str, Any]:
    """The fields that act: a scaling factor without its scaling, MoE fields without experts, a window's period
    without a window compute nothing."""
    out = dict(d)
    if out.get("kv_channels") is None and out.get("num_attention_heads") and not out.get("multi_latent_attention"):
        out["kv_channels"] = out["hidden_size"] // out["num_attention_heads"]  # TransformerConfig.__post_init__
    drop = [] if out.get("rope_scaling") else ["rope_scaling_factor"]
    drop += [] if out.get("position_embedding_type") == "yarn" else list(YARN)
    drop += [] if out.get("multi_latent_attention") and out.get("rope_type") == "yarn" else list(MLA_YARN)
    drop += [] if out.get("multi_latent_attention") else ["rope_type", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
                                                           "qk_pos_emb_head_dim", "v_head_dim"]
    drop += [] if out.get("num_moe_experts") else [k for k in out if k.startswith("moe_")]
    drop += [] if out.get("window_size") else ["window_attn_skip_freq"]
    drop += [] if out.get("moe_router_enable_expert_bias") else ["moe_router_bias_update_rate"]
    for k in drop:
        out.pop(k, None)
    return out


def provider(model) -> tuple[str, dict[str, Any], bool]:
    """(provider class, the fields it needs set, stock?): a stock provider whose every architecture field equals
    asap's, else the base provider with all of them."""
    ours = arch_fields(model)
    table = providers()
    base_name = base_of(model)
    want = canonical({**table[base_name], **ours})
    for name, theirs in sorted(table.items()):
        if name in BASES.values() or (("mla_provider" in base_name) != ("deepseek" in name)):
            continue
        theirs = canonical(theirs)
        job_set = {k: want[k] for k in ("vocab_size",) if theirs.get(k) is None}  # a provider taking the tokenizer's
        if all(want.get(k) == theirs.get(k) for k in set(want) | set(theirs) if k not in job_set):
            return name, job_set, True
    return base_name, {k: v for k, v in ours.items() if table[base_name].get(k) != v}, False


def _fn(name: str) -> dict[str, Any]:
    """A function as Megatron-Bridge's YAML writes one (``_target_`` with ``_call_: false``)."""
    return {"_target_": ACTIVATIONS[name], "_call_": False}


def parallel_fields(model, train, s) -> dict[str, Any]:
    """The provider's parallel sizes, layer split, recomputation and MoE dispatch (TransformerConfig's names)."""
    f: dict[str, Any] = {"tensor_model_parallel_size": s.tp, "pipeline_model_parallel_size": s.pp,
                         "context_parallel_size": s.cp, "sequence_parallel": bool(s.sp), "seq_length": train.seq_len,
                         "make_vocab_size_divisible_by": vocab_divisor(model, s.tp, NAME)}
    if s.cp > 1 and s.cp_comm != "p2p":  # TransformerConfig.cp_comm_type (default p2p)
        f["cp_comm_type"] = te_cp_comm_type(str(s.cp_comm))
    if s.cp > 1 and s.cp_comm == "a2a+p2p":  # ModelParallelConfig.hierarchical_context_parallel_sizes
        f["hierarchical_context_parallel_sizes"] = [s.cp_a2a, s.cp // s.cp_a2a]
    if s.pp > 1:
        uniform = not s.layer_split and model.num_layers % (s.pp * s.vpp) == 0 and not model.mtp_layers
        if uniform:
            f["virtual_pipeline_model_parallel_size"] = s.vpp if s.vpp > 1 else None
        else:
            f["pipeline_model_parallel_layout"] = pipeline_layout(model, s)
    if model.moe is not None:
        f.update(expert_model_parallel_size=s.ep, expert_tensor_parallel_size=s.etp, moe_grouped_gemm=True,
                 moe_token_dispatcher_type="flex" if s.dispatcher == Dispatcher.DEDUP else s.dispatcher.value,
                 moe_enable_deepep=s.dispatcher == Dispatcher.DEDUP, overlap_moe_expert_parallel_comm=bool(s.a2a_overlap))
    if s.offload_act:  # TransformerConfig.cpu_offloading: at most num_layers - 1 layers (its __post_init__)
        f.update(cpu_offloading=True, cpu_offloading_activations=True, cpu_offloading_weights=False,
                 cpu_offloading_num_layers=s.offload_layers or model.num_layers - 1)
    if s.recompute.kind == Recompute.FULL:
        f.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    else:
        mods = modules_for(model, SELECTIVE_MODULES if s.recompute.kind == Recompute.SELECTIVE else
                           (s.recompute.module_labels or ()))
        if mods:
            f.update(recompute_granularity="selective", recompute_modules=list(mods))
    return f


def ddp_section(train, s) -> dict[str, Any]:
    """DistributedDataParallelConfig as asap.emit.megatron's data_parallel_args choose it."""
    d: dict[str, Any] = {"_target_": "megatron.core.distributed.DistributedDataParallelConfig",
                         "overlap_grad_reduce": True, "use_distributed_optimizer": s.zero >= 1,
                         "overlap_param_gather": s.zero >= 1, "grad_reduce_in_fp32": not ((s.zero == 3 or s.grad_bf16)
                                                                                          and train.precision != "fp32")}
    if s.dp_replicate > 1:  # distributed-optimizer instances (Megatron-FSDP: HSDP), asap.emit.megatron.hybrid_args
        d["num_distributed_optimizer_instances"] = s.dp_replicate
    if s.zero >= 2:
        d.update(use_megatron_fsdp=True,
                 data_parallel_sharding_strategy="optim_grads_params" if s.zero == 3 else "optim_grads")
    return d


PLACEHOLDER_ITERS, PLACEHOLDER_WARMUP = 1000, 10  # without a --tokens budget (said in the header)
# Bridge's registered recipes (megatron/bridge/training/mixed_precision.py): bf16_with_nvfp4_mixed sets fp4 "e2m1",
# fp4_recipe "nvfp4" (Transformer Engine's NVFP4BlockScaling) over bf16; mxfp4 has none (refused)
MIXED = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp8": "bf16_with_fp8_current_scaling_mixed", "fp32": None,
         "nvfp4": "bf16_with_nvfp4_mixed"}
CFG = "megatron.bridge.training.config"


def mixed_precision(precision: str) -> str | None:
    """Bridge's recipe name for a precision (``MIXED``); one Bridge has no recipe for is refused."""
    if precision not in MIXED:
        raise refuse("precision", "megatron-bridge", f"{precision} (no mixed-precision recipe of its own)")
    return MIXED[precision]


def config(job: Job, s, run: RunLength | None = None, strict: bool = False) -> dict[str, Any]:
    model, train = job.model, job.train
    run = run or RunLength()
    iters = run.iterations or PLACEHOLDER_ITERS
    if s.schedule in (Schedule.ZB, Schedule.GPIPE):
        raise refuse("schedule", NAME, f"schedule={s.schedule} (Megatron-Core runs 1F1B or interleaved 1F1B)")
    check_runnable("megatron", "megatron", job, s)
    assert micro_batches(train, s) >= 1
    if model.moe is not None and model.mlp_bias and s.etp != 1:
        raise refuse("etp", NAME, f"etp={s.etp} with expert biases (TransformerConfig: bias in MoE needs etp=1)")
    target, arch, _ = provider(model)
    arch = {k: (_fn(v) if k == "activation_func" else v) for k, v in arch.items()}
    model_section = {"_target_": target, **arch, **parallel_fields(model, train, s)}
    return {
        "_target_": f"{CFG}.ConfigContainer",
        "model": model_section,
        "train": {"_target_": f"{CFG}.TrainingConfig", "global_batch_size": train.global_batch,
                  "micro_batch_size": s.mbs, "train_iters": iters},
        "optimizer": {"_target_": "megatron.core.optimizer.OptimizerConfig", "optimizer": "adam", "lr": 3e-4,
                      "min_lr": 3e-5, "weight_decay": 0.1, "bf16": train.precision in ("bf16", "fp8", "nvfp4"),
                      "fp16": train.precision == "fp16", "use_distributed_optimizer": s.zero >= 1,
                      **({"optimizer_cpu_offload": True, "use_precision_aware_optimizer": True} if s.offload_opt
                         else {})},
        "scheduler": {"_target_": f"{CFG}.SchedulerConfig", "lr_decay_style": "cosine",
                      "lr_warmup_iters": run.warmup_iters or PLACEHOLDER_WARMUP, "lr_decay_iters": iters},
        "ddp": ddp_section(train, s),
        "dataset": {"_target_": f"{CFG}.GPTDatasetConfig", "random_seed": 1234, "seq_length": train.seq_len,
                    "reset_attention_mask": False, "reset_position_ids": False, "eod_mask_loss": False,
                    "blend": None, "split": "9999,8,2", "dataloader_type": "single",
                    "num_dataset_builder_threads": 1},
        "logger": {"_target_": f"{CFG}.LoggerConfig", "log_interval": 10},
        "tokenizer": {"_target_": "megatron.bridge.training.tokenizers.config.TokenizerConfig",
                      "tokenizer_type": "NullTokenizer", "vocab_size": model.vocab_size},
        "checkpoint": {"_target_": f"{CFG}.CheckpointConfig",
                       "ckpt_format": "fsdp_dtensor" if s.zero >= 2 else "torch_dist",
                       "save_interval": run.checkpoint_interval or PLACEHOLDER_ITERS},
        "mixed_precision": mixed_precision(train.precision),
    }


def max_connections(job: Job, s) -> str:
    """CUDA_DEVICE_MAX_CONNECTIONS as Megatron-Bridge's PerfEnvPlugin sets it (recipes/run_plugins.py,
    _set_num_cuda_device_max_connections): 8, 32 with DeepEP; on Blackwell 32 when tensor or context parallelism
    meets data or pipeline parallelism; before Blackwell 1 with tensor or context parallelism (the communication
    kernel queued before the GEMM it overlaps) unless the expert all-to-all overlap runs."""
    conn = 32 if s.dispatcher == Dispatcher.DEDUP and job.model.moe is not None else 8
    if blackwell_or_newer(job):
        return "32" if (s.tp > 1 or s.cp > 1) and (s.dp > 1 or s.pp > 1) else str(conn)
    return "1" if (s.tp > 1 or s.cp > 1) and not s.a2a_overlap else str(conn)


def launch(job: Job, s, run: RunLength | None = None, strict: bool = False) -> Launch:
    """torchrun over the entry script (``ENTRY``: pretrain on the YAML), with the PerfEnvPlugin's
    CUDA_DEVICE_MAX_CONNECTIONS (``max_connections``)."""
    to_set = ["the dataset (dataset.blend: [[path prefixes], weights])",
              "the tokenizer (tokenizer.tokenizer_type HuggingFaceTokenizer, tokenizer.tokenizer_model PATH)",
              "the checkpoint paths (checkpoint.save, checkpoint.load)", "the learning rate (optimizer.lr, min_lr)"]
    if run is None or run.iterations is None:
        to_set.append(f"the run's length (train.train_iters {PLACEHOLDER_ITERS}, scheduler.lr_warmup_iters / "
                      "lr_decay_iters, checkpoint.save_interval are placeholders: asap emit --tokens N writes them)")
    return Launch(torchrun(job, f"{ENTRY} {CONFIG}"), {"CUDA_DEVICE_MAX_CONNECTIONS": max_connections(job, s)},
                  {ENTRY: ENTRY_TEXT}, tuple(to_set) + rendezvous_to_set(job), where=torchrun_where(job))


def emit(job: Job, s, run: RunLength | None = None, strict: bool = False) -> str:
    import yaml

    model = job.model
    target, _, stock = provider(model)
    said = (f"# model: Megatron-Bridge's own {target.rsplit('.', 1)[1]}: every architecture field equals "
            f"{model.name}'s" if stock else
            f"# model: custom definition ({target.rsplit('.', 1)[1]} with every field): no Megatron-Bridge provider "
            f"has every architecture field of {model.name}")
    run = run or RunLength()
    head = (f"# {VERSION}; asap strategy {s} (this file: {CONFIG})\n{said}\n"
            f"# load: ConfigContainer.from_yaml(path)\n{launch(job, s, run).header()}{run.line()}\n")
    chunks = chunk_layers(model, s)
    assert sum(chunks) == model.num_layers
    return head + yaml.safe_dump(config(job, s, run), sort_keys=False)
