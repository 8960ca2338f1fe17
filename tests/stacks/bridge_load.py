"""Load an emitted Megatron-Bridge YAML with Megatron-Bridge 0.3.1's own ConfigContainer and build its model.

Runs on .venv-bridge (tests/stacks/bridge_env.py: megatron-bridge 0.3.1 and megatron-core 0.16.0 in a pip --target
folder). ``ConfigContainer.from_yaml`` instantiates every section (strict: no unknown key), ``validate()`` runs
Megatron-Bridge's checks (data-parallel size, batch, FSDP, the provider's ``finalize``: TransformerConfig's
``__post_init__``) for WORLD_SIZE ranks, then the provider's own ``provide()`` builds the GPTModel with parallel
sizes 1 (the whole model) on the meta device (``init_model_with_meta_device``), with megatron-core's local layer
specs (Transformer Engine has no CPU build) and the parameters are counted.

Usage: python bridge_load.py WORLD_SIZE:EMITTED.yaml... -> one JSON list on stdout.
"""

import dataclasses
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
sys.path.insert(0, str(Path(__file__).parent))
import bridge_env  # noqa: E402

bridge_env.setup()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

WHOLE = dict(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
             expert_model_parallel_size=1, expert_tensor_parallel_size=1, sequence_parallel=False,
             virtual_pipeline_model_parallel_size=None, pipeline_model_parallel_layout=None,
             overlap_moe_expert_parallel_comm=False, moe_enable_deepep=False, recompute_granularity=None,
             recompute_method=None, recompute_num_layers=None, recompute_modules=None,
             use_cpu_initialization=True, perform_initialization=False, init_model_with_meta_device=True,
             persist_layer_norm=False, gradient_accumulation_fusion=False, apply_rope_fusion=False,
             bias_activation_fusion=False, masked_softmax_fusion=False, moe_permute_fusion=False)


HERE_ONLY = ("moe_permute_fusion", "apply_rope_fusion", "gradient_accumulation_fusion", "persist_layer_norm",
             "bias_activation_fusion", "masked_softmax_fusion", "cross_entropy_loss_fusion", "moe_router_fusion")


class CoreAttention(torch.nn.Module):
    """MLA's attention kernel (no parameters): megatron-core's local DotProductAttention takes no MLA head widths."""

    def __init__(self, *args, **kwargs):
        super().__init__()


def local_spec(config):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization=config.normalization)
    if config.multi_latent_attention:
        for layer in spec.layer_specs:
            layer.submodules.self_attention.submodules.core_attention = CoreAttention
    return spec


def local_mtp_spec(config, vp_stage=None):
    """gpt_provider.mtp_block_spec with the local layer specs (Bridge's asks Transformer Engine's): same modules."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec

    if not config.mtp_num_layers:
        return None
    return get_gpt_mtp_block_spec(config, local_spec(config).layer_specs[-1], use_transformer_engine=False)


def build(provider):
    import megatron.bridge.models.gpt_provider as gpt_provider
    from megatron.core.process_groups_config import ProcessGroupCollection

    gpt_provider.mtp_block_spec = local_mtp_spec
    import megatron.core.transformer.multi_latent_attention as mla

    # megatron-core 0.16 imports its Transformer Engine extension without TE (TELinear None) and then asks
    # isinstance(.., TELinear): TE is absent here, which is what HAVE_TE says once set so
    mla.HAVE_TE = False

    extra = {"moe_token_dispatcher_type": "allgather", "moe_grouped_gemm": False} if provider.num_moe_experts else {}
    whole = dataclasses.replace(provider, **{k: v for k, v in {**WHOLE, **extra}.items()
                                             if k in {f.name for f in dataclasses.fields(provider)}})
    whole.transformer_layer_spec = local_spec
    whole._pg_collection = ProcessGroupCollection.use_mpu_process_groups()
    torch.cuda.current_device = lambda: "meta"  # rotary tables placed on the meta device
    model = whole.provide()
    return sum(p.numel() for p in model.parameters())


def fn_name(v):
    return getattr(v, "__name__", str(v)) if callable(v) else v


def load(world, path):
    from megatron.bridge.training.config import ConfigContainer
    from megatron.bridge.training.utils.config_utils import InstantiationMode

    os.environ["WORLD_SIZE"] = str(world)
    cfg = ConfigContainer.from_yaml(path, mode=InstantiationMode.STRICT)
    for k in HERE_ONLY:  # Transformer Engine's / apex's fused kernels: not on this machine (no model change)
        if hasattr(cfg.model, k):
            setattr(cfg.model, k, False)
    cfg.validate()
    m = cfg.model
    from asap.emit.megatron_bridge import ARCH_FIELDS

    out = {"provider": type(m).__name__, "mixed_precision": str(cfg.mixed_precision), "arch": {k: fn_name(getattr(m, k)) for k in ARCH_FIELDS if hasattr(m, k)}}
    out["arch"]["window_size"] = None if m.window_size is None else list(m.window_size)
    out.update(tp=m.tensor_model_parallel_size, pp=m.pipeline_model_parallel_size, ep=m.expert_model_parallel_size,
               vpp=m.virtual_pipeline_model_parallel_size, cp=m.context_parallel_size, sp=m.sequence_parallel,
               dp=cfg.data_parallel_size, global_batch=cfg.train.global_batch_size, mbs=cfg.train.micro_batch_size,
               seq=cfg.dataset.seq_length, dist_opt=cfg.ddp.use_distributed_optimizer, fsdp=cfg.ddp.use_megatron_fsdp,
               bf16=m.bf16, recompute=m.recompute_granularity, dispatcher=m.moe_token_dispatcher_type,
               train_iters=cfg.train.train_iters, lr_warmup_iters=cfg.scheduler.lr_warmup_iters,
               lr_decay_iters=cfg.scheduler.lr_decay_iters, save_interval=cfg.checkpoint.save_interval,
               padded_vocab=-(-m.vocab_size // (m.make_vocab_size_divisible_by * m.tensor_model_parallel_size))
               * m.make_vocab_size_divisible_by * m.tensor_model_parallel_size)
    return out, m


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parents[2] / "src"))
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    # validate() takes the world size from WORLD_SIZE while torch.distributed is not up: every file first
    loaded = [load(int(world), path) for world, path in (spec.split(":", 1) for spec in sys.argv[1:])]
    os.environ.update(WORLD_SIZE="1")
    # a one-process group over a file store: no port to collide with another test's (pytest-xdist)
    store = dist.FileStore(tempfile.mkstemp(prefix="asap-gloo-")[1], 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel()
    for out, provider in loaded:
        try:
            out["params"] = build(provider)
        except TypeError as e:  # GPTOSSProvider.provide asks Transformer Engine's version (none here): said
            out["params"], out["build_error"] = None, str(e)
    print(json.dumps([out for out, _ in loaded]))
