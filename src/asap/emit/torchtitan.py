"""A torchtitan TOML job config (``--job.config_file``).

Option names follow torchtitan v0.2.2 (``torchtitan/config/job_config.py``): ``[parallelism]``
data_parallel_replicate_degree (zero 0, DDP) / data_parallel_shard_degree (FSDP2: zero 3, or zero 2 with
``fsdp_reshard_after_forward = "never"``; with dp_replicate > 1 both: FSDP2 HSDP, replicate x shard = dp,
``ParallelDims``' mesh (dp_replicate, dp_shard) with the replicas outermost), tensor_parallel_degree (always sequence-parallel), pipeline_parallel_
degree, pipeline_parallel_schedule (1F1B, Interleaved1F1B, InterleavedZeroBubble, GPipe; the looped schedules
take pp * vpp stages), pipeline_parallel_microbatch_size, module_fqns_per_model_part (the layer split, chunk by
chunk), context_parallel_degree, expert_parallel_degree, expert_tensor_parallel_degree; ``[training]``
local_batch_size, global_batch_size, seq_len, mixed_precision_param; ``[activation_checkpoint]`` mode none |
selective (``selective_ac_option = "op"``, the op-level policy asap prices) | full; ``[compile]`` enable (on where
the job prices fused kernels, ``--fused-kernels``: the model and the loss, torchtitan's default components);
``[model]`` name and flavor (``asap.emit.torchtitan_model``: a registered flavor, or one the trainer registers
from the emitted arguments) and converters ``quantize.linear.float8`` for fp8.
Refused: zero 1 (no distributed optimizer), recompute module sets, dispatchers other than all-to-all, the
expert all-to-all overlap, tensor parallelism without sequence parallelism, zero-bubble without virtual stages,
fp16.
"""

from __future__ import annotations

from asap.spec.framework import Dispatcher
from asap.spec.knobs import Recompute
from asap.emit.common import check_runnable, chunk_layers, micro_batches, recompute_modules, refuse
from asap.emit.torchtitan_model import model_args
from asap.emit.launch import Launch, RunLength, rendezvous_to_set, torchrun, torchrun_where
from asap.spec.job import Job

NAME = "torchtitan"
CONFIG = "job.toml"  # the file name the launch line reads (--job.config_file)
VERSION = "torchtitan v0.2.2 (torchtitan/config/job_config.py)"
SCHEDULES = {("1f1b", False): "1F1B", ("interleaved", True): "Interleaved1F1B", ("zb", True): "InterleavedZeroBubble",
             ("gpipe", False): "GPipe"}


def config(job: Job, s, run: RunLength | None = None, strict: bool = False) -> dict:
    model, train = job.model, job.train
    check_runnable(NAME, NAME, job, s)
    if s.zero == 1:
        raise refuse("zero", NAME, "zero=1 (FSDP2 shards parameters too: use zero 0, 2 or 3)")
    if recompute_modules(s):
        raise refuse("recompute", NAME, f"recompute={s.recompute} ([activation_checkpoint] mode is none, "
                                        "selective or full)")
    if model.moe is not None and s.dispatcher not in (Dispatcher.ALLTOALL, Dispatcher.DEDUP):
        raise refuse("dispatcher", NAME, f"dispatcher={s.dispatcher} (its MoE dispatch is all-to-all or DeepEP)")
    if model.moe is not None and s.a2a_overlap:
        raise refuse("a2a_overlap", NAME, "a2a_overlap=1 (no expert all-to-all overlap outside DualPipeV)")
    titan = model_args(model, train.seq_len, strict)
    looped = s.vpp > 1
    schedule = SCHEDULES.get((s.schedule.label, looped))
    if s.pp > 1 and schedule is None:
        raise refuse("schedule", NAME, f"schedule={s.schedule} with vpp={s.vpp}")
    par: dict = {
        # zero 0: DDP over dp; zero 2/3: FSDP2 over dp, or HSDP, dp_replicate replicas of dp/dp_replicate shards
        "data_parallel_replicate_degree": s.dp if s.zero == 0 else s.dp_replicate,
        "data_parallel_shard_degree": 1 if s.zero == 0 else s.dp // s.dp_replicate,
        "tensor_parallel_degree": s.tp,
        "pipeline_parallel_degree": s.pp,
        "context_parallel_degree": s.cp,
        "expert_parallel_degree": s.ep,
        "expert_tensor_parallel_degree": s.etp if model.moe is not None else 1,
    }
    if model.moe is not None and s.dispatcher == Dispatcher.DEDUP:  # the stack rules hold ep > 1, etp = 1
        par["expert_parallel_comm_backend"] = "deepep"
    if s.zero == 2:
        par["fsdp_reshard_after_forward"] = "never"
    training = {"global_batch_size": train.global_batch, "seq_len": train.seq_len,
                "mixed_precision_param": "float32" if train.precision == "fp32" else "bfloat16"}
    if s.offload_opt:  # FSDP2's CPUOffloadPolicy: the sharded states and the optimizer step on the host
        training["enable_cpu_offload"] = True
    if s.pp > 1:
        # a pipeline step takes the rank's whole batch and cuts it into micro-batches of mbs
        training["local_batch_size"] = train.global_batch // s.dp
        par["pipeline_parallel_schedule"] = schedule
        par["pipeline_parallel_microbatch_size"] = s.mbs
        chunks = chunk_layers(model, s)
        fqns, start = [], 0
        for j, n in enumerate(chunks):
            part = (["tok_embeddings"] if j == 0 else []) + [f"layers.{i}" for i in range(start, start + n)]
            if j == len(chunks) - 1:
                part += ["norm", "output"]
            fqns.append(part)
            start += n
        par["module_fqns_per_model_part"] = fqns
    else:
        # without a pipeline, local_batch_size is the micro-batch and the rest is gradient accumulation
        training["local_batch_size"] = s.mbs
    ac = {"mode": s.recompute.label}
    if s.recompute.kind == Recompute.SELECTIVE:
        ac["selective_ac_option"] = "op"
    model_table: dict = {"name": titan.name, "flavor": titan.flavor}
    if train.precision == "fp8":
        model_table["converters"] = ["quantize.linear.float8"] + (["quantize.grouped_mm.float8"] if model.moe else [])
    out = {"job": {"description": f"asap: {model.name} {s}"}, "model": model_table,
           "training": training, "parallelism": par, "activation_checkpoint": ac,
           "compile": {"enable": train.fused_elementwise is True}}
    assert micro_batches(train, s) >= 1
    return out | run_tables(run or RunLength())


def run_tables(run: RunLength) -> dict:
    """The budget's length (job_config.py): [training] steps, [lr_scheduler] warmup_steps with a cosine decay
    over the remaining steps (decay_ratio unset), [checkpoint] enable and interval."""
    if run.iterations is None:
        return {}
    return {"lr_scheduler": {"warmup_steps": run.warmup_iters, "decay_type": "cosine"},
            "checkpoint": {"enable": True, "interval": run.checkpoint_interval}}


def launch(job: Job, s, run: RunLength | None = None, strict: bool = False) -> Launch:
    """torchtitan's run_train.sh: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun ... -m
    torchtitan.train --job.config_file FILE``; a custom flavor runs its registration file in -m's place
    (``asap.emit.torchtitan_model.registration_file``: it registers, then runs torchtitan.train)."""
    from asap.emit.torchtitan_model import registration_file

    reg = registration_file(job.model, job.train.seq_len, CONFIG, strict)
    program = (reg[0] if reg else "-m torchtitan.train") + f" --job.config_file {CONFIG}"
    to_set = ["the dataset ([training] dataset, dataset_path)", "the tokenizer ([model] hf_assets_path)",
              "the output folder ([job] dump_folder; checkpoints under it)", "the learning rate ([optimizer] lr)"]
    if run is None or run.iterations is None:
        to_set.append("the run's length ([training] steps, [lr_scheduler] warmup_steps, [checkpoint] interval: "
                      "asap emit --tokens N writes them)")
    from asap.emit.torchtitan_model import differences

    return Launch(torchrun(job, program), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                  dict([reg]) if reg else {}, tuple(to_set) + rendezvous_to_set(job), differences(job.model),
                  torchrun_where(job))


def emit(job: Job, s, run: RunLength | None = None, strict: bool = False) -> str:
    from asap.emit.serialize import toml_dumps

    model, train = job.model, job.train
    run = run or RunLength()
    cfg = config(job, s, run, strict)
    if run.iterations is not None:
        cfg["training"]["steps"] = run.iterations
    head = f"# {VERSION} (this file: {CONFIG})\n"
    if not model_args(model, train.seq_len, strict).registered:
        head += (f"# [model] custom definition: no torchtitan {cfg['model']['name']} flavor has every architecture "
                 f"field of {model.name}: the launch line runs the companion file that registers "
                 f"{cfg['model']['flavor']} in the trainer process first\n")
    else:
        head += (f"# [model] torchtitan's own {cfg['model']['name']} flavor {cfg['model']['flavor']}: every architecture "
                 f"field equals {model.name}'s\n")
    return head + launch(job, s, run, strict).header() + run.line() + "\n" + toml_dumps(cfg)
