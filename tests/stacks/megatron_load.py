"""Load emitted Megatron-LM arguments into megatron-core 0.14's configs and build the model they describe.

megatron-core's wheel ships no ``megatron/training/arguments.py`` (Megatron-LM's parser), so each flag goes to
its argparse destination as that parser names it (the renames below) and then to the config dataclasses by
field name, as Megatron-LM's ``core_transformer_config_from_args`` does; their ``__post_init__`` checks the
combination. The GPTModel is then built from the same values (parallel sizes 1: the whole model) on the meta
device, with megatron-core's local (non-Transformer-Engine) layer specs, and its parameters counted.
Usage: python megatron_load.py ARGS_FILE... -> one JSON list on stdout.
"""

import dataclasses
import json
import os
import shlex
import sys
import warnings

warnings.simplefilter("ignore")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# argparse dests that differ from the flag (Megatron-LM core_r0.14.0 arguments.py: store_false switches and
# renamed dests), then the renames validate_args / core_transformer_config_from_args make
DEST = {"disable_bias_linear": ("add_bias_linear", False), "fp8_format": ("fp8", None),
        "num_experts": ("num_moe_experts", None),
        "num_virtual_stages_per_pipeline_rank": ("virtual_pipeline_model_parallel_size", None),
        "no_gradient_accumulation_fusion": ("gradient_accumulation_fusion", False),
        "grad_reduce_in_bf16": ("grad_reduce_in_fp32", False),
        "untie_embeddings_and_output_weights": ("share_embeddings_and_output_weights", False)}
# read by pretrain_gpt.py's model provider (GPTModel's arguments) and its training loop, not by the configs
MODEL_ARGS = ("vocab_size", "max_position_embeddings", "position_embedding_type", "rotary_base",
              "share_embeddings_and_output_weights")


def typed(key, toks):
    name, flag_value = DEST.get(key, (key, None))
    if not toks:  # a store_true / store_false switch
        return name, True if flag_value is None else flag_value
    if key == "recompute_modules":
        return name, toks
    if key == "moe_layer_freq":  # arguments.moe_freq_type evaluates the list expression
        return name, eval(toks[0])
    text = toks[0]
    for cast in (int, float):
        try:
            return name, cast(text)
        except ValueError:
            pass
    return name, text


def namespace(text):
    args, key = {}, None
    for t in shlex.split(text.replace("\\\n", " "), comments=True):
        if t.startswith("--"):
            key = t[2:].replace("-", "_")
            args[key] = []
        else:
            args[key].append(t)
    return dict(typed(k, v) for k, v in args.items())


def core_kwargs(a):
    from megatron.core.activations import squared_relu

    if a.pop("swiglu", False):
        a.update(activation_func=F.silu, gated_linear_unit=True)
    if a.pop("squared_relu", False):
        a["activation_func"] = squared_relu
    if not a.pop("group_query_attention", False):
        a.pop("num_query_groups", None)
    dtype = torch.bfloat16 if a.get("bf16") else torch.float16 if a.get("fp16") else torch.float32
    a.update(pipeline_dtype=dtype, params_dtype=dtype, use_cpu_initialization=True, perform_initialization=False)
    return a


WHOLE = dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
             expert_model_parallel_size=1, expert_tensor_parallel_size=1, sequence_parallel=False,
             virtual_pipeline_model_parallel_size=None, pipeline_model_parallel_layout=None,
             overlap_moe_expert_parallel_comm=False, moe_enable_deepep=False, recompute_granularity=None,
             recompute_method=None, recompute_num_layers=None, recompute_modules=None)


class CoreAttention(torch.nn.Module):
    """The attention kernel, which has no parameters: megatron-core's local DotProductAttention takes no MLA head
    widths (``k_channels``; Transformer Engine's does, not installable here), so MLA layers get this stand-in."""

    def __init__(self, *args, **kwargs):
        super().__init__()


def build(cfg, a):
    """The whole model (every parallel size 1) on the meta device: its parameter count."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec

    # the allgather dispatcher builds no CUDA stream (alltoall's does) and SequentialMLP needs no grouped_gemm
    # package (GroupedMLP does): the same parameters
    whole = dataclasses.replace(cfg, **WHOLE, **({"moe_token_dispatcher_type": "allgather", "moe_grouped_gemm": False}
                                                 if cfg.num_moe_experts else {}))
    spec = get_gpt_decoder_block_spec(whole, use_transformer_engine=False, normalization=whole.normalization)
    if whole.multi_latent_attention:
        for layer in spec.layer_specs:
            layer.submodules.self_attention.submodules.core_attention = CoreAttention
    mtp = get_gpt_mtp_block_spec(whole, spec.layer_specs[-1], use_transformer_engine=False) \
        if whole.mtp_num_layers else None
    # MLA's rotary tables ask torch.cuda.current_device() without a use_cpu_initialization branch
    # (multi_latent_attention.py, core_r0.14.0): the CPU shim of this loader, the only one
    torch.cuda.current_device = lambda: "cpu"
    with torch.device("meta"):
        model = GPTModel(whole, spec, vocab_size=a["vocab_size"], max_sequence_length=a["max_position_embeddings"],
                         position_embedding_type=a.get("position_embedding_type", "learned_absolute"),
                         rotary_base=a.get("rotary_base", 10000),
                         share_embeddings_and_output_weights=a.get("share_embeddings_and_output_weights", True),
                         mtp_block_spec=mtp)
    return sum(p.numel() for p in model.parameters())


def load(text):
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    a = core_kwargs(namespace(text))
    cls = MLATransformerConfig if a.get("multi_latent_attention") else TransformerConfig
    fields = {f.name for f in dataclasses.fields(cls)}
    ddp_fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    cfg = cls(**{k: v for k, v in a.items() if k in fields})
    ddp = DistributedDataParallelConfig(**{k: v for k, v in a.items() if k in ddp_fields})
    return {"class": cls.__name__, "tp": cfg.tensor_model_parallel_size, "pp": cfg.pipeline_model_parallel_size,
            "vpp": cfg.virtual_pipeline_model_parallel_size, "ep": cfg.expert_model_parallel_size,
            "cp": cfg.context_parallel_size, "sp": cfg.sequence_parallel, "recompute": cfg.recompute_granularity,
            "modules": cfg.recompute_modules, "dispatcher": cfg.moe_token_dispatcher_type,
            "deepep": cfg.moe_enable_deepep, "experts": cfg.num_moe_experts, "topk": cfg.moe_router_topk,
            "bias": cfg.add_bias_linear, "normalization": cfg.normalization, "gated": cfg.gated_linear_unit,
            "activation": cfg.activation_func.__name__, "query_groups": cfg.num_query_groups,
            "mla": cfg.multi_latent_attention, "mtp": cfg.mtp_num_layers, "fp8": cfg.fp8,
            "fp8_recipe": cfg.fp8_recipe, "bf16": cfg.bf16, "a2a_overlap": cfg.overlap_moe_expert_parallel_comm,
            "layout": None if cfg.pipeline_model_parallel_layout is None else
            [len(stage) for row in cfg.pipeline_model_parallel_layout.layout for stage in row],
            "dist_opt": ddp.use_distributed_optimizer, "sharding": ddp.data_parallel_sharding_strategy,
            "megatron_fsdp": ddp.use_megatron_fsdp, "overlap_grad_reduce": ddp.overlap_grad_reduce,
            "grad_reduce_in_fp32": ddp.grad_reduce_in_fp32,
            "position_embedding_type": a.get("position_embedding_type"), "rotary_base": a.get("rotary_base"),
            "params": build(cfg, a), "elsewhere": sorted(set(a) - fields - ddp_fields - set(MODEL_ARGS))}


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(20000 + os.getpid() % 20000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel()
    print(json.dumps([load(open(p).read()) for p in sys.argv[1:]]))
