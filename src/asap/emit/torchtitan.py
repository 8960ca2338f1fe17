"""A torchtitan TOML job config (``--job.config_file``).

Option names follow torchtitan v0.2.2 (``torchtitan/config/job_config.py``): ``[parallelism]``
data_parallel_replicate_degree (zero 0, DDP) / data_parallel_shard_degree (FSDP2: zero 3, or zero 2 with
``fsdp_reshard_after_forward = "never"``; with dp_replicate > 1 both: FSDP2 HSDP, replicate x shard = dp,
``ParallelDims``' mesh (dp_replicate, dp_shard) with the replicas outermost), tensor_parallel_degree (always sequence-parallel), pipeline_parallel_
degree, pipeline_parallel_schedule (1F1B, Interleaved1F1B, InterleavedZeroBubble, GPipe; the looped schedules
take pp * vpp stages), pipeline_parallel_microbatch_size, module_fqns_per_model_part (the layer split, chunk by
chunk), context_parallel_degree, expert_parallel_degree, expert_tensor_parallel_degree; ``[training]``
local_batch_size, global_batch_size, seq_len, mixed_precision_param; ``[activation_checkpoint]`` mode none |
selective (``selective_ac_option = "op"``, the op-level policy asap prices) | full; ``[compile]`` enable (off:
asap prices eager kernels); ``[model]`` name and flavor (``asap.emit.torchtitan_model``: a registered flavor, or
one the trainer registers from the emitted arguments) and converters ``quantize.linear.float8`` for fp8.
Refused: zero 1 (no distributed optimizer), recompute module sets, dispatchers other than all-to-all, the
expert all-to-all overlap, tensor parallelism without sequence parallelism, zero-bubble without virtual stages,
fp16.
"""

from __future__ import annotations

from asap.spec.framework import Dispatcher
from asap.spec.knobs import Recompute
from asap.emit.common import check_runnable, chunk_layers, micro_batches, recompute_modules, refuse
from asap.emit.torchtitan_model import model_args
from asap.spec.job import Job

NAME = "torchtitan"
VERSION = "torchtitan v0.2.2 (torchtitan/config/job_config.py)"
SCHEDULES = {("1f1b", False): "1F1B", ("interleaved", True): "Interleaved1F1B", ("zb", True): "InterleavedZeroBubble",
             ("gpipe", False): "GPipe"}


def config(job: Job, s) -> dict:
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
    titan = model_args(model, train.seq_len)
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
           "training": training, "parallelism": par, "activation_checkpoint": ac, "compile": {"enable": False}}
    assert micro_batches(train, s) >= 1
    return out


def emit(job: Job, s) -> str:
    from asap.emit.serialize import toml_dumps

    model, train = job.model, job.train
    cfg = config(job, s)
    head = f"# {VERSION}\n"
    if not model_args(model, train.seq_len).registered:
        head += (f"# [model] custom definition: no torchtitan {cfg['model']['name']} flavor has every architecture "
                 f"field of {model.name}; register {cfg['model']['flavor']} in the trainer process first,\n"
                 "# asap.emit.torchtitan_model.register_flavor(name, flavor, args) with "
                 "model_args_json(model, seq_len)'s fields\n")
    else:
        head += (f"# [model] torchtitan's own {cfg['model']['name']} flavor {cfg['model']['flavor']}: every architecture "
                 f"field equals {model.name}'s\n")
    return head + toml_dumps(cfg)
