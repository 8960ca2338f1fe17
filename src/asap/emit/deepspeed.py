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
from asap.emit.launch import Launch, RunLength
from asap.spec.job import Job

NAME = "deepspeed"
CONFIG = "ds_config.json"  # the file name the launch line reads
VERSION = "DeepSpeed v0.19.8 (deepspeed/runtime/config.py)"


def config(job: Job, s, run: RunLength | None = None, strict: bool = False) -> dict:
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
    run = run or RunLength()
    if run.iterations is not None:  # deepspeed/runtime/lr_schedules.py WarmupCosineLR
        cfg["scheduler"] = {"type": "WarmupCosineLR", "params": {"total_num_steps": run.iterations,
                                                                 "warmup_num_steps": run.warmup_iters}}
    return cfg


def launch(job: Job, s, run: RunLength | None = None, strict: bool = False) -> Launch:
    """DeepSpeed's launcher (docs: getting-started, "Launching DeepSpeed Training"): ``deepspeed --num_nodes N
    --num_gpus G --hostfile FILE TRAIN.py --deepspeed --deepspeed_config ds_config.json``; the JSON carries no
    model, data or checkpoint path: the user's script does."""
    c = job.cluster
    hosts = " --hostfile hostfile --master_addr $MASTER_ADDR" if c.nodes > 1 else ""
    to_set = ["your training script (TRAIN.py: the model, deepspeed.initialize(config=ds_config.json), the data)",
              "the dataset and the tokenizer (in TRAIN.py)", "the optimizer and its learning rate (TRAIN.py or an "
              "\"optimizer\" block)"]
    if c.nodes > 1:
        to_set.append("hostfile: one line per node, 'HOSTNAME slots=" + str(c.devices_per_node) + "'")
    ckpt = (f"checkpoints: model_engine.save_checkpoint(DIR) every {run.checkpoint_interval} steps"
            if run is not None and run.checkpoint_interval else "checkpoints: model_engine.save_checkpoint(DIR)")
    length = (f"the run's length: {run.iterations} steps" if run is not None and run.iterations else
              "the run's length (asap emit --tokens N writes the scheduler's)")
    return Launch(f"deepspeed --num_nodes {c.nodes} --num_gpus {c.devices_per_node}{hosts} TRAIN.py --deepspeed "
                  f"--deepspeed_config {CONFIG}", {}, {}, tuple(to_set) + (ckpt, length),
                  where="once, from the first node (the launcher reaches the others over ssh)" if c.nodes > 1
                  else "on the node")


def emit(job: Job, s, run: RunLength | None = None, strict: bool = False) -> str:
    """The JSON alone (JSON has no comments: the launch goes to ``asap emit``'s stderr and --json's launch)."""
    return json.dumps(config(job, s, run), indent=2) + "\n"
