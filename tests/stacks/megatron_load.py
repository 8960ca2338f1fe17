"""Read emitted Megatron-LM arguments with Megatron-LM's own parser and build the model they describe.

Megatron-LM's ``megatron/training/arguments.py`` at core_v0.14.0 (vendored unmodified under
tests/stacks/megatron_lm: not in the megatron-core wheel, Megatron-LM not on PyPI) parses the emitted arguments
(``parse_args``), checks them (``validate_args``) and turns them into megatron-core 0.14.0's TransformerConfig or
MLATransformerConfig (``core_transformer_config_from_args``), whose ``__post_init__`` checks the combination.
The GPTModel is then built from that config (parallel sizes 1: the whole model) on the meta device with
megatron-core's local (non-Transformer-Engine) layer specs, and its parameters counted.

Usage: python megatron_load.py WORLD_SIZE:ARGS_FILE... -> one JSON list on stdout. Two arguments are added for
this machine only, neither changing the model: ``--no-rope-fusion`` and ``--no-gradient-accumulation-fusion``
(Transformer Engine's and apex's fused kernels are not installed here), and ``--tokenizer-type NullTokenizer``.
"""

import dataclasses
import json
import os
import re
import shlex
import sys
import tempfile
import types
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

VENDORED = Path(__file__).parent / "megatron_lm" / "megatron" / "training"
HERE_ONLY = ["--no-rope-fusion", "--no-gradient-accumulation-fusion", "--tokenizer-type", "NullTokenizer"]


def _utils_module():
    """The four helpers arguments.py imports from megatron/training/utils.py (core_v0.14.0), upstream bodies."""
    u = types.ModuleType("megatron.training.utils")

    def print_rank_0(message, rank=None):
        print(message, file=sys.stderr, flush=True)  # (stderr: stdout carries the JSON)

    def warn_rank_0(message, rank=None):
        warnings.warn(message, stacklevel=2)

    def update_use_dist_ckpt(args):
        args.use_dist_ckpt = args.ckpt_format != "torch"

    def get_device_arch_version():
        return 9  # Hopper: the clusters asap emits for (upstream asks cuda:0, absent here)

    u.print_rank_0, u.warn_rank_0 = print_rank_0, warn_rank_0
    u.update_use_dist_ckpt, u.get_device_arch_version = update_use_dist_ckpt, get_device_arch_version
    return u


def megatron_arguments():
    pkg = types.ModuleType("megatron.training")
    pkg.__path__ = [str(VENDORED)]  # Megatron-LM's package __init__ imports its whole trainer: skipped
    sys.modules["megatron.training"] = pkg
    sys.modules["megatron.training.utils"] = _utils_module()
    from megatron.training import arguments

    # validate_args asks the GPU's compute capability (GroupedGEMM needs >= 8): the H100 the jobs are for
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    return arguments


WHOLE = dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
             expert_model_parallel_size=1, expert_tensor_parallel_size=1, sequence_parallel=False,
             virtual_pipeline_model_parallel_size=None, pipeline_model_parallel_layout=None,
             overlap_moe_expert_parallel_comm=False, moe_enable_deepep=False, recompute_granularity=None,
             recompute_method=None, recompute_num_layers=None, recompute_modules=None,
             use_cpu_initialization=True, perform_initialization=False,  # meta tensors: no init, no CUDA RNG
             persist_layer_norm=False)  # Transformer Engine's persistent LayerNorm kernel: torch norms here


class CoreAttention(torch.nn.Module):
    """The attention kernel, which has no parameters: megatron-core's local DotProductAttention takes no MLA head
    widths (``k_channels``; Transformer Engine's does, not installable here), so MLA layers get this stand-in."""

    def __init__(self, *args, **kwargs):
        super().__init__()


def padded_vocab(args):
    """megatron/training/tokenizer/tokenizer.py ``_vocab_size_with_padding`` (core_v0.14.0)."""
    multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
    return -(-args.vocab_size // multiple) * multiple


def build(cfg, args):
    """The whole model (every parallel size 1) on the meta device, as pretrain_gpt.py's model provider builds it."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_mtp_block_spec

    # the allgather dispatcher builds no CUDA stream (alltoall's does) and SequentialMLP needs no grouped_gemm
    # package (GroupedMLP does): the same parameters
    whole = dataclasses.replace(cfg, **WHOLE, **({"moe_token_dispatcher_type": "allgather", "moe_grouped_gemm": False}
                                                 if cfg.num_moe_experts else {}))
    spec = get_gpt_decoder_block_spec(whole, use_transformer_engine=False, normalization=whole.normalization,
                                      qk_l2_norm=args.qk_l2_norm)
    if whole.multi_latent_attention:
        for layer in spec.layer_specs:
            layer.submodules.self_attention.submodules.core_attention = CoreAttention
    mtp = get_gpt_mtp_block_spec(whole, spec.layer_specs[-1], use_transformer_engine=False) \
        if whole.mtp_num_layers else None
    # MLA's rotary tables ask torch.cuda.current_device() without a use_cpu_initialization branch
    # (multi_latent_attention.py, yarn_rotary_pos_embedding.py, core_r0.14.0): kept on the meta device
    torch.cuda.current_device = lambda: "meta"
    with torch.device("meta"):
        model = GPTModel(whole, spec, vocab_size=padded_vocab(args), max_sequence_length=args.max_position_embeddings,
                         position_embedding_type=args.position_embedding_type, rotary_percent=args.rotary_percent,
                         rotary_base=args.rotary_base, rope_scaling=args.use_rope_scaling,
                         rope_scaling_factor=args.rope_scaling_factor,
                         share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
                         mtp_block_spec=mtp)
    names = [n for n, _ in model.named_parameters()]
    return sum(p.numel() for p in model.parameters()), names


# what the tests compare: TransformerConfig's fields and the parser's model-provider arguments
CONFIG_FIELDS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
                 "normalization", "layernorm_epsilon", "qk_layernorm", "gated_linear_unit", "add_bias_linear",
                 "add_qkv_bias", "multi_latent_attention", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
                 "qk_pos_emb_head_dim", "v_head_dim", "rope_type", "rotary_scaling_factor", "mscale", "mscale_all_dim",
                 "beta_fast", "beta_slow", "original_max_position_embeddings", "num_moe_experts", "moe_router_topk",
                 "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size", "moe_layer_freq",
                 "moe_router_score_function", "moe_router_pre_softmax", "moe_router_enable_expert_bias",
                 "moe_router_bias_update_rate", "moe_router_num_groups", "moe_router_group_topk",
                 "moe_router_topk_scaling_factor", "moe_router_load_balancing_type", "moe_aux_loss_coeff",
                 "moe_z_loss_coeff", "moe_expert_capacity_factor", "moe_token_drop_policy", "mtp_num_layers",
                 "tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                 "expert_model_parallel_size", "context_parallel_size", "sequence_parallel", "recompute_granularity",
                 "recompute_modules", "moe_token_dispatcher_type", "moe_enable_deepep",
                 "overlap_moe_expert_parallel_comm", "fp8", "fp8_recipe", "bf16")
ARG_FIELDS = ("vocab_size", "make_vocab_size_divisible_by", "position_embedding_type", "rotary_base", "use_rope_scaling",
              "rope_scaling_factor", "rotary_seq_len_interpolation_factor", "untie_embeddings_and_output_weights",
              "swiglu", "global_batch_size", "micro_batch_size", "seq_length", "data_parallel_size",
              "use_distributed_optimizer", "use_megatron_fsdp", "data_parallel_sharding_strategy", "overlap_grad_reduce",
              "grad_reduce_in_bf16", "ckpt_format")


def jsonable(v):
    if isinstance(v, torch.dtype) or callable(v):
        return getattr(v, "__name__", str(v))
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


def load(arguments, world_size, text):
    os.environ["WORLD_SIZE"] = str(world_size)
    conn = re.search(r"CUDA_DEVICE_MAX_CONNECTIONS=(\d+)", text)  # what the emitted header tells the launcher
    if conn:
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = conn.group(1)
    else:
        os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    sys.argv = ["pretrain_gpt.py", *shlex.split(text.replace("\\\n", " "), comments=True), *HERE_ONLY]
    args = arguments.parse_args()
    arguments.validate_args(args)
    cfg = arguments.core_transformer_config_from_args(args)
    out = {"class": type(cfg).__name__, "activation": cfg.activation_func.__name__}
    out.update({k: jsonable(getattr(cfg, k, None)) for k in CONFIG_FIELDS})
    out.update({f"args.{k}": jsonable(getattr(args, k, None)) for k in ARG_FIELDS})
    layout = cfg.pipeline_model_parallel_layout
    out["layout"] = None if layout is None else [len(stage) for row in layout.layout for stage in row]
    out["padded_vocab"] = padded_vocab(args)
    out["params"], names = build(cfg, args)
    out["q_layernorm"] = any(n.endswith("q_layernorm.weight") for n in names)
    return out


if __name__ == "__main__":
    # a one-process group over a file store: no port to collide with another test's (pytest-xdist)
    store = dist.FileStore(tempfile.mkstemp(prefix="asap-gloo-")[1], 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel()
    arguments = megatron_arguments()
    results = []
    for spec in sys.argv[1:]:
        world, path = spec.split(":", 1)
        results.append(load(arguments, int(world), open(path).read()))
    print(json.dumps(results))
