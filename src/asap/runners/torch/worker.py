"""The trainer's worker: ``entry(FILE)`` in each process ``asap.runners.torch.elastic`` forks (torchrun's agent),
or as torchrun's command entry point ``python -m torch.distributed.run ... -m asap.runners.torch.worker --config FILE``.

FILE is JSON: ``{"device": "cpu"|"cuda", "out_dir": DIR, "pg_timeout_s": S, "jobs": [job, ...]}`` where a job
is ``{model (native mapping), strategy (every key, as ``Strategy.to_dict`` writes it), global_batch, seq_len,
steps, precision, seed, data, lr, profile_dir, capture_dir, first_step_hook}`` (``first_step_hook``: see
``first_step_hook``). Every job needs the same world size; they run one after the
other in the same processes (tests share one launch between several strategies). Each rank writes
``job{j}_rank{r}.json`` into DIR: ``{rank, losses, step_times_s, peak_memory_gb, trace, aux_losses,
chunk_layers}`` (chunk_layers: chunk id -> the transformer-layer indices this rank built it with, as
``asap.spec.layout`` places them); on an exception it writes ``error_job{j}_rank{r}.txt`` (``kind<TAB>one-line
reason``) and exits non-zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from asap.spec.loader import load_model
from asap.spec.strategy import Strategy, parse_strategy
from asap.spec.words import FailureKind
from asap.runners.torch.data import attention_work, document_ids, local_rows, make_source
from asap.runners.torch.model import AUX_LOSS_COEFF, build_model, cross_entropy, set_document_mask
from asap.runners.torch.parallel import (ParallelDims, apply_ac, apply_dp, apply_ep, apply_tp, build_optimizer,
                                 build_schedule, chunk_layer_ids, finalize_grads, pipeline_split)


def log(msg: str) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"[asap.train] {msg}", file=sys.stderr, flush=True)


def peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # Linux reports KiB


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _profiler(profile_dir: str | None, steps: int, device: torch.device, rank: int):
    if not profile_dir:
        return None, None
    from torch.profiler import ProfilerActivity, profile, schedule

    Path(profile_dir).mkdir(parents=True, exist_ok=True)
    path = str(Path(profile_dir) / f"trace_rank{rank}.json")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    # the last step only (``asap.measure``: a profiled step is never timed, the others run unprofiled)
    prof = profile(activities=acts, schedule=schedule(wait=max(0, steps - 1), warmup=0, active=1, repeat=1),
                   record_shapes=True, on_trace_ready=lambda p: p.export_chrome_trace(path))
    return prof, path


def _build_parts(spec, s: Strategy, dims: ParallelDims, device: torch.device, seq: int, seed: int, n_micro: int,
                 bf16: bool):
    """The full model, cut into this rank's pipeline chunks (``asap.spec.layout``) and parallelized:
    (chunks as (chunk id, part), parts, their wrapped modules, whether grads need a manual dp all-reduce)."""
    torch.manual_seed(seed)
    model = build_model(spec, seq, seed)
    stage_parts = (pipeline_split(model, spec, dims.rank_in("pp"), s.pp, s.vpp, s.layer_split) if s.pp > 1
                   else [(0, model)])
    parts, wrapped, manual_dp = [], [], False
    for _, part in stage_parts:
        part.to(device)
        apply_ep(part, dims)
        for moe in part.moe_layers():  # the pipeline schedule divides gradients by the micro-batches itself
            moe.aux_loss_scale = AUX_LOSS_COEFF if s.pp > 1 else AUX_LOSS_COEFF / n_micro
        if s.tp > 1:
            apply_tp(part, dims.tp_mesh, bool(s.sp))
        apply_ac(part, s.recompute)
        w, manual = apply_dp(part, dims, device, torch.bfloat16 if bf16 else None)
        parts.append(part)
        wrapped.append(w)
        manual_dp = manual_dp or manual
    return stage_parts, parts, wrapped, manual_dp


def step_batch(data, job: dict, step: int, gb: int, seq: int):
    """The step's global batch (gb, seq + 1) and, with packed documents, each position's document id: the
    step's samples in the order ``launch.sample_order`` placed them (rows of the seeded stream follow them)."""
    batch = data.batch(step, gb, seq)
    docs = job.get("documents")
    if not docs:
        return batch, None
    order = job["sample_order"][step]
    first = [(step * gb + i) % len(docs) for i in range(gb)]
    row_of = {sample: i for i, sample in enumerate(first)}
    perm = torch.tensor([row_of[sample] for sample in order])
    return batch[perm], document_ids([docs[i] for i in order], seq)


def _pipeline(stage_parts, wrapped, s: Strategy, dims: ParallelDims, device: torch.device, n_micro: int):
    """(the pipeline schedule or None, whether this rank holds the first stage, the last stage)."""
    if s.pp == 1:
        return None, True, True
    from torch.distributed.pipelining import PipelineStage

    n_stages = s.pp * s.vpp
    stages = [PipelineStage(w, sid, n_stages, device, group=dims.pp_mesh.get_group())
              for (sid, _), w in zip(stage_parts, wrapped, strict=True)]
    sids = [sid for sid, _ in stage_parts]
    return build_schedule(stages, s.schedule, n_micro), 0 in sids, (n_stages - 1) in sids


def _accumulate(model, is_ddp: bool, inputs, labels, doc_ids, mbs: int, n_micro: int, cp_context, autocast):
    """Forward and backward of each micro-batch without a pipeline (DDP syncs on the last one only), each with its
    documents' attention mask when there are packed documents; the mean micro-batch loss."""
    total = torch.zeros((), device=inputs.device)
    for i in range(n_micro):
        x = inputs[i * mbs:(i + 1) * mbs].clone()
        y = labels[i * mbs:(i + 1) * mbs].clone()
        sync_ctx = model.no_sync() if is_ddp and i < n_micro - 1 else contextlib.nullcontext()
        set_document_mask(model, None if doc_ids is None else doc_ids[i * mbs:(i + 1) * mbs])
        with sync_ctx, cp_context([(x, 1), (y, 1)]), autocast:
            loss = cross_entropy(model(x), y)
            (loss / n_micro).backward()
        total += loss.detach().float()
    return total / n_micro


def first_step_hook(job: dict, stage_parts, dims: ParallelDims, n_micro: int):
    """The job's first-step callback, or None: ``job["first_step_hook"]`` names a factory ``"module:function"``
    (a callback across the process boundary, by name: the launcher cannot hand this process a function) called
    as ``factory(job, stage_parts, dims, n_micro)`` on every rank; what it returns (or None) is armed before the
    first step's forward (``arm()``) and called after its backward, before the optimizer step
    (``after_backward(job, parts, dims)``). ``asap align`` passes ``asap.numerics.capture:install``."""
    name = job.get("first_step_hook")
    if not name:
        return None
    import importlib

    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)(job, stage_parts, dims, n_micro)


def run_job(job: dict, device: torch.device) -> dict:
    spec = load_model(job["model"])
    s = Strategy(**parse_strategy(job["strategy"], "job.strategy"))
    gb, seq, steps = int(job["global_batch"]), int(job["seq_len"]), int(job["steps"])
    precision, seed, lr = job.get("precision", "fp32"), int(job.get("seed", 0)), float(job.get("lr", 1e-3))
    bf16 = precision == "bf16"
    rank = dist.get_rank()

    dims = ParallelDims.from_strategy(s, job.get("devices_per_node"))
    dims.build_meshes(device.type)
    dp_rank, tp_rank = dims.rank_in("dp"), dims.rank_in("tp")
    local_batch = gb // s.dp
    n_micro = local_batch // s.mbs

    stage_parts, parts, wrapped, manual_dp = _build_parts(spec, s, dims, device, seq, seed, n_micro, bf16)
    chunk_layers = chunk_layer_ids(stage_parts)
    optimizer = build_optimizer(parts, dims, lr)

    schedule, has_first, has_last = _pipeline(stage_parts, wrapped, s, dims, device, n_micro)

    data = make_source(spec.vocab_size, seed, job.get("data"))
    autocast = (torch.autocast(device_type=device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext())
    prof, trace = _profiler(job.get("profile_dir"), steps, device, rank)
    is_ddp = [type(w).__name__ == "DistributedDataParallel" for w in wrapped]
    capture = first_step_hook(job, stage_parts, dims, n_micro)

    cp_context = _cp_context(s, dims, parts)
    losses, step_times, aux = [], [], []
    if prof is not None:
        prof.start()
    docs, works = job.get("documents"), []
    for step in range(steps):
        # the batch is ready before the clock starts, as a prefetching data loader would have it
        inputs, labels, doc_ids = _local_batch(data, job, step, dp_rank, s.dp, device)
        if docs:
            works.append(attention_work(doc_ids))
        if capture is not None and step == 0:
            capture.arm()
        _sync(device)
        t0 = time.perf_counter()
        if schedule is not None:
            local_loss = _pipelined_step(schedule, has_first, has_last, inputs, labels, autocast)
        else:
            local_loss = _accumulate(wrapped[0], is_ddp[0], inputs, labels, doc_ids if docs else None, s.mbs,
                                     n_micro, cp_context, autocast)
        finalize_grads(parts, dims, manual_dp)
        if capture is not None and step == 0:
            capture.after_backward(job, parts, dims)
        optimizer.step()
        optimizer.zero_grad()
        _sync(device)
        step_times.append(time.perf_counter() - t0)

        losses.append(_global_loss(local_loss, has_last and tp_rank == 0 and local_loss is not None, device))
        aux.append(_aux_loss(parts))
        log(f"step {step + 1}/{steps} loss {losses[-1]:.5f} time {step_times[-1]:.3f}s")
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()
    result = {"rank": rank, "losses": losses, "step_times_s": step_times, "peak_memory_gb": peak_memory_gb(device),
              "trace": trace if trace and Path(trace).exists() else None, "aux_losses": aux,
              "device": str(device), "backend": dist.get_backend(), "chunk_layers": chunk_layers,
              **_dispatch_figures(parts), "dp_rank": dp_rank,
              "attention_work": sum(works) / len(works) if works else None}
    dist.barrier()
    return result


def _local_batch(data, job: dict, step: int, dp_rank: int, dp: int, device: torch.device):
    """This data-parallel rank's rows of the step's batch: inputs, labels (the inputs shifted by one) and, with
    packed documents, their document ids (else None)."""
    batch, doc_ids = step_batch(data, job, step, int(job["global_batch"]), int(job["seq_len"]))
    batch = local_rows(batch, dp_rank, dp).to(device)
    if job.get("documents"):
        doc_ids = local_rows(doc_ids, dp_rank, dp).to(device)
    return batch[:, :-1].contiguous(), batch[:, 1:].contiguous(), doc_ids


def _aux_loss(parts) -> float | None:
    """The step's MoE auxiliary loss: the mean over this rank's MoE layers (None without any)."""
    moe_aux = [m.last_aux_loss for p in parts for m in p.moe_layers() if m.last_aux_loss is not None]
    return sum(moe_aux) / len(moe_aux) if moe_aux else None


def _cp_context(s: Strategy, dims: ParallelDims, parts):
    """A function of (buffer, sequence dim) pairs: the context-parallel context that shards them and every part's
    rotary table over cp (a null context with cp = 1)."""

    def cp_context(buffers_with_dims):
        if s.cp == 1:
            return contextlib.nullcontext()
        from torch.distributed.tensor.experimental import context_parallel

        bufs = [b for b, _ in buffers_with_dims] + [p.rope for p in parts]
        dims_ = [d for _, d in buffers_with_dims] + [0] * len(parts)
        return context_parallel(dims.cp_mesh, buffers=bufs, buffer_seq_dims=dims_,
                                no_restore_buffers={b for b, _ in buffers_with_dims})

    return cp_context


def _pipelined_step(schedule, has_first: bool, has_last: bool, inputs, labels, autocast):
    """One step of the pipeline schedule; the mean micro-batch loss on the last stage, else None. The last stage
    keeps no micro-batch's output (``return_outputs=False``, as torchtitan's train.py steps its schedule): by
    default torch's schedule holds every micro-batch's logits until the step ends to merge them, memory the losses
    do not need (benchmarks/memory_cpu.py --seq 2048: +70 MiB a micro-batch on the last stage)."""
    mb_losses: list[torch.Tensor] = []
    with autocast:  # the first stage feeds the inputs, the others receive theirs
        schedule.step(*((inputs,) if has_first else ()), target=labels, losses=mb_losses, return_outputs=False)
    return torch.stack([loss.detach().float() for loss in mb_losses]).mean() if has_last else None


def _global_loss(local_loss, counted: bool, device: torch.device) -> float:
    """The global loss: the mean over the ranks that computed one (last stage, first tp rank; every cp rank)."""
    red = torch.stack([local_loss if counted else torch.zeros((), device=device),
                       torch.ones((), device=device) if counted else torch.zeros((), device=device)]).float()
    dist.all_reduce(red)
    return float(red[0] / red[1])


def _dispatch_figures(parts) -> dict[str, int]:
    """What crossed "nodes" (--devices-per-node) in MoE dispatch, all steps."""
    moes = [m for p in parts for m in p.moe_layers()]
    return {"internode_dispatch_bytes": sum(m.internode_dispatch_bytes for m in moes),
            "dispatch_remote_domains": sum(m.dispatch_remote_domains for m in moes)}


def _error_kind(e: BaseException) -> FailureKind:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, getattr(torch, "OutOfMemoryError", ())) or "out of memory" in text.lower():
        return FailureKind.OOM
    return FailureKind.CRASH


def _reason(e: BaseException) -> str:
    """One line: the innermost exception of the chain (wrappers such as the pipeline stage's only say
    "failed to run forward")."""
    seen = e
    while (inner := seen.__cause__ or seen.__context__) is not None and len(str(seen).strip().splitlines()) != 1:
        seen = inner
    lines = [line.strip() for line in str(seen).strip().splitlines() if line.strip()]
    return f"{type(seen).__name__}: {lines[0][:300] if lines else ''}".strip().rstrip(":")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="asap.runners.torch.worker")
    ap.add_argument("--config", required=True)
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    out = Path(cfg["out_dir"])
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    timeout = timedelta(seconds=float(cfg.get("pg_timeout_s", 600)))
    if cfg.get("device", "cpu") == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("cpu:gloo,cuda:nccl", timeout=timeout, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    job_index = 0
    try:
        for job_index, job in enumerate(cfg["jobs"]):
            log(f"job {job_index + 1}/{len(cfg['jobs'])}: {job['strategy']}")
            res = run_job(job, device)
            (out / f"job{job_index}_rank{rank}.json").write_text(json.dumps(res))
    except BaseException as e:  # noqa: BLE001 - report every failure to the launcher, then exit non-zero
        reason = _reason(e)
        (out / f"error_job{job_index}_rank{rank}.txt").write_text(f"{_error_kind(e)}\t{reason}\n{traceback.format_exc()}")
        traceback.print_exc()
        return 1
    finally:
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return 0


def entry(config_path: str) -> None:
    """The function ``asap.runners.torch.elastic``'s agent runs in each forked worker: ``main`` on the config,
    its non-zero status the process's exit status (the agent reads it as torchrun reads a command's)."""
    rc = main(["--config", config_path])
    if rc:
        sys.exit(rc)


if __name__ == "__main__":
    sys.exit(main())
