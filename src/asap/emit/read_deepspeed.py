"""A DeepSpeed JSON config read back into asap's job (the inverse of ``asap.emit.deepspeed``).

DeepSpeed v0.19.8's ``DeepSpeedConfig`` (``deepspeed/runtime/config.py``, ``zero/config.py``) with its defaults:
``train_batch_size`` = ``train_micro_batch_size_per_gpu`` x ``gradient_accumulation_steps`` x dp (any two given, the
third follows; all three fix dp, so the device count is dp x tp x pp), ``zero_optimization.stage`` (0),
``mics_shard_size`` (hybrid sharding: dp / it replicas), ``offload_optimizer.device`` cpu / nvme (offload_opt),
``bf16.enabled`` / ``fp16.enabled`` (else fp32), ``tensor_parallel.autotp_size`` (tp), ``pipeline.stages`` (pp, its
engine's 1F1B), ``activation_checkpointing`` (whole layers: full recomputation; ``cpu_checkpointing``: the
checkpoints in host memory) or ``pipeline.activation_checkpoint_interval`` 1. The JSON carries no model and no
sequence length: they come from the caller (``asap read --model M --seq-len S``). Values HF's integration fills
(``"auto"``) are refused. Keys that do not change a step (optimizer, scheduler, clipping, logging, monitors,
checkpoint I/O, the ZeRO buckets and overlap switches asap prices as overlapped) are skipped by ``IGNORED``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from asap.emit.read_common import Parsed, positive_int, refuse_key
from asap.errors import AsapError

FMT = "deepspeed"
MAPPED = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
          "bf16", "fp16", "tensor_parallel", "pipeline", "activation_checkpointing")
IGNORED = ("optimizer", "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown",
           "prescale_gradients", "gradient_predivide_factor", "zero_allow_untested_optimizer", "flops_profiler",
           "tensorboard", "wandb", "csv_monitor", "comet", "comms_logger", "memory_breakdown", "dump_state",
           "checkpoint", "zero_force_ds_cpu_optimizer", "sparse_gradients", "aio", "elasticity_", "seed",
           "disable_allgather", "logging", "bfloat16_", "train_batch_size_", "fp16_", "autotuning")
ZERO_IGNORED = ("stage", "overlap_comm", "contiguous_gradients", "reduce_bucket_size", "allgather_bucket_size",
                "reduce_scatter", "allgather_partitions", "round_robin_gradients", "sub_group_size",
                "elastic_checkpoint", "load_from_fp32_weights", "cpu_offload", "stage3_max_live_parameters",
                "stage3_max_reuse_distance", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
                "ignore_unused_parameters", "legacy_stage1", "memory_efficient_linear", "mics_shard_size",
                "mics_hierarchical_params_gather", "offload_optimizer", "offload_param", "round_robin_gradients",
                "use_multi_rank_bucket_allreduce", "model_persistence_threshold")
PRECISION_KEYS = ("enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                  "consecutive_hysteresis", "min_loss_scale", "auto_cast", "fp16_master_weights_and_grads",
                  "immediate_grad_update", "bf16_master_weights_and_grads", "bf16_optimizer_states")
CHECKPOINT_KEYS = ("partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
                   "number_checkpoints", "synchronize_checkpoint_boundary", "profile")


def _check(d: dict) -> None:
    for k, v in d.items():
        if k not in MAPPED and k not in IGNORED:
            raise refuse_key(FMT, k)
        if v == "auto":
            raise refuse_key(FMT, k, "'auto' (Hugging Face's integration fills it at launch: give the value)")
    for sec, allowed in (("zero_optimization", ZERO_IGNORED), ("bf16", PRECISION_KEYS), ("fp16", PRECISION_KEYS),
                         ("activation_checkpointing", CHECKPOINT_KEYS),
                         ("pipeline", ("stages", "partition", "activation_checkpoint_interval", "seed_layers",
                                       "pipe_partitioned", "grad_partitioned", "use_reentrant")),
                         ("tensor_parallel", ("autotp_size", "tp_size", "tp_grain_size"))):
        body = d.get(sec, {})
        if not isinstance(body, dict):
            raise AsapError(sec, "must be a mapping")
        for k, v in body.items():
            if k not in allowed:
                raise refuse_key(FMT, f"{sec}.{k}")
            if v == "auto":
                raise refuse_key(FMT, f"{sec}.{k}", "'auto' (Hugging Face's integration fills it at launch)")


# Megatron-DeepSpeed's own spellings of what Megatron-LM names otherwise (megatron/arguments.py of
# deepspeedai/Megatron-DeepSpeed), and its DeepSpeed switches, which the JSON decides
DS_FLAGS = {"--num-key-value-heads": "--num-query-groups", "--checkpoint-activations": "--recompute-granularity"}
DS_SWITCHES = ("--deepspeed", "--deepspeed_config", "--deepspeed-config", "--zero-stage",
               "--deepspeed-activation-checkpointing", "--partition-activations", "--no-pipeline-parallel",
               "--data-impl", "--no-query-key-layer-scaling", "--use-rotary-position-embeddings", "--normalization")


def read_script(path: Path, text: str, model, cluster) -> Parsed:
    """A Megatron-DeepSpeed launch script: the model, sequence and parallel sizes from its Megatron arguments, the
    batch, ZeRO and precision from the JSON ``--deepspeed_config`` names (the file the script writes with
    ``cat <<EOT``, else the path beside the script), the cluster's size from the launcher."""
    import re

    from asap.emit import read_megatron as mg
    from asap.emit.read_shell import launch_line

    launcher, words, shell = launch_line(text, mg.MARKER, "script")
    flags = mg.parse_args(words)
    where = (flags.get("--deepspeed_config") or flags.get("--deepspeed-config") or [""])[0]
    if not where:
        raise AsapError("--deepspeed_config", "missing: the launch line names no DeepSpeed JSON")
    body = shell.files.get(where)
    if body is None:
        beside = path.parent / where
        if not beside.is_file():
            raise AsapError("--deepspeed_config", f"{where}: neither written by the script nor beside it")
        body = beside.read_text()
    if flags.pop("--use-rotary-position-embeddings", None) is not None:
        flags["--position-embedding-type"] = ["rope"]
    if "--normalization" in flags:
        flags["--normalization"] = [{"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}.get(v.lower(), v)
                                    for v in flags["--normalization"]]
    for ds_name, lm_name in DS_FLAGS.items():
        if ds_name in flags:
            value = flags.pop(ds_name)
            flags[lm_name] = value or ["full"]
            if lm_name == "--num-query-groups":
                flags["--group-query-attention"] = []
    for k in [k for k in flags if k in DS_SWITCHES and k != "--normalization"]:
        flags.pop(k)
    mg.check_known(flags)
    a = mg.Args(flags)
    stated = mg.read_model(a, re.sub(r"\W+", "-", path.stem))
    if model is not None and replace(model, name=stated.name) != stated:
        raise AsapError("model", f"the script describes a different model than {model.name}")
    size = mg.launcher_size(launcher)
    devices = size["nodes"] * size["devices_per_node"] if size.get("nodes") and size.get("devices_per_node") else \
        (cluster.num_devices if cluster is not None else None)
    seq = a.int("--seq-length")
    if seq is None:
        raise AsapError("--seq-length", "missing")
    parsed = read_json(path, body, model or stated, seq, devices, mg.read_strategy(a, stated))
    return replace(parsed, nodes=size.get("nodes"), devices_per_node=size.get("devices_per_node"))


def read(path: Path, text: str, *, model=None, seq_len=None, cluster=None) -> Parsed:
    if not text.lstrip().startswith("{"):
        return read_script(path, text, model, cluster)
    return read_json(path, text, model, seq_len, cluster.num_devices if cluster is not None else None)


def read_json(path: Path, text: str, model, seq_len, devices: int | None, megatron: dict | None = None) -> Parsed:
    """The JSON; ``megatron`` the strategy keys a Megatron-DeepSpeed script's arguments state (tp, pp,
    recompute), which the JSON's own keys override."""
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise AsapError("config", f"not JSON: {e}") from None
    if not isinstance(d, dict):
        raise AsapError("config", "a DeepSpeed config must be a JSON object")
    _check(d)
    if model is None:
        raise AsapError("model", "a DeepSpeed JSON carries no model: give it (--model)")
    if seq_len is None:
        raise AsapError("seq_len", "a DeepSpeed JSON carries no sequence length: give it (--seq-len)")
    z = d.get("zero_optimization", {})
    lm = megatron or {}
    tp = positive_int(d.get("tensor_parallel", {}).get("autotp_size", d.get("tensor_parallel", {}).get(
        "tp_size", lm.get("tp", 1))), "tensor_parallel.autotp_size")
    pipe = d.get("pipeline", {})
    pp = positive_int(pipe.get("stages", lm.get("pp", 1)), "pipeline.stages")
    s: dict[str, Any] = {"tp": tp, "pp": pp, "cp": 1, "vpp": 1, "sp": 0, "schedule": "1f1b",
                         "zero": int(z.get("stage", 0))}
    if s["zero"] not in (0, 1, 2, 3):
        raise AsapError("zero_optimization.stage", f"must be 0, 1, 2 or 3, got {s['zero']!r}")
    if model.moe is not None:
        s["ep"] = 1  # expert parallelism is set in the model code (deepspeed.moe.layer.MoE), not the JSON
    dp, gb, s["mbs"] = _batch(d, devices, tp * pp)
    s["dp"] = dp
    if z.get("mics_shard_size", -1) not in (-1, None):
        shard = positive_int(z["mics_shard_size"], "zero_optimization.mics_shard_size")
        if dp % shard:
            raise AsapError("zero_optimization.mics_shard_size", f"{shard} does not divide dp={dp}")
        s["dp_replicate"] = dp // shard
    s.update(_offload(z, d))
    if lm.get("recompute", "none") != "none" and s["recompute"] == "none":
        s["recompute"] = lm["recompute"]
    return Parsed(model, gb, seq_len, _precision(d), s, devices=dp * tp * pp)


def _batch(d: dict, devices: int | None, per_replica: int) -> tuple[int, int, int]:
    """(dp, global batch, micro-batch) from train = micro x accumulation x dp (DeepSpeed's
    ``_configure_train_batch_size``)."""
    tb, mb, ga = (d.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                     "gradient_accumulation_steps"))
    tb = None if tb is None else positive_int(tb, "train_batch_size")
    mb = None if mb is None else positive_int(mb, "train_micro_batch_size_per_gpu")
    ga = None if ga is None else positive_int(ga, "gradient_accumulation_steps")
    dp = devices // per_replica if devices else None
    if tb and mb and ga:
        if tb % (mb * ga):
            raise AsapError("train_batch_size", f"{tb} is not micro {mb} x accumulation {ga} x dp")
        return tb // (mb * ga), tb, mb
    if dp is None:
        raise AsapError("cluster", "train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps "
                                   "are not all given: the data-parallel size needs a cluster")
    if tb and mb:
        return dp, tb, mb
    if tb and ga:
        if tb % (ga * dp):
            raise AsapError("train_batch_size", f"{tb} does not split over accumulation {ga} x dp {dp}")
        return dp, tb, tb // (ga * dp)
    if mb:
        return dp, mb * (ga or 1) * dp, mb
    raise AsapError("train_batch_size", "missing (and train_micro_batch_size_per_gpu with it)")


def _offload(z: dict, d: dict) -> dict[str, Any]:
    out: dict[str, Any] = {"recompute": "none"}
    opt = (z.get("offload_optimizer") or {}).get("device", "none")
    if opt in ("cpu", "nvme"):
        out["offload_opt"] = 1
    if (z.get("offload_param") or {}).get("device", "none") not in ("none", None):
        raise refuse_key(FMT, "zero_optimization.offload_param", "parameter offload (asap offloads optimizer states "
                                                                 "and activations)")
    ac = d.get("activation_checkpointing")
    if ac is not None or int(d.get("pipeline", {}).get("activation_checkpoint_interval", 0) or 0) == 1:
        out["recompute"] = "full"
        if (ac or {}).get("cpu_checkpointing"):
            out["offload_act"] = 1
    return out


def _precision(d: dict) -> str:
    bf16, fp16 = d.get("bf16", {}).get("enabled", False), d.get("fp16", {}).get("enabled", False)
    if bf16 and fp16:
        raise AsapError("fp16.enabled", "bf16 and fp16 both enabled")
    return "bf16" if bf16 else "fp16" if fp16 else "fp32"
