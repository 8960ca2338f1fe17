"""A MaxText YAML config (overrides of ``MaxText/configs/base.yml``).

Option names follow MaxText's ``configs/base.yml`` (main branch, 2025): the mesh axes ``ici_*_parallelism``
(within a slice: the cluster's scale-up domain) and ``dcn_*_parallelism`` (across slices) for data, fsdp,
context, tensor, expert and pipeline; ``per_device_batch_size`` (global batch over all devices, fractional
allowed), ``gradient_accumulation_steps``, ``num_pipeline_microbatches``, ``num_layers_per_pipeline_stage``
(pp * vpp stages: the circular pipeline's repeats), ``max_target_length``, ``remat_policy`` (none |
minimal | full; ``custom`` with ``decoder_layer_input: offload`` for offload_act=1; a MaxText policy the
strategy names, ``recompute=save_qkv_proj``, as itself, and ``recompute=custom:...`` as ``custom`` with every
named tensor of ``asap.spec.remat.TENSORS`` set), ``optimizer_memory_host_offload``
(offload_opt=1), ``dtype`` / ``quantization``, and the model's ``base_*`` shape keys.
Axes (the strategy's ``asap.spec.placement.Placement``, as ``asap.search.mesh``): pp -> pipeline, dp -> data
(zero 0) or fsdp (zero 3; with dp_replicate > 1 data = dp_replicate, the replicas, x fsdp = dp / dp_replicate,
MaxText's hybrid sharding: ``dcn_data_parallelism`` across slices, ``ici_fsdp_parallelism`` within), cp -> context, tp -> tensor, ep -> expert (carved out of dp); pipeline and
data/fsdp cross DCN, the others stay on ICI.
Refused: zero 1 and 2, recompute module sets, uneven layer splits, the zero-bubble schedule, dispatchers other
than all-to-all, the expert all-to-all overlap, meshes that would put tensor, context or expert axes across
slices.
"""

from __future__ import annotations

from asap.spec.framework import Dispatcher
from asap.spec import remat
from asap.spec.knobs import Recompute, Schedule
from asap.emit.common import check_runnable, chunk_layers, micro_batches, recompute_modules, refuse
from asap.emit.maxtext_model import stock
from asap.emit.launch import Launch, RunLength
from asap.spec.job import Job
from asap.spec.placement import Placement

NAME = "maxtext"
CONFIG = "maxtext.yml"  # the file name the launch line reads
TRAIN = "python3 -m maxtext.trainers.pre_train.train"  # MaxText 0.2.5's trainer module
VERSION = "MaxText 0.2.5 configs/base.yml"
REMAT = {"none": "none", "selective": "minimal", "full": "full"}
MESH_KEYS = ("data", "fsdp", "context", "tensor", "expert", "pipeline")  # the config's order of the named axes


def mesh(cluster, s) -> dict[str, int]:
    """The ``ici_*`` / ``dcn_*`` axes (zero is 0 or 3 here: ``config`` refuses 1 and 2)."""
    place = Placement.of(s)
    axes = place.named_mesh()
    if axes is None:
        raise refuse("ep", NAME, f"ep={s.ep} not dividing dp={s.dp} (the expert axis is carved out of the batch)")
    dcn = place.dcn_split(cluster.topology.num_domains)
    if dcn is None:
        raise refuse("tp", NAME, f"this mesh over {cluster.topology.num_domains} slices (tensor, context and expert "
                                 "axes must stay within a slice; pipeline and data cross DCN)")
    out = {f"ici_{k}_parallelism": axes[k] // dcn.get(k, 1) for k in MESH_KEYS}
    out.update({f"dcn_{k}_parallelism": dcn.get(k, 1) for k in MESH_KEYS})
    return out


def config(job: Job, s, run: RunLength | None = None, strict: bool = False) -> dict:
    model, cluster, train = job.model, job.cluster, job.train
    check_runnable(NAME, NAME, job, s)
    if s.zero in (1, 2):
        raise refuse("zero", NAME, f"zero={s.zero} (the batch axis is data, zero 0, or fsdp, zero 3)")
    if recompute_modules(s):
        raise refuse("recompute", NAME, f"recompute={s.recompute} (remat_policy is none, minimal or full here)")
    if s.schedule == Schedule.ZB:
        raise refuse("schedule", NAME, "schedule=zb (its pipeline is a circular GPipe-style schedule)")
    if model.moe is not None and s.dispatcher != Dispatcher.ALLTOALL:
        raise refuse("dispatcher", NAME, f"dispatcher={s.dispatcher}")
    if model.moe is not None and s.a2a_overlap:
        raise refuse("a2a_overlap", NAME, "a2a_overlap=1")
    chunks = chunk_layers(model, s)
    if s.pp > 1 and len(set(chunks)) != 1:
        raise refuse("layer_split", NAME, f"an uneven layer split ({'/'.join(map(str, chunks))}): every pipeline "
                                          "stage holds num_layers_per_pipeline_stage layers")
    n_micro = micro_batches(train, s)
    devices = s.devices
    cfg: dict = {"base_config": "base.yml", **mesh(cluster, s)}  # overrides of base.yml (pyconfig._load_config)
    if s.pp > 1:
        ga = 1
        cfg["num_pipeline_microbatches"] = n_micro
        cfg["num_layers_per_pipeline_stage"] = chunks[0]
    else:
        ga = n_micro
    per_device = train.global_batch / (devices * ga)
    cfg["per_device_batch_size"] = int(per_device) if per_device == int(per_device) else per_device
    cfg["gradient_accumulation_steps"] = ga
    cfg["max_target_length"] = train.seq_len
    cfg.update(remat_keys(s))
    if s.offload_act:
        cfg.update(offloaded_remat(s))
    if s.offload_opt:
        cfg["optimizer_memory_host_offload"] = True
    if s.vocab_tiles > 1:  # base.yml: "The logits are tiled into num_vocab_tiling parts along the batch-sequence axis"
        cfg["num_vocab_tiling"] = s.vocab_tiles
    if s.cp > 1 and s.cp_comm == "a2a":  # base.yml context_parallel_strategy (default all_gather); Ulysses on TPU
        cfg["context_parallel_strategy"] = "ulysses"  # on context_sharding "context", base.yml's default
    cfg["dtype"] = {"fp32": "float32", "fp16": "float16"}.get(train.precision, "bfloat16")
    if train.precision == "fp8":
        cfg["quantization"] = "fp8"
    cfg.update(model_keys(model))
    return cfg | run_keys(run or RunLength())


def run_keys(run: RunLength) -> dict:
    """The budget's length (base.yml): steps, learning_rate_schedule_steps (the cosine schedule's length),
    warmup_steps_fraction, checkpoint_period with enable_checkpointing."""
    if run.iterations is None:
        return {}
    assert run.warmup_iters is not None
    return {"steps": run.iterations, "learning_rate_schedule_steps": run.decay_iters,
            "warmup_steps_fraction": run.warmup_iters / run.iterations, "enable_checkpointing": True,
            "checkpoint_period": run.checkpoint_interval}


def launch(job: Job, s, run: RunLength | None = None, strict: bool = False) -> Launch:
    """MaxText's trainer on every host (its README: ``python3 -m MaxText.train CONFIG run_name=...
    base_output_directory=...``; 0.2.5's module is maxtext.trainers.pre_train.train): on a TPU slice every VM
    host runs it (``gcloud compute tpus tpu-vm ssh NAME --worker=all --command=...``), across slices xpk starts
    it on each (``xpk workload create --num-slices S``; the dcn_* axes span them)."""
    slices = job.cluster.topology.num_domains
    where = (f"on every host of each of the {slices} slices (xpk workload create --num-slices {slices} "
             "--command ...)" if slices > 1 else "on every host of the slice (gcloud compute tpus tpu-vm ssh NAME "
             "--worker=all --command ...)")
    to_set = ["run_name=NAME and base_output_directory=gs://BUCKET/PATH (outputs and checkpoints)",
              "the dataset (dataset_type, dataset_path or hf_path)", "the tokenizer (tokenizer_path)",
              "the learning rate (learning_rate)"]
    if run is None or run.iterations is None:
        to_set.append("the run's length (steps, learning_rate_schedule_steps, checkpoint_period: asap emit --tokens "
                      "N writes them)")
    return Launch(f"{TRAIN} {CONFIG} run_name=$RUN_NAME base_output_directory=$OUTPUT_DIR", {}, {}, tuple(to_set),
                  where=where)


# base.yml's named tensors of the 'custom' remat policy (each 'remat', 'device' or 'offload')
CUSTOM_REMAT_TENSORS = ("context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo", "query_proj", "key_proj", "value_proj",
                        "qkv_proj", "out_proj")


def remat_keys(s) -> dict:
    """``remat_policy``: asap's none / selective / full, or the MaxText policy the strategy names
    (``asap.spec.remat``), with every named tensor's setting under ``custom``."""
    if s.recompute.kind != Recompute.MAXTEXT:
        return {"remat_policy": REMAT[s.recompute.label]}
    name = remat.policy_name(s.recompute.code)
    if name != "custom":
        return {"remat_policy": name}
    where = remat.assignment(s.recompute.code)
    return {"remat_policy": "custom", **{t: where[t].label for t in remat.TENSORS}}


def offloaded_remat(s) -> dict:
    """Activation offload as MaxText's offloading remat policies (base.yml): under full recompute ``custom``
    with the layer inputs in host memory and every other named tensor recomputed; under selective
    ``minimal_offloaded``; without recompute ``custom`` with every named tensor (and the layer input) in host
    memory."""
    if s.recompute.label == "selective":  # 'minimal' with its saved matmul outputs on the host
        return {"remat_policy": "minimal_offloaded"}
    other = "remat" if s.recompute.label == "full" else "offload"
    return {"remat_policy": "custom", "decoder_layer_input": "offload", **{t: other for t in CUSTOM_REMAT_TENSORS}}


def model_keys(model) -> dict:
    """The architecture (``asap.emit.maxtext_model``): a stock ``model_name`` and the keys it leaves to the job,
    or the decoder block and every key."""
    m = stock(model)
    return ({"model_name": m.model_name} if m.model_name else {}) | m.keys


def emit(job: Job, s, run: RunLength | None = None, strict: bool = False) -> str:
    import yaml

    run = run or RunLength()
    m = stock(job.model)
    said = (f"# model_name {m.model_name}: MaxText's own definition has every architecture field of {job.model.name}"
            if m.model_name else f"# custom definition: no MaxText model file has every architecture field of "
                                 f"{job.model.name} (its keys below)")
    head = (f"# {VERSION}; asap strategy {s} (this file: {CONFIG})\n{said}\n"
            f"# schedule={s.schedule}: MaxText's circular pipeline; sp={int(s.sp)}: XLA shards activations on the "
            f"tensor axis itself\n{launch(job, s, run).header()}{run.line()}\n")
    return head + yaml.safe_dump(config(job, s, run), sort_keys=False)
