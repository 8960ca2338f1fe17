"""A DeepSpeed JSON config (``deepspeed.initialize(config=...)``).

Option names follow DeepSpeed v0.19.8 (``deepspeed/runtime/config.py``, ``zero/config.py``): train_batch_size,
train_micro_batch_size_per_gpu, gradient_accumulation_steps, zero_optimization.stage, bf16/fp16.enabled,
``pipeline`` (stages, partition, activation_checkpoint_interval: read by the pipeline engine),
``tensor_parallel.autotp_size`` (AutoTP training), ``activation_checkpointing`` (whole layers),
``zero_optimization.mics_shard_size`` (dp_replicate > 1 under ZeRO-3: MiCS, ``deepspeed/runtime/zero/mics.py``,
shards over dp / dp_replicate consecutive ranks and all-reduces the gradient shards across the replicas at the
accumulation boundary).
Refused (what the JSON and the Megatron-DeepSpeed pipeline engine cannot express): vpp > 1 and schedules other
than 1F1B, sequence parallelism, context parallelism, expert parallelism (set in the model code,
``deepspeed.moe.layer.MoE(ep_size=...)``), ZeRO-2/3 with pipeline parallelism, recompute other than none or
full, a layer split other than the uniform one, fp8 (the rules shared with the planner: asap.spec.stack_rules).
The JSON carries no model: DeepSpeed trains the user's ``nn.Module`` (for Megatron-DeepSpeed, the model is
Megatron's arguments: ``asap emit --format megatron``).
"""

from __future__ import annotations

import json

from asap.spec.knobs import Recompute, Schedule
from asap.emit.common import check_runnable, chunk_layers, micro_batches, refuse
from asap.spec.job import Job

NAME = "deepspeed"
VERSION = "DeepSpeed v0.19.8 (deepspeed/runtime/config.py)"


def config(job: Job, s) -> dict:
    model, train = job.model, job.train
    check_runnable(NAME, NAME, job, s)
    if s.vpp > 1 or s.schedule != Schedule.ONE_F_ONE_B:
        key = "vpp" if s.vpp > 1 else "schedule"
        raise refuse(key, NAME, f"{key}={getattr(s, key)} (its pipeline engine runs 1F1B with one stage per rank)")
    if s.sp:
        raise refuse("sp", NAME, "sp=1 (no sequence parallelism)")
    if s.cp > 1:
        raise refuse("cp", NAME, f"cp={s.cp} (no context parallelism)")
    if s.pp > 1 and s.zero > 1:
        raise refuse("zero", NAME, f"zero={s.zero} with pp={s.pp} (its pipeline engine takes ZeRO-1 at most)")
    if s.recompute.kind not in (Recompute.NONE, Recompute.FULL):
        raise refuse("recompute", NAME, f"recompute={s.recompute} (activation checkpointing is whole-layer)")
    if s.layer_split and len(set(chunk_layers(model, s))) != 1:
        raise refuse("layer_split", NAME, f"layer_split={'/'.join(map(str, s.layer_split))} "
                                          "(pipeline.partition is uniform)")
    cfg: dict = {
        "train_batch_size": train.global_batch,
        "train_micro_batch_size_per_gpu": s.mbs,
        "gradient_accumulation_steps": micro_batches(train, s),
        "zero_optimization": {"stage": int(s.zero)},
        "bf16": {"enabled": train.precision == "bf16"},
        "fp16": {"enabled": train.precision == "fp16"},
        "gradient_clipping": 1.0,
    }
    if s.offload_act and s.recompute.kind != Recompute.FULL:
        raise refuse("offload_act", NAME, "offload_act=1 without full recomputation (cpu_checkpointing moves the "
                                          "checkpointed layer inputs)")
    if s.offload_opt:  # ZeRO-Offload: the optimizer states and step on the host (zero/offload_config.py)
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if s.dp_replicate > 1:  # the stack rules hold zero 3 and data parallelism alone
        cfg["zero_optimization"]["mics_shard_size"] = s.dp // s.dp_replicate
    if s.tp > 1:
        cfg["tensor_parallel"] = {"autotp_size": s.tp}
    if s.pp > 1:
        cfg["pipeline"] = {"stages": s.pp, "partition": "uniform",
                           "activation_checkpoint_interval": 1 if s.recompute.kind == Recompute.FULL else 0}
    if s.recompute.kind == Recompute.FULL:
        cfg["activation_checkpointing"] = {"partition_activations": s.tp > 1, "contiguous_memory_optimization": False,
                                           "cpu_checkpointing": bool(s.offload_act), "number_checkpoints": model.num_layers}
    return cfg


def emit(job: Job, s) -> str:
    return json.dumps(config(job, s), indent=2) + "\n"
